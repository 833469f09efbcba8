package cli

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// allowanceDimension is allowance a of limit key, in state st, as it stands towards a ticket spending
// sp at now: what it counted in its window, what the ticket needs, and when it resets.
func allowanceDimension(a throttle.Allowance, key string, st throttle.AllowanceState, sp throttle.Spend, now time.Time) dimension {
	used, need := a.Used(st, now), a.Of(sp)
	figures := fmt.Sprintf("%s: used %s of %s, needs %s", a, amount(a, used), amount(a, a.Amount), amount(a, need))
	why := fmt.Sprintf("allowance %s of %s: used %s of %s, needs %s", a, key, amount(a, used), amount(a, a.Amount), amount(a, need))
	if d := a.Check(st, now, need); !d.OK() {
		switch {
		case d.RetryAt.IsZero():
			why += "; more than the whole allowance: no window admits it"
		case a.Calendar != "":
			figures += ", resets " + clock(d.RetryAt, now)
			why += "; resets " + until(d.RetryAt, now)
		default:
			figures += ", room " + clock(d.RetryAt, now)
			why += "; room again " + until(d.RetryAt, now)
		}
	}
	return dimension{throttle.ReasonAllowance.String(), figures, why, float64(used+need) / float64(a.Amount)}
}

// spendOf is what the ticket of e counts against allowances: its reservation and its money.
func spendOf(e throttle.Explanation, t pgqueue.Ticket) throttle.Spend {
	return throttle.Spend{Tokens: e.Cost, Money: t.CostMoney}
}

// refusedWhy says why a spent allowance refuses the ticket rather than let it wait. The refusal's own
// words (Spent.Error) give the deadline that comes before the reset.
func refusedWhy(s throttle.Spent) string {
	switch {
	case s.Allowance.OnSpent == throttle.OnSpentRefuse:
		return "the allowance refuses when spent"
	case s.ResetAt.IsZero():
		return "no window will admit it"
	}
	return "the allowance waits, but not past the call's deadline"
}
