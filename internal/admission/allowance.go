package admission

import (
	"fmt"

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

// EstimateMoney is the money a ticket on model whose token estimate is c reserves from its limits'
// money allowances, by prices: an error when the table does not price model, or when the estimate is
// more than an allowance may hold (throttle.MaxAllowanceAmount). The plugin's routes and the gate's
// requests price their estimates with it.
func EstimateMoney(prices *throttle.PriceTable, model string, c throttle.Cost) (int64, error) {
	money, err := prices.Estimate(model, c)
	if err == nil && money > throttle.MaxAllowanceAmount {
		err = fmt.Errorf("%d micro-units, more than an allowance may hold (%d)", money, throttle.MaxAllowanceAmount)
	}
	return money, err
}
