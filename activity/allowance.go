package activity

import (
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/throttle"
)

// ErrTypeAllowanceSpent is the type of the non-retryable application error an activity fails with
// when Sluice refuses it because an allowance of one of its limits is spent: the allowance says
// refuse (throttle.OnSpentRefuse), the call needs more than the whole allowance, or the activity's
// deadline (ScheduleToClose) comes before the allowance resets. A workflow branches on it with
// AsAllowanceSpent, or by comparing temporal.ApplicationError's Type.
const ErrTypeAllowanceSpent = admission.ErrTypeAllowanceSpent

// AllowanceSpent is the detail of an ErrTypeAllowanceSpent error: throttle.Refusal (see there), the
// limit and its spent allowance, and when it has room again.
type AllowanceSpent = throttle.Refusal

// NewAllowanceSpentError is the error an activity refused for limit's spent allowance fails with: a
// non-retryable temporal.ApplicationError of type ErrTypeAllowanceSpent whose message names the
// allowance, what was used and when it resets (and s.Deadline when it is why: throttle.Spent.Error),
// and whose detail is the AllowanceSpent {Limit: limit, Spent: s}. Sluice's dispatcher builds it; it
// is exported for tests and for activities that refuse work themselves.
func NewAllowanceSpentError(limit string, s throttle.Spent) error {
	return admission.NewAllowanceSpentError(throttle.Refusal{Limit: limit, Spent: s})
}

// AsAllowanceSpent reports whether err (an activity's error, as a workflow receives it) is a refusal
// for a spent allowance, and if so its detail:
//
//	if spent, ok := sluiceactivity.AsAllowanceSpent(err); ok {
//		// tell the user their plan's allowance resets at spent.ResetAt
//	}
func AsAllowanceSpent(err error) (AllowanceSpent, bool) {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != ErrTypeAllowanceSpent {
		return AllowanceSpent{}, false
	}
	var d AllowanceSpent
	if appErr.HasDetails() {
		if derr := appErr.Details(&d); derr != nil {
			return AllowanceSpent{}, true
		}
	}
	return d, true
}
