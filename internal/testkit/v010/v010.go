// Package v010 holds, for tests, the shapes of Sluice 0.1.0's public types that later releases must
// still decode or be decoded into: frozen, never to change with the current code.
package v010

import (
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// AllowanceSpent is the detail of a SluiceAllowanceSpent error as sluiceactivity.AllowanceSpent
// declared it in 0.1.0: a workflow compiled against 0.1.0 decodes the detail into it.
type AllowanceSpent struct {
	Limit       string         `json:"limit"`
	Allowance   string         `json:"allowance"`
	Meter       throttle.Meter `json:"meter"`
	Currency    string         `json:"currency,omitempty"`
	Used        int64          `json:"used"`
	Amount      int64          `json:"amount"`
	Needs       int64          `json:"needs"`
	ResetAt     time.Time      `json:"reset_at,omitzero"`
	WindowStart time.Time      `json:"window_start,omitzero"`
	WindowEnd   time.Time      `json:"window_end,omitzero"`
}
