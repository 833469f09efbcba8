package words

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// Holds is one sentence on what holds queued ticket t now (e.WaitsFor and e.Key), with its figures:
// "waits for concurrency of tenant:acme (1/1 in flight); 1 ticket ahead of it there". It starts in
// lower case and has no final period.
func Holds(e throttle.Explanation, t store.Ticket) string {
	switch e.WaitsFor {
	case throttle.WaitNothing:
		return "nothing holds it: every limit has room, and " + nothingAhead(e) + "; the next claim admits it"
	case throttle.WaitNotBefore:
		return "waits for its retry's backoff: not before " + Until(t.NotBefore, e.Now)
	case throttle.WaitUnknownLimit:
		return fmt.Sprintf("waits for limit %s, which does not exist: no claim admits it until the limit is created (sluice limits set %s --create ...)",
			e.Key, e.Key)
	case throttle.WaitAhead:
		l, _ := limitOf(e, e.Line)
		s := fmt.Sprintf("waits behind %s ahead in %s", TicketCount(l.Ahead), e.Line)
		if l.AheadCost != (throttle.Cost{}) {
			s += " (their cost " + CostText(l.AheadCost) + ")"
		}
		return s + "; every limit has room for it" + heldElsewhere(l)
	}
	l, ok := limitOf(e, e.Key)
	if !ok {
		return "waits for " + WaitWords(e.WaitsFor, e.Key)
	}
	s := "waits for " + binding(l, SpendOf(e, t), e.Now).why
	if l.Ahead > 0 {
		s += "; " + TicketCount(l.Ahead) + " ahead of it there"
	}
	if o := Overdue(l, e.Now); o != "" {
		s += "; " + o
	}
	if line, ok := limitOf(e, e.Line); ok {
		s += heldElsewhere(line)
	}
	return s
}

// nothingAhead says that no ticket goes before the ticket of e, which nothing holds: none is ahead,
// or those before it in its line wait for other limits.
func nothingAhead(e throttle.Explanation) string {
	l, _ := limitOf(e, e.Line)
	switch l.HeldElsewhere {
	case 0:
		return "no ticket is ahead of it"
	case 1:
		return "the ticket before it in " + e.Line + " waits for other limits"
	}
	return "the " + TicketCount(l.HeldElsewhere) + " before it in " + e.Line + " wait for other limits"
}

// Expected is when the ticket of e is expected to be admitted: "in 30s (at 12:00:30 UTC)", with its
// likely range when recent runs vary; "now, at the next claim"; or "not known: " and why.
func Expected(e throttle.Explanation) string {
	switch {
	case e.Refused != nil:
		return "none: the next claim refuses it"
	case e.Estimate.IsZero():
		return "not known: " + OrNone(e.Unknown)
	case !e.Estimate.After(e.Now):
		return "now, at the next claim"
	}
	return In(e.Estimate, e.Now) + likely(e.Estimate, e.EstimateLow, e.EstimateHigh, e.Now)
}

// Refused says that the next claim refuses ticket t of e for a spent allowance, which, of which
// limit, and why it refuses rather than let the ticket wait; empty when it does not.
func Refused(e throttle.Explanation, t store.Ticket) string {
	if e.Refused == nil {
		return ""
	}
	what := e.Refused.Error()
	for _, l := range e.Limits {
		if l.Spent != nil && l.Spent.Allowance.Key() == e.Refused.Allowance.Key() {
			what = binding(l, SpendOf(e, t), e.Now).why
			break
		}
	}
	return fmt.Sprintf("it will be refused: %s; the next claim fails its activity (%s)", what, refusedWhy(*e.Refused, e.Now))
}

// refusedWhy says why a spent allowance refuses the ticket rather than let it wait.
func refusedWhy(s throttle.Spent, now time.Time) string {
	switch {
	case s.Allowance.OnSpent == throttle.OnSpentRefuse:
		return "the allowance refuses when spent"
	case s.ResetAt.IsZero():
		return "no window will admit it"
	case s.Deadline.IsZero():
		return "the allowance waits, but not past the call's deadline"
	}
	return "its deadline, " + Clock(s.Deadline, now) + ", comes before the reset"
}

