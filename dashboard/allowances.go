package dashboard

import (
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// AllowanceUse is how one allowance of a limit a queued ticket draws on stands towards the ticket at
// its explanation's instant: the allowance's status, as api/status serves it on the key's card
// (allowance, spec, used, remaining, window_start, resets_at), and Needs, what the ticket would count
// against it. Amounts are in the meter's unit, money in micro-units (1,000,000 is one unit of the
// currency).
type AllowanceUse struct {
	pgqueue.AllowanceStatus
	Needs int64 `json:"needs"`
}

// allowanceUses are, by limit key, the allowances of the limits e explains for queued ticket t, from
// the states the explanation read: the figures of its limits' table and of its sentence agree. Nil
// when no limit of the ticket has allowances.
func allowanceUses(t pgqueue.Ticket, e *throttle.Explanation) map[string][]AllowanceUse {
	if e == nil {
		return nil
	}
	sp := throttle.Spend{Tokens: e.Cost, Money: t.CostMoney}
	var out map[string][]AllowanceUse
	for _, w := range e.Limits {
		if len(w.Limit.Allowances) == 0 {
			continue
		}
		if out == nil {
			out = map[string][]AllowanceUse{}
		}
		for i, st := range pgqueue.AllowanceStatuses(w.Limit, w.State, e.Now) {
			out[w.Key] = append(out[w.Key], AllowanceUse{AllowanceStatus: st, Needs: w.Limit.Allowances[i].Of(sp)})
		}
	}
	return out
}

// refusalOf is the refusal of a ticket a claim refused for a spent allowance (outcome "refused"),
// nil for any other ticket or a refusal that does not decode.
func refusalOf(t pgqueue.Ticket) *pgqueue.Refusal {
	if t.OutcomeKind != pgqueue.OutcomeRefused {
		return nil
	}
	r, err := pgqueue.TicketRefusal(t)
	if err != nil {
		return nil
	}
	return &r
}
