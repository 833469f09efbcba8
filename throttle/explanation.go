package throttle

import "time"

// Wait names what a queued ticket waits for, as an Explanation's WaitsFor reports it: a Reason's
// name, or one of the waits below.
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
	// ReadyAt is the estimated instant at which this limit admits the ticket (see Explanation); zero
	// when it cannot be known, and Unknown says why. ReadyLow and ReadyHigh bound its likely range.
	ReadyAt   time.Time `json:"ready_at,omitzero"`
	ReadyLow  time.Time `json:"ready_low,omitzero"`
	ReadyHigh time.Time `json:"ready_high,omitzero"`
	Unknown   string    `json:"unknown,omitempty"`
	// Overdue counts the tickets holding the limit that have run longer than every recent run on it
	// (expected by their deadline at the latest); OverdueSince is the admission of the
	// longest-running of them.
	Overdue      int       `json:"overdue,omitempty"`
	OverdueSince time.Time `json:"overdue_since,omitzero"`
	// OverdueOpen counts those of the Overdue holders that have no deadline: when they end cannot be
	// told, so neither can ReadyAt while one holds the room the ticket needs.
	OverdueOpen int `json:"overdue_open,omitempty"`
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
