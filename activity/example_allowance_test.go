package activity_test

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	"github.com/sluicehq/sluice/throttle"
)

// A workflow tells a refusal for a spent allowance from any other failure with AsAllowanceSpent, and
// reads which allowance, its use and its reset from the detail. Here the error is built as Sluice's
// dispatcher builds it; in a workflow it is what an activity's Future returns.
func ExampleAsAllowanceSpent() {
	a, _ := throttle.ParseAllowance("usd=5.00/day@America/Los_Angeles")
	reset := time.Date(2026, 2, 11, 8, 0, 0, 0, time.UTC)
	err := sluiceactivity.NewAllowanceSpentError("tenant:team", throttle.Spent{Allowance: a, Used: 4_950_000, Needs: 85_000, ResetAt: reset})

	if spent, ok := sluiceactivity.AsAllowanceSpent(err); ok {
		fmt.Printf("%s of %s: %d of %d micro-units used, room again at %s\n", spent.Allowance, spent.Limit, spent.Used, spent.Allowance.Amount,
			spent.ResetAt.Format(time.RFC3339))
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		fmt.Println(appErr.Type(), "non-retryable:", appErr.NonRetryable())
		fmt.Println(appErr.Message())
	}
	_, ok := sluiceactivity.AsAllowanceSpent(errors.New("connection reset"))
	fmt.Println("another failure:", ok)

	// Output:
	// usd=5.00/day@America/Los_Angeles of tenant:team: 4950000 of 5000000 micro-units used, room again at 2026-02-11T08:00:00Z
	// SluiceAllowanceSpent non-retryable: true
	// sluice: limit tenant:team: allowance usd=5.00/day@America/Los_Angeles spent: used 4.95 USD of 5.00 USD, the call needs 0.085 USD; resets at 2026-02-11T08:00:00Z (2026-02-11 00:00 PST)
	// another failure: false
}
