package words

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// Room is whether limit l has room for the ticket: "yes", or the dimension that refuses it
// ("concurrency", "output tokens", "no such limit").
func Room(l throttle.LimitWait) string {
	if l.Room {
		return "yes"
	}
	return ReasonLabel(l.Reason)
}

// Ahead is what stands before the ticket on limit l: the tickets expected before it, their cost, and
// those other limits hold back: "2 (1,000 in + 100 out) +1 held elsewhere".
func Ahead(l throttle.LimitWait) string {
	s := Grouped(int64(l.Ahead))
	if l.AheadCost != (throttle.Cost{}) {
		s += " (" + CostText(l.AheadCost) + ")"
	}
	if l.HeldElsewhere > 0 {
		s += " +" + Grouped(int64(l.HeldElsewhere)) + " held elsewhere"
	}
	return s
}

// Ready is when limit l is expected to admit the ticket, from now: "now", "in 30s (at 12:00:30
// UTC)" with its likely range when recent runs vary ("(likely 20s to 1m0s, as recent runs vary)"),
// or "not known" (the explanation's Unknown says why).
func Ready(l throttle.LimitWait, now time.Time) string {
	switch {
	case l.ReadyAt.IsZero():
		return "not known"
	case !l.ReadyAt.After(now):
		return "now"
	}
	return In(l.ReadyAt, now) + likely(l.ReadyAt, l.ReadyLow, l.ReadyHigh, now)
}

// likely is the likely range of estimate at, from low to high, when it is a range.
func likely(at, low, high, now time.Time) string {
	if !low.Before(at) && !high.After(at) {
		return ""
	}
	return " (likely " + inShort(low, now) + " to " + inShort(high, now) + ", as recent runs vary)"
}

// Overdue says that tickets holding limit l have run longer than any recent run on it, since when
// the longest has, and what that means for when they end: "1 ticket holding it has been running since
// 02:14:37 UTC (40m0s), longer than any recent run, so it is expected to end by its deadline at the
// latest". Empty when none has.
func Overdue(l throttle.LimitWait, now time.Time) string {
	if l.Overdue == 0 {
		return ""
	}
	since := fmt.Sprintf("since %s (%s)", Clock(l.OverdueSince, now), RoundDur(now.Sub(l.OverdueSince)))
	open := openEnded(l)
	if l.Overdue == 1 {
		s := "1 ticket holding it has been running " + since + ", longer than any recent run"
		if open {
			return s + ", and has no deadline, so when it ends is not known"
		}
		return s + ", so it is expected to end by its deadline at the latest"
	}
	s := TicketCount(l.Overdue) + " holding it have been running longer than any recent run, the longest " + since
	if open {
		return s + ", and not every one has a deadline, so when they end is not known"
	}
	return s + ", so they are expected to end by their deadlines at the latest"
}

// openEnded reports whether limit l waits for an overdue holder that has no deadline, whose end
// cannot be told: its ready time is then not known.
func openEnded(l throttle.LimitWait) bool {
	return l.ReadyAt.IsZero() && l.OverdueOpen > 0
}

// heldElsewhere says how many tickets before this one in line l other limits hold back, when any:
// they are not waited for.
func heldElsewhere(l throttle.LimitWait) string {
	if l.HeldElsewhere == 0 {
		return ""
	}
	return fmt.Sprintf("; other limits hold back %s before it in %s: it does not wait for them", TicketCount(l.HeldElsewhere), l.Key)
}

func limitOf(e throttle.Explanation, key string) (throttle.LimitWait, bool) {
	for _, l := range e.Limits {
		if l.Key == key {
			return l, true
		}
	}
	return throttle.LimitWait{}, false
}
