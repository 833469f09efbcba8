package store

import "github.com/sluicehq/sluice/throttle"

// AllowanceSpendColumns are allowanceSpendColumns, for the test that holds them to runUsage.spendRelease.
var AllowanceSpendColumns = allowanceSpendColumns

// CompletedSpendRelease is t's release on the allowances of its limits (Charged left empty) when
// CompleteMany completes it with p, and the usage as completeSQL takes it (completeUsage): tokens,
// their output part, and money.
func CompletedSpendRelease(t Ticket, p CompleteParams) (sr throttle.SpendRelease, total, output, money int64) {
	s := completeUsage(p)
	return s.spendRelease(t), s.total, s.output, s.money
}
