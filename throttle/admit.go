package throttle

import (
	"time"
)

// State is what Sluice keeps for one limit between admissions: its buckets (requests, and tokens
// combined, input and output), the figures of the tickets it has admitted that have not finished, and
// a pause ordered by the provider (a 429). The zero State is an idle limit with full buckets. A State
// is a value: the functions below return a new one.
type State struct {
	Requests       Bucket    `json:"requests,omitzero"`
	Tokens         Bucket    `json:"tokens,omitzero"`
	InputTokens    Bucket    `json:"input_tokens,omitzero"`
	OutputTokens   Bucket    `json:"output_tokens,omitzero"`
	InflightCount  int       `json:"inflight_count"`
	InflightTokens int64     `json:"inflight_tokens"`
	PausedUntil    time.Time `json:"paused_until,omitzero"`
	// Allowances are the states of the limit's allowances, by Allowance.Key; nil when it has none or
	// they have counted nothing.
	Allowances AllowanceStates `json:"allowances,omitempty"`
}

// Reason says why a ticket waits.
type Reason int

// The reasons a ticket waits, in the order Check tests them.
const (
	ReasonNone           Reason = iota // the ticket can be admitted
	ReasonPaused                       // the provider said 429; the key is paused
	ReasonConcurrency                  // MaxConcurrent tickets are running
	ReasonInflightTokens               // MaxInflightTokens are reserved by running tickets
	ReasonRate                         // the RequestsPerSecond bucket is empty
	ReasonTokens                       // the TokensPerMinute bucket has too little
	ReasonInputTokens                  // the InputTokensPerMinute bucket has too little
	ReasonOutputTokens                 // the OutputTokensPerMinute bucket has too little
	ReasonAllowance                    // a windowed allowance is spent (Allowance.Check)
)

var reasonNames = [...]string{"none", "paused", "concurrency", "inflight_tokens", "rate", "tokens", "input_tokens", "output_tokens", "allowance"}

// ParseReason returns the Reason whose String is name, and false for any other name.
func ParseReason(name string) (Reason, bool) {
	for i, n := range reasonNames {
		if n == name {
			return Reason(i), true
		}
	}
	return ReasonNone, false
}

// IsTokens reports whether r is a wait for a token budget (combined, input or output): room that a
// finished ticket's refund can make.
func (r Reason) IsTokens() bool {
	return r == ReasonTokens || r == ReasonInputTokens || r == ReasonOutputTokens
}

// String returns the reason's snake_case name, as used in metrics and span attributes.
func (r Reason) String() string {
	if r < 0 || int(r) >= len(reasonNames) {
		return "unknown"
	}
	return reasonNames[r]
}

// Decision is the outcome of Check.
type Decision struct {
	// Reason is ReasonNone when the ticket can be admitted now.
	Reason Reason
	// RetryAt is the earliest instant the ticket could be admitted if nothing else changes. It is zero
	// when only a running ticket's release can make room (concurrency, in-flight tokens).
	RetryAt time.Time
}

// OK reports whether the ticket can be admitted.
func (d Decision) OK() bool { return d.Reason == ReasonNone }

// Refill returns s with its four buckets (requests, and tokens combined, input and output) brought to
// now under l's rates (Bucket.Refill): the rates in force, so that a bucket's level is settled before
// the rates change (Observe learns lower ones). A kind of limit l does not set leaves its bucket as it
// is. Check, Admit and Release refill first
// themselves; call Refill only to settle the buckets before changing l.
func (l Limit) Refill(s State, now time.Time) State {
	for d, r := range l.Rates() {
		if r.IsSet() {
			b := s.Bucket(d)
			*b = b.Refill(now, r.PerSecond(), r.Burst())
		}
	}
	return s
}

// Check reports whether one ticket reserving cost tokens, given as one figure (Tokens(cost)), can be
// admitted under l at now: CheckCost with the cost as input.
func (l Limit) Check(s State, now time.Time, cost int64) Decision {
	return l.CheckCost(s, now, Tokens(cost))
}

