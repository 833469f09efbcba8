package throttle

import (
	"fmt"
	"time"
)

// CheckSpend reports whether one ticket spending sp can be admitted under l at now: CheckCost of its
// tokens, and every one of l's Allowances (Allowances.Check) of all of sp. The tightest wins. When
// both a rate and an allowance refuse, the reason is the one that lifts last: an allowance whose
// window resets in an hour holds the ticket even if the request bucket refills in a second, and an
// allowance that will never hold the ticket (a zero RetryAt) holds it over a full concurrency cap.
func (l Limit) CheckSpend(s State, now time.Time, sp Spend) Decision {
	d := l.CheckCost(s, now, sp.Tokens)
	if len(l.Allowances) == 0 {
		return d
	}
	a, _ := l.Allowances.Check(s.Allowances, now, sp)
	switch {
	case a.OK():
		return d
	case d.OK(), a.RetryAt.IsZero(), !d.RetryAt.After(a.RetryAt):
		return a
	}
	return d
}

// AdmitSpend returns s after admitting one ticket spending sp at now: AdmitCost of its tokens, and
// sp counted in every one of l's Allowances. It does not check: call CheckSpend first.
func (l Limit) AdmitSpend(s State, now time.Time, sp Spend) State {
	s = l.AdmitCost(s, now, sp.Tokens)
	if len(l.Allowances) > 0 {
		s.Allowances = l.Allowances.Admit(s.Allowances, now, sp)
	}
	return s
}

// ReleaseSpend returns s after the finished tickets of r, admitted at r.AdmittedAt, were reconciled
// on l's Allowances at now (Allowances.Release): r's Reserved and Actual may be the sums of several
// tickets admitted at the same instant, all of whose usage was reported. The token buckets and
// in-flight figures are released apart (ReleaseMany).
func (l Limit) ReleaseSpend(s State, now time.Time, r SpendRelease) State {
	if len(l.Allowances) > 0 || len(s.Allowances) > 0 {
		s.Allowances = l.Allowances.Release(s.Allowances, now, r)
	}
	return s
}

// Spent is an allowance that has no room for a ticket: what it is, what it has counted in its window
// and when it will have room. It is what a refused ticket's error and an explanation report.
type Spent struct {
	// Allowance is the allowance that refused.
	Allowance Allowance `json:"allowance"`
	// Used is what it has counted in the current window (reservations, reconciled with reported
	// usage); Needs what the ticket would count.
	Used  int64 `json:"used"`
	Needs int64 `json:"needs"`
	// Refundable is what the tickets in flight may still give back of Used when they report their
	// usage (Allowance.Refundable): while it would make room, the ticket waits rather than being
	// refused.
	Refundable int64 `json:"refundable,omitzero"`
	// WindowStart and WindowEnd bound the current window of a calendar allowance; zero for a rolling
	// one.
	WindowStart time.Time `json:"window_start,omitzero"`
	WindowEnd   time.Time `json:"window_end,omitzero"`
	// ResetAt is the earliest instant the allowance has room for the ticket: the window's end, or for
	// a rolling allowance when enough has fallen out. Zero when it never will: the ticket alone counts
	// more than the Amount.
	ResetAt time.Time `json:"reset_at,omitzero"`
	// Deadline is the deadline of the ticket refused (zero: none), which the claim that refuses it and
	// an Explanation set, so that Error can say when it is why: an allowance that waits refuses a ticket whose
	// deadline is not after ResetAt (Refuses). SpentAllowance leaves it zero.
	Deadline time.Time `json:"deadline,omitzero"`
}

// SpentAllowance returns the allowance of l that binds a ticket spending sp at now (Allowances.Check),
// and false when every allowance of l has room for it.
func (l Limit) SpentAllowance(s State, now time.Time, sp Spend) (Spent, bool) {
	d, i := l.Allowances.Check(s.Allowances, now, sp)
	if i < 0 {
		return Spent{}, false
	}
	a := l.Allowances[i]
	st := s.Allowances[a.Key()]
	out := Spent{Allowance: a, Used: a.Used(st, now), Needs: a.Of(sp), ResetAt: d.RetryAt, Refundable: a.Refundable(st, now)}
	if a.Calendar != "" {
		start, end := a.Window(now)
		out.WindowStart, out.WindowEnd = start.UTC(), end.UTC()
	}
	return out, true
}

// Refuses reports whether a ticket whose deadline is deadline (zero: none) is refused at once rather
// than left waiting for s: its allowance says so (OnSpentRefuse), it will never have room (a zero
// ResetAt), or Temporal would time the ticket out before it has (the deadline is not after ResetAt).
// It is not refused, whatever the rest, while what the tickets in flight may give back
// (Refundable) would make room for it: it waits for their releases, and is refused after them if
// they gave back too little.
func (s Spent) Refuses(deadline time.Time) bool {
	if s.ResetAt.IsZero() {
		return true
	}
	if used := s.Used - s.Refundable; s.Refundable > 0 && used < s.Allowance.Amount && s.Needs <= s.Allowance.Amount-used {
		return false
	}
	return s.Allowance.OnSpent == OnSpentRefuse || deadlineFirst(deadline, s.ResetAt)
}

// deadlineFirst reports whether a ticket with deadline (zero: none) would be timed out before an
// allowance has room for it at reset.
func deadlineFirst(deadline, reset time.Time) bool {
	return !deadline.IsZero() && !deadline.After(reset)
}

// Error says which allowance is spent, what was used of it and when it resets, as the refused ticket's
// activity error does; and, when an allowance that waits refuses the ticket because its Deadline is
// not after the reset, that deadline.
func (s Spent) Error() string {
	a := s.Allowance
	msg := fmt.Sprintf("allowance %s spent: used %s of %s", a, a.FormatAmount(s.Used), a.FormatAmount(a.Amount))
	if s.Needs > 0 {
		msg += fmt.Sprintf(", the call needs %s", a.FormatAmount(s.Needs))
	}
	if s.ResetAt.IsZero() {
		return msg + "; the call needs more than the whole allowance, so no window will admit it"
	}
	// Refused by its deadline, not by the allowance: one that refuses says so by itself.
	deadline := a.OnSpent != OnSpentRefuse && deadlineFirst(s.Deadline, s.ResetAt)
	if a.Calendar != "" {
		msg += "; resets at " + a.instant(s.ResetAt)
		if deadline {
			msg += "; the call's deadline, " + a.instant(s.Deadline) + ", comes before the reset"
		}
		return msg
	}
	msg += "; room again at " + s.ResetAt.UTC().Format(time.RFC3339)
	if deadline {
		msg += "; the call's deadline, " + s.Deadline.UTC().Format(time.RFC3339) + ", comes before then"
	}
	return msg
}

// instant writes t in UTC and in a's zone: "2026-03-08T08:00:00Z (2026-03-08 00:00 PST)".
func (a Allowance) instant(t time.Time) string {
	return t.UTC().Format(time.RFC3339) + " (" + t.In(a.location()).Format("2006-01-02 15:04 MST") + ")"
}
