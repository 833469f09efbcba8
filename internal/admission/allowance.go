package admission

import (
	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/throttle"
)

// ErrTypeAllowanceSpent is the Temporal error type of a refusal for a spent allowance; users know it
// as sluiceactivity.ErrTypeAllowanceSpent, documented there. It lives here, beside
// NewAllowanceSpentError, so that the dispatcher's deliverer, which builds the error, need not import
// the public activity package. Workflows in every SDK match on its value: it never changes.
const ErrTypeAllowanceSpent = "SluiceAllowanceSpent"

// NewAllowanceSpentError is the error an activity refused by r fails with: a non-retryable
// temporal.ApplicationError of type ErrTypeAllowanceSpent whose message is r.Error() and whose detail
// is r. Sluice's deliverer builds it; sluiceactivity.NewAllowanceSpentError wraps it.
func NewAllowanceSpentError(r throttle.Refusal) error {
	return temporal.NewNonRetryableApplicationError(r.Error(), ErrTypeAllowanceSpent, nil, r)
}
