package throttle

import (
	"time"
)

// State is what Sluice keeps for one limit between admissions: its two buckets, the figures of the
// tickets it has admitted that have not finished, and a pause ordered by the provider (a 429). The zero
// State is an idle limit with full buckets. A State is a value: the functions below return a new one.
type State struct {
	Requests       Bucket
	Tokens         Bucket
	InflightCount  int
	InflightTokens int64
	PausedUntil    time.Time
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
)

var reasonNames = [...]string{"none", "paused", "concurrency", "inflight_tokens", "rate", "tokens"}

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

// tokensPerSecond is the token refill rate.
func (l Limit) tokensPerSecond() float64 { return l.TokensPerMinute / 60 }

// Refill returns s with both buckets brought to now under l's rates (Bucket.Refill): the rates in
// force, so that a bucket's level is settled before the rates change (Observe learns lower ones). A
// kind of limit l does not set leaves its bucket as it is. Check, Admit and Release refill first
// themselves; call Refill only to settle the buckets before changing l.
func (l Limit) Refill(s State, now time.Time) State {
	if l.RequestsPerSecond > 0 {
		s.Requests = s.Requests.Refill(now, l.RequestsPerSecond, l.Burst)
	}
	if l.TokensPerMinute > 0 {
		s.Tokens = s.Tokens.Refill(now, l.tokensPerSecond(), l.TokenBurst)
	}
	return s
}

// Check reports whether one ticket reserving cost tokens can be admitted under l (with its defaults
// filled in) at now, and if not, why and when to look again. Every kind of limit l sets must have room:
// the tightest wins. A ticket larger than a burst or than MaxInflightTokens is admitted once the bucket
// is full or nothing is in flight, so it is never starved.
func (l Limit) Check(s State, now time.Time, cost int64) Decision {
	if cost < 0 {
		cost = 0
	}
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
	// Both buckets must allow the ticket: the reason is the first that does not, the retry instant
	// the latest at which both will.
	if l.RequestsPerSecond > 0 && !s.Requests.Allows(1, l.Burst) {
		d = Decision{Reason: ReasonRate, RetryAt: s.Requests.ReadyAt(1, l.RequestsPerSecond, l.Burst)}
	}
	if l.TokensPerMinute > 0 && !s.Tokens.Allows(float64(cost), l.TokenBurst) {
		at := s.Tokens.ReadyAt(float64(cost), l.tokensPerSecond(), l.TokenBurst)
		if d.OK() {
			d = Decision{Reason: ReasonTokens, RetryAt: at}
		} else if at.After(d.RetryAt) {
			d.RetryAt = at
		}
	}
	return d
}

// Admit returns s after admitting one ticket reserving cost tokens at now. It does not check: call
// Check first.
func (l Limit) Admit(s State, now time.Time, cost int64) State {
	if cost < 0 {
		cost = 0
	}
	s = l.Refill(s, now)
	if l.RequestsPerSecond > 0 {
		s.Requests = s.Requests.Take(1)
	}
	if l.TokensPerMinute > 0 {
		s.Tokens = s.Tokens.Take(float64(cost))
	}
	s.InflightCount++
	s.InflightTokens += cost
	return s
}

// Release returns s after a ticket admitted with reserved tokens finished at now. When the actual
// usage is known (actual >= 0), the token bucket is reconciled: the unused part of the reservation is
// given back, and usage above it is taken as debt. A negative actual means "not reported": the
// reservation stands as spent.
func (l Limit) Release(s State, now time.Time, reserved, actual int64) State {
	return l.ReleaseMany(s, now, Released1(reserved, actual))
}

// Released is what finished tickets give back to a limit, summed over them: how many they were, the
// tokens they had reserved, and Refund, the unused part of the reservations whose usage was reported
// (negative for usage above them). Sums of Released add up: Add.
type Released struct {
	Count    int
	Reserved int64
	Refund   float64
}

// Released1 is what one ticket gives back: reserved tokens (negative counts as 0), of which the
// activity reported actual (negative: not reported, the reservation stands as spent).
func Released1(reserved, actual int64) Released {
	reserved = max(0, reserved)
	r := Released{Count: 1, Reserved: reserved}
	if actual >= 0 {
		r.Refund = float64(reserved - actual)
	}
	return r
}

// Add returns the sum of r and o.
func (r Released) Add(o Released) Released {
	return Released{Count: r.Count + o.Count, Reserved: r.Reserved + o.Reserved, Refund: r.Refund + o.Refund}
}

// ReleaseMany returns s after the tickets summed in r finished, applied at now: the in-flight figures
// drop by theirs, and the token bucket is refilled to now and given r.Refund (at most up to its
// burst). That is the tickets released one by one, the debts first: only where the burst cuts a
// refund off can an order of release matter.
func (l Limit) ReleaseMany(s State, now time.Time, r Released) State {
	s = l.Refill(s, now)
	if l.TokensPerMinute > 0 && r.Refund != 0 {
		s.Tokens = s.Tokens.Give(r.Refund, l.TokenBurst)
	}
	s.InflightCount = max(0, s.InflightCount-r.Count)
	s.InflightTokens = max(0, s.InflightTokens-r.Reserved)
	return s
}

// AbandonedCost is the actual cost to Release a ticket with when it ends without reporting its usage
// because it was taken back: handed back when its owner died or stopped, or cancelled while admitted.
// A ticket that never started spent nothing: its reservation comes back (0). One that started may
// have reached the provider: its reservation stands as spent (-1, "not reported").
func AbandonedCost(started bool) int64 {
	if started {
		return -1
	}
	return 0
}

// Pause returns s paused until the later of its current pause and until.
func (s State) Pause(until time.Time) State {
	if until.After(s.PausedUntil) {
		s.PausedUntil = until
	}
	return s
}