// Expires says that ticket t's deadline comes before its expected admission (e.Expires), when it
// does and it is not refused first; else empty.
func Expires(e throttle.Explanation, t store.Ticket) string {
	if !e.Expires || e.Refused != nil {
		return ""
	}
	return "it expires first: its deadline, " + Until(t.Deadline, e.Now) + ", comes before the expected admission; Temporal is expected to time it out"
}

// Settled says what became of ticket t, which is not queued: when it was admitted, and what holds it
// now, or when it finished and how, or that it was handed back to Temporal, as which attempt.
func Settled(t store.Ticket) string {
	admitted := "admitted at " + Stamp(t.AdmittedAt) + " after waiting " + RoundDur(t.Waited(t.AdmittedAt))
	switch t.State {
	case store.TicketStateAdmitted:
		return admitted + "; it holds its limits while its owner (" + Shown(t.Owner) + ") starts it"
	case store.TicketStateRunning:
		return admitted + "; running, it holds its limits until it finishes"
	case store.TicketStateFinished:
		if r, err := store.TicketRefusal(t); err == nil {
			return "refused at " + Stamp(t.FinishedAt) + ", never admitted: " + refusal(r) + "; the refusal waits to be delivered to Temporal"
		}
		s := "finished at " + Stamp(t.FinishedAt) + Outcome(t.OutcomeKind) + ", "
		if t.AdmittedAt.IsZero() {
			s += "never admitted"
		} else {
			s += admitted
		}
		return s + "; its outcome waits to be delivered to Temporal"
	case store.TicketStateReturned:
		n := strconv.Itoa(t.Attempt)
		return "handed back to Temporal at " + Stamp(t.FinishedAt) + " as attempt " + n + ": Temporal retries it only if its retry policy allows more than " +
			n + " attempts, and the retry then takes this ticket's place in line"
	}
	return "state " + string(t.State)
}

// refusal says why a claim refused a ticket: which allowance of which limit was spent, by how much,
// and when it resets (or has room again), or that no window will admit the call, or that the call's
// deadline comes first.
func refusal(r throttle.Refusal) string {
	sp, a := r.Spent, r.Spent.Allowance
	s := fmt.Sprintf("allowance %s of %s was spent: used %s of %s, the call needed %s", a, r.Limit, Amount(a, sp.Used), Amount(a, a.Amount), Amount(a, sp.Needs))
	if sp.ResetAt.IsZero() {
		return s + "; the call needs more than the whole allowance, so no window will admit it"
	}
	if a.Calendar != "" {
		s += "; it resets at " + zoned(a, sp.ResetAt)
	} else {
		s += "; it has room again at " + Stamp(sp.ResetAt)
	}
	if !sp.Deadline.IsZero() && a.OnSpent != throttle.OnSpentRefuse {
		s += ", after the call's deadline, " + Stamp(sp.Deadline)
	}
	return s
}

// zoned is instant t of calendar allowance a, in UTC and, for an allowance in a zone, on its clock:
// "2026-01-02 08:00:00 UTC (2026-01-02 00:00 PST)".
func zoned(a throttle.Allowance, t time.Time) string {
	if a.Zone == "" {
		return Stamp(t)
	}
	loc, err := time.LoadLocation(a.Zone)
	if err != nil {
		return Stamp(t)
	}
	return Stamp(t) + " (" + t.In(loc).Format("2006-01-02 15:04 MST") + ")"
}

// outcomes are the outcome kinds of a finished ticket (pgqueue's Outcome constants) in words, as
// they follow "finished at ...".
var outcomes = map[string]string{
	store.OutcomeCompleted:  " with a result",
	store.OutcomeFailed:     " with a failure",
	store.OutcomeCanceled:   ", canceled",
	store.OutcomePending:    ", pending: the activity completes itself asynchronously",
	store.OutcomeHandedBack: ", handed back as a retryable failure (its owner stopped before running it to the end)",
	store.OutcomeRefused:    ", refused",
}

// Outcome is how a ticket finished (its outcome kind), in words that follow "finished at ...": " with
// a result", " with a failure", ", handed back (...)"; an unknown kind in parentheses, none empty.
func Outcome(kind string) string {
	if s, ok := outcomes[kind]; ok {
		return s
	}
	if kind == "" {
		return ""
	}
	return " (" + kind + ")"
}
