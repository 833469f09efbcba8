package admit

import (
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// Standing is what stands between a queued ticket and one limit it draws on: the tickets ahead of it
// that draw on the limit, and those that hold it. It is Explain's input, read by the store.
type Standing struct {
	// AheadCount counts the queued tickets that draw on the limit and sort before the ticket (on its
	// line's limit: its place in line, less one). HeldElsewhere of them are held back by another of
	// their limits (a full tenant): they are not expected to be admitted before the ticket on this
	// limit's account, and the play leaves them out.
	AheadCount    int
	HeldElsewhere int
	// Ahead are the reservations of the others, those expected to be admitted before the ticket, in
	// that order: the first of them at most. Those beyond Ahead are taken to cost the mean of Ahead.
	Ahead []throttle.Cost
	// Releases are when the tickets holding the limit (admitted or running) are expected to finish,
	// with their reservations, in any order. A zero At is not known: that ticket is never counted on
	// to make room.
	Releases []Release
	// RunTime is how long a ticket on the limit runs, from admission to its release: how long the
	// tickets Explain admits ahead hold the limit (RunTimes.Typical of the limit's recent runs). A
	// zero Mid is not known: those tickets are never counted on to make room.
	RunTime Span
	// UsedShare is the share of its reservation a ticket on the limit is expected to use, from 0 to 1:
	// a release gives the rest back to the token buckets, as reported usage below a reservation does.
	// Zero means not known, taken as 1: a release gives no tokens back.
	UsedShare float64
	// UsedShareOutput is the share of its output reservation a ticket on the limit is expected to use,
	// from 0 to 1: a release gives the rest back to the output-token bucket, and what UsedShare gives
	// back beyond it to the input bucket. Output tokens are often the ones a reservation overestimates
	// (a max_tokens), so their share differs from the whole's. Zero means not known (no output was
	// reserved in the window): UsedShare stands for it.
	UsedShareOutput float64
}

// Release is a ticket's expected release of a limit: when, and the reservation it gives back.
type Release struct {
	// At is the expected release, Early and Late the likely range of it (zero: At). A zero At is not
	// known.
	At    time.Time     `json:"at,omitzero"`
	Early time.Time     `json:"early,omitzero"`
	Late  time.Time     `json:"late,omitzero"`
	Cost  throttle.Cost `json:"cost"`
	// Since, for a holder overdue (it has run longer than every recent run on the limit, so how long
	// it still has cannot be told), is its admission; At is then its deadline, the latest it can hold
	// the limit, or zero when it has none.
	Since time.Time `json:"since,omitzero"`
}

// at is r's release in the given variant of the estimate: low (Early), mid (At) or high (Late).
func (r Release) at(v variant) time.Time {
	switch {
	case v == variantLow && !r.Early.IsZero():
		return r.Early
	case v == variantHigh && !r.Late.IsZero():
		return r.Late
	}
	return r.At
}

// variant is one of the three plays of an estimate: with every run as short as it likely is (low),
// typical (mid), or as long (high).
type variant int

const (
	variantMid variant = iota
	variantLow
	variantHigh
)

// of is the duration of s in the variant v.
func (s Span) of(v variant) time.Duration {
	switch v {
	case variantLow:
		return s.Low
	case variantHigh:
		return s.High
	}
	return s.Mid
}

// ExplainInput is a queued ticket, the limits it draws on, and what stands on each: Explain's input.
type ExplainInput struct {
	// Ticket is the ticket as a claim sees it: its limits (its line's first), cost and times.
	Ticket Candidate
	// Limits are the limits the ticket draws on, by key, each as admission applies it (the effective
	// limit) with its state, pending releases folded in. A key missing here is a limit that does not
	// exist, which no claim admits on.
	Limits map[string]LimitState
	// Standing is, by key, what stands on each limit the ticket draws on. A key missing here has
	// nothing ahead and no known releases.
	Standing map[string]Standing
	// Now is the instant to explain at.
	Now time.Time
}

// explainHorizon bounds the tickets Explain simulates on one limit: past it, the estimate is not
// known.
const explainHorizon = 100_000

// Explain explains why the queued ticket of in waits, with the arithmetic a claim uses (CheckCost),
// and estimates when it will be admitted. It does no I/O and reads no clock.
//
// For each limit the ticket draws on, Room and Reason are the limit's CheckCost of the ticket at Now.
// What holds the ticket (WaitsFor, Key) is its not-before time if that is after Now; else, of the
// limits that refuse it, the one whose estimate is latest (a full tenant behind a provider with room
// is the tenant); else, when tickets are ahead of it in its line, those (WaitAhead); else nothing.
//
// The estimate plays each limit forward on its own, from its state at Now: the tickets ahead on it
// are admitted in turn, each as soon as CheckCost allows, and then the ticket. Time moves to the
// earlier of the refusal's RetryAt and the next release: a holding ticket's expected release
// (Standing.Releases), or a ticket admitted in the play releasing after Standing.RunTime (its Mid). A release
// gives back its slot and in-flight tokens, and to the token buckets the part of its reservation it is
// expected not to use (1 - Standing.UsedShare; of its output, 1 - Standing.UsedShareOutput when
// known), as a report of usage below the reservation does;
// without a RunTime, a ticket admitted in the play gives that part back at its admission. The ticket's estimate is the
// latest of its limits', and not before its not-before time. It assumes that what is queued now is all
// that goes first (a ticket of a higher priority written later goes ahead), that the tickets ahead on
// a limit are not held by other limits of theirs, that the claimers take a ticket the moment it has
// room, and that releases come when expected. The likely range (EstimateLow, EstimateHigh) is the
// same play with every release at its Early and every run as short as RunTime.Low, and at its Late
// and as long as RunTime.High. It cannot be known when a limit waits for a release that has no
// expected time (no run on the limit ended in the last hour, or a holder has run longer than every
// recent run and has no deadline), for a bucket that never refills (a rate lowered to nothing), or
// past 100,000 tickets ahead.
func Explain(in ExplainInput) throttle.Explanation {
	c := in.Ticket
	e := throttle.Explanation{Ticket: c.ID, Cost: c.split(), Now: in.Now, Place: 1}
	if len(c.LimitKeys) > 0 {
		e.Line = c.LimitKeys[0]
		e.Place = in.Standing[e.Line].AheadCount + 1
	}
	var latest, low, high time.Time
	for _, k := range c.LimitKeys {
		w := explainLimit(k, in, c.spend())
		e.Limits = append(e.Limits, w)
		if w.Spent != nil && w.Spent.Refuses(c.Deadline) && e.Refused == nil {
			r := *w.Spent
			r.Deadline = c.Deadline
			e.Refused = &r
		}
		if w.Unknown != "" && e.Unknown == "" {
			e.Unknown = k + ": " + w.Unknown
		}
		latest, low, high = laterOf(latest, w.ReadyAt), laterOf(low, w.ReadyLow), laterOf(high, w.ReadyHigh)
	}
	e.WaitsFor, e.Key = holding(e, c, in.Now)
	if e.Refused != nil {
		// No claim will admit it: the next one fails its activity.
		e.Unknown = "the next claim refuses it: " + e.Refused.Error()
	}
	if e.Unknown == "" {
		floor := laterOf(in.Now, c.NotBefore)
		e.Estimate, e.EstimateLow, e.EstimateHigh = laterOf(latest, floor), laterOf(low, floor), laterOf(high, floor)
		e.Expires = !c.Deadline.IsZero() && !e.Estimate.Before(c.Deadline)
	}
	return e
}

// holding is what holds the ticket now, and the key of the limit that does (see Explain).
func holding(e throttle.Explanation, c Candidate, now time.Time) (string, string) {
	if now.Before(c.NotBefore) {
		return throttle.WaitNotBefore, ""
	}
	var bind *throttle.LimitWait
	for i := range e.Limits {
		w := &e.Limits[i]
		switch {
		case w.Reason == throttle.WaitUnknownLimit:
			return throttle.WaitUnknownLimit, w.Key
		case w.Room:
		case bind == nil, later(w.ReadyAt, bind.ReadyAt):
			bind = w
		}
	}
	if bind != nil {
		return bind.Reason, bind.Key
	}
	if len(e.Limits) > 0 && e.Limits[0].Ahead > 0 {
		return throttle.WaitAhead, e.Line
	}
	return throttle.WaitNothing, ""
}

// explainLimit is how limit key stands towards the ticket of in, which spends sp.
func explainLimit(key string, in ExplainInput, sp throttle.Spend) throttle.LimitWait {
	ls, ok := in.Limits[key]
	st := in.Standing[key]
	st.HeldElsewhere = min(max(st.HeldElsewhere, 0), st.AheadCount)
	w := throttle.LimitWait{Key: key, Ahead: st.AheadCount - st.HeldElsewhere, HeldElsewhere: st.HeldElsewhere}
	if !ok {
		w.Reason, w.Unknown = throttle.WaitUnknownLimit, "the limit does not exist"
		return w
	}
	w.Limit = ls.Limit.WithDefaults()
	w.State = w.Limit.Refill(ls.State, in.Now)
	d := w.Limit.CheckSpend(ls.State, in.Now, sp)
	w.Room = d.OK()
	if !w.Room {
		w.Reason, w.RetryAt = d.Reason.String(), d.RetryAt
	}
	if spent, ok := w.Limit.SpentAllowance(ls.State, in.Now, sp); ok && d.Reason == throttle.ReasonAllowance {
		w.Spent = &spent
	}
	costs := aheadCosts(st)
	for _, a := range costs {
		w.AheadCost.Input += a.Input
		w.AheadCost.Output += a.Output
	}
	for _, r := range st.Releases {
		if !r.Since.IsZero() {
			w.Overdue++
			if r.At.IsZero() {
				w.OverdueOpen++
			}
			if w.OverdueSince.IsZero() || r.Since.Before(w.OverdueSince) {
				w.OverdueSince = r.Since
			}
		}
	}
	limit := LimitState{Limit: w.Limit, State: ls.State}
	w.ReadyAt, w.Unknown = play(limit, st, costs, sp, in.Now, variantMid)
	if w.Unknown == "" {
		w.ReadyLow, _ = play(limit, st, costs, sp, in.Now, variantLow)
		w.ReadyHigh, _ = play(limit, st, costs, sp, in.Now, variantHigh)
		// The range holds the estimate: plays that step through different releases refill the
		// buckets at different instants, and their rounding may part them by a microsecond the
		// wrong way.
		w.ReadyLow, w.ReadyHigh = earlierOf(w.ReadyLow, w.ReadyAt), laterOf(w.ReadyHigh, w.ReadyAt)
	}
	return w
}

// aheadCosts are the reservations of every ticket ahead on a limit: those read, then the rest at their
// mean; nil past explainHorizon.
func aheadCosts(st Standing) []throttle.Cost {
	ahead := st.AheadCount - st.HeldElsewhere
	if ahead > explainHorizon {
		return nil
	}
	costs := make([]throttle.Cost, 0, max(ahead, len(st.Ahead)))
	costs = append(costs, st.Ahead...)
	if rest := ahead - len(st.Ahead); rest > 0 {
		var mean throttle.Cost
		if n := int64(len(st.Ahead)); n > 0 {
			var sum throttle.Cost
			for _, a := range st.Ahead {
				sum.Input += a.Input
				sum.Output += a.Output
			}
			mean = throttle.Cost{Input: sum.Input / n, Output: sum.Output / n}
		}
		for range rest {
			costs = append(costs, mean)
		}
	}
	return costs
}
