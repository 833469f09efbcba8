package cli

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// settled says when a ticket that is not queued was admitted, or finished.
func settled(t pgqueue.Ticket) string {
	admitted := "admitted at " + stamp(t.AdmittedAt) + " after waiting " + roundDur(t.Waited(t.AdmittedAt))
	switch t.State {
	case pgqueue.TicketStateAdmitted:
		return admitted + "; it holds its limits while its owner (" + shown(t.Owner) + ") starts it"
	case pgqueue.TicketStateRunning:
		return admitted + "; running, it holds its limits until it finishes"
	case pgqueue.TicketStateFinished:
		if r, err := pgqueue.TicketRefusal(t); err == nil {
			return "refused at " + stamp(t.FinishedAt) + ", never admitted: " + r.Error() + "; the refusal waits to be delivered to Temporal"
		}
		s := "finished at " + stamp(t.FinishedAt) + " (" + orDash(t.OutcomeKind) + "), "
		if t.AdmittedAt.IsZero() {
			s += "never admitted"
		} else {
			s += admitted
		}
		return s + "; its outcome waits to be delivered to Temporal"
	case pgqueue.TicketStateReturned:
		return "handed back to Temporal at " + stamp(t.FinishedAt) + "; if its retry policy allows another attempt, the retry takes its place in line"
	}
	return "state " + string(t.State)
}

// holds is one sentence on what holds queued ticket t now (e.WaitsFor and e.Key), with its figures.
func holds(e throttle.Explanation, t pgqueue.Ticket) string {
	switch e.WaitsFor {
	case throttle.WaitNothing:
		return "nothing holds it: every limit has room and no ticket is ahead of it; the next claim admits it"
	case throttle.WaitNotBefore:
		return "waits for its retry's backoff: not before " + until(t.NotBefore, e.Now)
	case throttle.WaitUnknownLimit:
		return fmt.Sprintf("waits for limit %s, which does not exist: no claim admits it until the limit is created (sluice limits set %s --create ...)",
			e.Key, e.Key)
	case throttle.WaitAhead:
		l, _ := limitOf(e, e.Line)
		s := fmt.Sprintf("waits behind %s ahead in %s", ticketCount(l.Ahead), e.Line)
		if l.AheadCost != (throttle.Cost{}) {
			s += " (their cost " + costText(l.AheadCost) + ")"
		}
		return s + "; every limit has room for it" + heldElsewhere(l)
	}
	l, ok := limitOf(e, e.Key)
	if !ok {
		return "waits for " + e.WaitsFor + " of " + e.Key
	}
	s := "waits for " + binding(l, spendOf(e, t), e.Now).why
	if l.Ahead > 0 {
		s += "; " + ticketCount(l.Ahead) + " ahead of it there"
	}
	if l.Overdue > 0 {
		s += fmt.Sprintf("; %s holding it ran longer than every recent run (the longest since %s), so it is expected by its deadline at the latest",
			ticketCount(l.Overdue), stamp(l.OverdueSince))
	}
	if line, ok := limitOf(e, e.Line); ok {
		s += heldElsewhere(line)
	}
	return s
}

// heldElsewhere says how many tickets before this one in line l other limits hold back, when any:
// they are not waited for.
func heldElsewhere(l throttle.LimitWait) string {
	if l.HeldElsewhere == 0 {
		return ""
	}
	return fmt.Sprintf("; other limits hold back %s before it in %s: it does not wait for them", ticketCount(l.HeldElsewhere), l.Key)
}

func limitOf(e throttle.Explanation, key string) (throttle.LimitWait, bool) {
	for _, l := range e.Limits {
		if l.Key == key {
			return l, true
		}
	}
	return throttle.LimitWait{}, false
}

// expected is the line of the estimated admission.
func expected(e throttle.Explanation) string {
	switch {
	case e.Refused != nil:
		return "expected admission: none: the next claim refuses it"
	case e.Estimate.IsZero():
		return "expected admission: not known: " + orDash(e.Unknown)
	case !e.Estimate.After(e.Now):
		return "expected admission: now, at the next claim"
	}
	s := "expected admission: " + in(e.Estimate, e.Now)
	if e.EstimateLow.Before(e.Estimate) || e.EstimateHigh.After(e.Estimate) {
		s += " (likely " + inShort(e.EstimateLow, e.Now) + " to " + inShort(e.EstimateHigh, e.Now) + ", as recent runs vary)"
	}
	return s
}

// inShort is how long from now until at, rounded: "now" when it is not after now.
func inShort(at, now time.Time) string {
	if !at.After(now) {
		return "now"
	}
	return roundDur(at.Sub(now))
}
