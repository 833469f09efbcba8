package throttle

import (
	"time"
)

// Standing is what stands between a queued ticket and one limit it draws on: the tickets ahead of it
// that draw on the limit, and those that hold it. It is Explain's input, read by pgqueue.
type Standing struct {
	// AheadCount counts the queued tickets that draw on the limit and sort before the ticket (on its
	// line's limit: its place in line, less one). HeldElsewhere of them are held back by another of
	// their limits (a full tenant): they are not expected to be admitted before the ticket on this
	// limit's account, and the play leaves them out.
	AheadCount    int
	HeldElsewhere int
	// Ahead are the reservations of the others, those expected to be admitted before the ticket, in
	// that order: the first of them at most. Those beyond Ahead are taken to cost the mean of Ahead.
	Ahead []Cost
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
}

// Release is a ticket's expected release of a limit: when, and the reservation it gives back.
type Release struct {
	// At is the expected release, Early and Late the likely range of it (zero: At). A zero At is not
	// known.
	At    time.Time `json:"at,omitzero"`
	Early time.Time `json:"early,omitzero"`
	Late  time.Time `json:"late,omitzero"`
	Cost  Cost      `json:"cost"`
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

// Wait names what a queued ticket waits for, as Explain reports it: a Reason's name, or one of the
// waits below.
const (
	// WaitNothing: every limit has room and nothing is ahead: the next claim admits the ticket.
	WaitNothing = ""
	// WaitNotBefore: the ticket is held until its not-before time (a retry's backoff).
	WaitNotBefore = "not_before"
	// WaitAhead: every limit has room for the ticket, but tickets ahead of it in its line go first.
	WaitAhead = "ahead"
	// WaitUnknownLimit: a limit the ticket draws on does not exist; no claim admits it until it does.
	WaitUnknownLimit = "unknown_limit"
)

// LimitWait is how one limit a ticket draws on stands towards it.
type LimitWait struct {
	Key string `json:"key"`
	// Limit is the limit as admission applies it, and State its state at the explanation's instant
	// (buckets refilled to it).
	Limit Limit `json:"limit"`
	State State `json:"state"`
	// Room reports whether the limit could admit the ticket now, were nothing ahead of it.
	Room bool `json:"room"`
	// Reason is the dimension that refuses the ticket now (the first in Check's order), when Room is
	// false; RetryAt is when that refusal lifts if nothing else changes, zero when only a release can
	// make room (slots, in-flight tokens).
	Reason  string    `json:"reason,omitempty"`
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Ahead counts the queued tickets drawing on the limit expected before this one, and AheadCost
	// sums their reservations (those read; the rest at their mean). HeldElsewhere counts the tickets
	// before this one that other limits of theirs hold back, which Ahead leaves out.
	Ahead         int  `json:"ahead"`
	AheadCost     Cost `json:"ahead_cost"`
	HeldElsewhere int  `json:"held_elsewhere,omitempty"`
	// ReadyAt is the estimated instant at which this limit admits the ticket (see Explain); zero
	// when it cannot be known, and Unknown says why. ReadyLow and ReadyHigh bound its likely range.
	ReadyAt   time.Time `json:"ready_at,omitzero"`
	ReadyLow  time.Time `json:"ready_low,omitzero"`
	ReadyHigh time.Time `json:"ready_high,omitzero"`
	Unknown   string    `json:"unknown,omitempty"`
	// Overdue counts the tickets holding the limit that have run longer than every recent run on it
	// (Release.Since); OverdueSince is the admission of the longest-running of them.
	Overdue      int       `json:"overdue,omitempty"`
	OverdueSince time.Time `json:"overdue_since,omitzero"`
	// Spent is the allowance that refuses the ticket, when Reason is "allowance": what it counted, and
	// when it has room again.
	Spent *Spent `json:"spent,omitempty"`
}

// Explanation is why a queued ticket waits, limit by limit, and when it is expected to be admitted.
type Explanation struct {
	// Ticket is the ticket's ID; Line the key of the limit whose line it waits in; Place its place in
	// that line (1: at its head).
	Ticket int64  `json:"ticket"`
	Line   string `json:"line"`
	Place  int    `json:"place"`
	// Cost is the ticket's reservation, input and output.
	Cost Cost `json:"cost"`
	// WaitsFor is what holds the ticket now: WaitNothing, WaitNotBefore, WaitAhead, WaitUnknownLimit,
	// or the name of the Reason by which Key, the binding limit, refuses it ("concurrency", "rate",
	// "tokens", "input_tokens", "output_tokens", "inflight_tokens", "paused").
	WaitsFor string `json:"waits_for"`
	Key      string `json:"key,omitempty"`
	// Limits are the limits the ticket draws on, in the order a claim checks them.
	Limits []LimitWait `json:"limits"`
	// Estimate is the estimated earliest admission: the latest of the limits' ReadyAt and the ticket's
	// not-before time. Zero when it cannot be known; Unknown then says why. EstimateLow and
	// EstimateHigh bound its likely range: the same estimate with every run as short as the 25th
	// percentile of recent runs, and as long as the 75th (equal to Estimate when no run time enters).
	Estimate     time.Time `json:"estimate,omitzero"`
	EstimateLow  time.Time `json:"estimate_low,omitzero"`
	EstimateHigh time.Time `json:"estimate_high,omitzero"`
	Unknown      string    `json:"unknown,omitempty"`
	// Expires reports that the ticket's deadline falls before Estimate: Temporal is expected to time
	// it out first.
	Expires bool `json:"expires,omitempty"`
	// Refused is the spent allowance for which the next claim refuses the ticket rather than let it
	// wait (Spent.Refuses), with the ticket's Deadline: its activity fails with the allowance's error.
	// Estimate is then zero and Unknown says so.
	Refused *Spent `json:"refused,omitempty"`
	// Now is the instant of the explanation.
	Now time.Time `json:"now"`
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
// expected not to use (1 - Standing.UsedShare), as a report of usage below the reservation does;
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
func Explain(in ExplainInput) Explanation {
	c := in.Ticket
	e := Explanation{Ticket: c.ID, Cost: c.split(), Now: in.Now, Place: 1}
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

// laterOf is the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// holding is what holds the ticket now, and the key of the limit that does (see Explain).
func holding(e Explanation, c Candidate, now time.Time) (string, string) {
	if now.Before(c.NotBefore) {
		return WaitNotBefore, ""
	}
	var bind *LimitWait
	for i := range e.Limits {
		w := &e.Limits[i]
		switch {
		case w.Reason == WaitUnknownLimit:
			return WaitUnknownLimit, w.Key
		case w.Room:
		case bind == nil, later(w.ReadyAt, bind.ReadyAt):
			bind = w
		}
	}
	if bind != nil {
		return bind.Reason, bind.Key
	}
	if len(e.Limits) > 0 && e.Limits[0].Ahead > 0 {
		return WaitAhead, e.Line
	}
	return WaitNothing, ""
}

// later reports whether estimate a is later than b, an unknown (zero) estimate being the latest.
func later(a, b time.Time) bool {
	if b.IsZero() {
		return false
	}
	return a.IsZero() || a.After(b)
}

// explainLimit is how limit key stands towards the ticket of in, which spends sp.
func explainLimit(key string, in ExplainInput, sp Spend) LimitWait {
	ls, ok := in.Limits[key]
	st := in.Standing[key]
	st.HeldElsewhere = min(max(st.HeldElsewhere, 0), st.AheadCount)
	w := LimitWait{Key: key, Ahead: st.AheadCount - st.HeldElsewhere, HeldElsewhere: st.HeldElsewhere}
	if !ok {
		w.Reason, w.Unknown = WaitUnknownLimit, "the limit does not exist"
		return w
	}
	w.Limit = ls.Limit.WithDefaults()
	w.State = w.Limit.Refill(ls.State, in.Now)
	d := w.Limit.CheckSpend(ls.State, in.Now, sp)
	w.Room = d.OK()
	if !w.Room {
		w.Reason, w.RetryAt = d.Reason.String(), d.RetryAt
	}
	if spent, ok := w.Limit.SpentAllowance(ls.State, in.Now, sp); ok && d.Reason == ReasonAllowance {
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
	}
	return w
}

// aheadCosts are the reservations of every ticket ahead on a limit: those read, then the rest at their
// mean; nil past explainHorizon.
func aheadCosts(st Standing) []Cost {
	ahead := st.AheadCount - st.HeldElsewhere
	if ahead > explainHorizon {
		return nil
	}
	costs := make([]Cost, 0, max(ahead, len(st.Ahead)))
	costs = append(costs, st.Ahead...)
	if rest := ahead - len(st.Ahead); rest > 0 {
		var mean Cost
		if n := int64(len(st.Ahead)); n > 0 {
			var sum Cost
			for _, a := range st.Ahead {
				sum.Input += a.Input
				sum.Output += a.Output
			}
			mean = Cost{Input: sum.Input / n, Output: sum.Output / n}
		}
		for range rest {
			costs = append(costs, mean)
		}
	}
	return costs
}