// CheckCost reports whether one ticket reserving c can be admitted under l (with its defaults filled
// in) at now, and if not, why and when to look again. Every kind of limit l sets must have room, each
// token budget for its part of c (combined: the total; input; output): the tightest wins. A ticket
// larger than a burst or than MaxInflightTokens is admitted once the bucket is full or nothing is in
// flight, so it is never starved. A negative part of c counts as 0.
func (l Limit) CheckCost(s State, now time.Time, c Cost) Decision {
	c = c.nonNegative()
	cost := c.Total()
	if now.Before(s.PausedUntil) {
		return Decision{Reason: ReasonPaused, RetryAt: s.PausedUntil}
	}
	if l.MaxConcurrent > 0 && s.InflightCount >= l.MaxConcurrent {
		return Decision{Reason: ReasonConcurrency}
	}
	// Written as a subtraction so that a huge cost cannot overflow the sum.
	if l.MaxInflightTokens > 0 && s.InflightTokens > 0 && cost > l.MaxInflightTokens-s.InflightTokens {
		return Decision{Reason: ReasonInflightTokens}
	}
	s = l.Refill(s, now)
	d := Decision{Reason: ReasonNone, RetryAt: now}
	// Every bucket must allow the ticket: the reason is the first that does not, the retry instant
	// the latest at which all will.
	refuse := func(r Reason, at time.Time) {
		if d.OK() {
			d = Decision{Reason: r, RetryAt: at}
		} else if at.After(d.RetryAt) {
			d.RetryAt = at
		}
	}
	for d, r := range l.Rates() {
		if b, n := s.Bucket(d), float64(d.Draw(c)); r.IsSet() && !b.Allows(n, r.Burst()) {
			refuse(d.reason(), b.ReadyAt(n, r.PerSecond(), r.Burst()))
		}
	}
	return d
}

// Admit returns s after admitting one ticket reserving cost tokens, given as one figure, at now:
// AdmitCost with the cost as input.
func (l Limit) Admit(s State, now time.Time, cost int64) State {
	return l.AdmitCost(s, now, Tokens(cost))
}

// AdmitCost returns s after admitting one ticket reserving c at now: each token budget l sets is
// drawn on for its part of c. It does not check: call CheckCost first.
func (l Limit) AdmitCost(s State, now time.Time, c Cost) State {
	c = c.nonNegative()
	s = l.Refill(s, now)
	for d, r := range l.Rates() {
		if r.IsSet() {
			b := s.Bucket(d)
			*b = b.Take(float64(d.Draw(c)))
		}
	}
	s.InflightCount++
	s.InflightTokens = satAdd(s.InflightTokens, c.Total())
	return s
}

// Release returns s after a ticket admitted with reserved tokens finished at now. When the actual
// usage is known (actual >= 0), the token buckets are reconciled: the unused part of the reservation is
// given back, and usage above it is taken as debt. A negative actual means "not reported": the
// reservation stands as spent.
func (l Limit) Release(s State, now time.Time, reserved, actual int64) State {
	return l.ReleaseMany(s, now, released1(reserved, actual))
}

// Released is what finished tickets give back to a limit, summed over them: how many they were, the
// tokens they had reserved (in all), and the refunds of the reservations whose usage was reported:
// the unused part of each (negative for usage above it), in all (Refund) and the part of that of
// output tokens (RefundOutput; the rest, Refund - RefundOutput, is of input tokens). Sums of Released
// add up: Add.
type Released struct {
	Count        int
	Reserved     int64
	Refund       float64
	RefundOutput float64
}

// released1 is what one ticket gives back: reserved tokens (negative counts as 0), of which the
// activity reported actual (negative: not reported, the reservation stands as spent), both given as
// one figure, of input tokens.
func released1(reserved, actual int64) Released {
	return ReleasedCost(Tokens(reserved), Tokens(actual), actual >= 0)
}

// ReleasedCost is what one ticket gives back: its reservation, and, when reported, what the call
// actually used. Negative parts count as 0. Without a report the reservation stands as spent.
func ReleasedCost(reserved, actual Cost, reported bool) Released {
	reserved = reserved.nonNegative()
	r := Released{Count: 1, Reserved: reserved.Total()}
	if reported {
		actual = actual.nonNegative()
		r.Refund = float64(reserved.Total() - actual.Total())
		r.RefundOutput = float64(reserved.Output - actual.Output)
	}
	return r
}

// Add returns the sum of r and o.
func (r Released) Add(o Released) Released {
	return Released{Count: r.Count + o.Count, Reserved: r.Reserved + o.Reserved, Refund: r.Refund + o.Refund,
		RefundOutput: r.RefundOutput + o.RefundOutput}
}

// ReleaseMany returns s after the tickets summed in r finished, applied at now: the in-flight figures
// drop by theirs, and the token buckets are refilled to now and given their refunds (the combined
// bucket Refund, the input one Refund - RefundOutput, the output one RefundOutput), each at most up to
// its burst. That is the tickets released one by one, the debts first: only where a burst cuts a
// refund off can an order of release matter.
func (l Limit) ReleaseMany(s State, now time.Time, r Released) State {
	s = l.Refill(s, now)
	for d, rate := range l.Rates() {
		if n := r.refund(d); rate.IsSet() && n != 0 {
			b := s.Bucket(d)
			*b = b.Give(n, rate.Burst())
		}
	}
	s.InflightCount = max(0, s.InflightCount-r.Count)
	s.InflightTokens = max(0, s.InflightTokens-r.Reserved)
	return s
}

// Pause returns s paused until the later of its current pause and until.
func (s State) Pause(until time.Time) State {
	if until.After(s.PausedUntil) {
		s.PausedUntil = until
	}
	return s
}
