package admission

import (
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/throttle"
)

// ErrTypeAllowanceSpent is the type of the non-retryable application error an activity fails with
// when Sluice refuses it because an allowance of one of its limits is spent: the allowance says
// refuse (throttle.OnSpentRefuse), the call needs more than the whole allowance, or the activity's
// deadline (ScheduleToClose) comes before the allowance resets. A workflow branches on it with
// sluiceactivity.AsAllowanceSpent, or by comparing temporal.ApplicationError's Type.
const ErrTypeAllowanceSpent = "SluiceAllowanceSpent"

// AllowanceSpent is the detail of an ErrTypeAllowanceSpent error: which allowance of which limit,
// what it had counted, and when it has room again.
type AllowanceSpent struct {
	// Limit is the key of the limit whose allowance is spent ("tenant:free").
	Limit string `json:"limit"`
	// Allowance is the allowance in the operators' syntax (tokens=50000/day@America/Los_Angeles), and
	// Meter what it counts (requests, tokens, input_tokens, output_tokens, money); Currency the
	// currency of a money allowance.
	Allowance string         `json:"allowance"`
	Meter     throttle.Meter `json:"meter"`
	Currency  string         `json:"currency,omitempty"`
	// Used is what the allowance had counted in its window, Amount what it allows, and Needs what the
	// refused call would have counted (money in micro-units).
	Used   int64 `json:"used"`
	Amount int64 `json:"amount"`
	Needs  int64 `json:"needs"`
	// ResetAt is when the allowance has room for the call again (a calendar window's end); zero when
	// it never will (the call needs more than the whole allowance).
	ResetAt time.Time `json:"reset_at,omitzero"`
	// WindowStart and WindowEnd bound a calendar allowance's current window; zero for a rolling one.
	WindowStart time.Time `json:"window_start,omitzero"`
	WindowEnd   time.Time `json:"window_end,omitzero"`
}

// NewAllowanceSpentError is the error an activity refused for limit's spent allowance fails with: a
// non-retryable temporal.ApplicationError of type ErrTypeAllowanceSpent whose message names the
// allowance, what was used and when it resets (and s.Deadline when it is why: throttle.Spent.Error),
// and whose detail is an AllowanceSpent. Sluice's
// dispatcher builds it; sluiceactivity re-exports it.
func NewAllowanceSpentError(limit string, s throttle.Spent) error {
	a := s.Allowance
	d := AllowanceSpent{Limit: limit, Allowance: a.String(), Meter: a.Meter, Currency: a.Currency, Used: s.Used,
		Amount: a.Amount, Needs: s.Needs, ResetAt: s.ResetAt, WindowStart: s.WindowStart, WindowEnd: s.WindowEnd}
	return temporal.NewNonRetryableApplicationError("sluice: limit "+limit+": "+s.Error(), ErrTypeAllowanceSpent, nil, d)
}
