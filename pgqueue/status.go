package pgqueue

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/throttle"
)

// KeyStatus is how one limit stands, for operators (the sluice command's status and the dashboard).
type KeyStatus struct {
	// Configured is the limit as set; Effective is it lowered to what the provider's headers taught.
	Configured, Effective throttle.Limit
	// State is the admission state: buckets, in-flight figures (State.InflightTokens are the tokens
	// reserved by the tickets holding the key), the pause.
	State throttle.State
	// Queued counts the tickets waiting in the key's line; Admitted and Running the tickets holding
	// the key, admitted and not yet taken by their worker, and running.
	Queued, Admitted, Running int64
	// OldestQueued is when the oldest of the 1,000 tickets at the head of the line was written (the
	// whole line's oldest unless priorities put older tickets further back; reading a whole line of
	// millions every refresh would cost the database too much); zero when none waits.
	OldestQueued time.Time
	// HeadWaitReason is why the ticket at the head of the line last waited: "concurrency", "rate",
	// "tokens", "input_tokens", "output_tokens", "inflight_tokens" or "paused"; empty when none waits
	// or no claim has looked at it yet.
	HeadWaitReason string
	// RequestsLastMinute and TokensLastMinute are what the key admitted over the minute before Now:
	// tickets, and the tokens they reserved less what reported usage gave back (counted when the next
	// claim on the key folds the completion in).
	RequestsLastMinute, TokensLastMinute int64
	// InputTokensLastMinute and OutputTokensLastMinute are TokensLastMinute's input and output parts.
	InputTokensLastMinute, OutputTokensLastMinute int64
	// Now is the database's clock when the status was read.
	Now time.Time
}

// OldestWait is how long the line's oldest queued ticket has waited at Now; zero when none waits.
func (s KeyStatus) OldestWait() time.Duration {
	if s.OldestQueued.IsZero() {
		return 0
	}
	return s.Now.Sub(s.OldestQueued)
}

// Status returns how keys stand, in key order, or every limit when no key is given. It reads a
// consistent snapshot and locks nothing. A key that does not exist returns an error wrapping
// ErrUnknownLimit that names it.
func (q *Queue) Status(ctx context.Context, keys ...string) ([]KeyStatus, error) {
	st, err := q.e.Status(ctx, keys...)
	out := make([]KeyStatus, len(st))
	for i, s := range st {
		out[i] = KeyStatus(s)
	}
	return out, err
}

// UsagePoint is what a key admitted during one step of a Usage series: tickets, and the tokens they
// reserved less what reported usage gave back (see KeyStatus.TokensLastMinute).
type UsagePoint = engine.UsagePoint

// UsageHistory is how long the tables keep what each key admitted, per second.
const UsageHistory = engine.UsageHistory

// Usage returns, for each of keys, what it admitted per step over the window before the database's
// clock, oldest first, with every step present (zero when nothing was admitted), and that clock.
// Steps are aligned to multiples of step since the Unix epoch; the last one is still filling. step must be at least a
// second, and the window at least the step and at most 24 hours (the tables keep UsageHistory).
func (q *Queue) Usage(ctx context.Context, keys []string, window, step time.Duration) (map[string][]UsagePoint, time.Time, error) {
	return q.e.Usage(ctx, keys, window, step)
}

// Ticket is one activity attempt in a key's line or holding the key, as Tickets reads it.
type Ticket struct {
	ID int64
	// State is "queued", "admitted" (not yet taken by its worker) or "running".
	State string
	// LineKey is the limit whose line the ticket waits in; LimitKeys every limit it draws on.
	LineKey   string
	LimitKeys []string
	// Cost is the tokens reserved at admission.
	Cost                                     int64
	Priority                                 int
	FairnessKey                              string
	Namespace, WorkflowID, RunID, ActivityID string
	ActivityType                             string
	Attempt                                  int
	Owner                                    string
	EnqueuedAt, AdmittedAt                   time.Time // AdmittedAt is zero while queued
	// WaitReason is why a queued ticket last waited; empty when it only waited behind others.
	WaitReason string
}

// Tickets returns up to max tickets of key: those holding it (running, then admitted), then those
// queued in its line in the order they will be admitted; and the database's clock. An unknown key
// returns an error wrapping ErrUnknownLimit.
func (q *Queue) Tickets(ctx context.Context, key string, max int) ([]Ticket, time.Time, error) {
	ts, now, err := q.e.Tickets(ctx, key, max)
	out := make([]Ticket, len(ts))
	for i, t := range ts {
		out[i] = Ticket{ID: t.ID, State: string(t.State), LineKey: t.LineKey, LimitKeys: t.LimitKeys, Cost: t.Cost,
			Priority: t.Priority, FairnessKey: t.FairnessKey, Namespace: t.Namespace, WorkflowID: t.WorkflowID,
			RunID: t.RunID, ActivityID: t.ActivityID, ActivityType: t.ActivityType, Attempt: t.Attempt,
			Owner: t.Owner, EnqueuedAt: t.EnqueuedAt, AdmittedAt: t.AdmittedAt, WaitReason: t.WaitReason}
	}
	return out, now, err
}

// LimitChange names the fields of a limit to change; nil fields keep their value. A rate that
// changes without its burst given gets its default burst back (a burst sized for the old rate would
// be wrong for the new one); a rate given unchanged keeps its burst.
type LimitChange struct {
	MaxConcurrent     *int
	RequestsPerSecond *float64
	Burst             *float64
	TokensPerMinute   *float64
	TokenBurst        *float64
	MaxInflightTokens *int64
	// The input and output budgets (Anthropic's ITPM and OTPM) and their bursts.
	InputTokensPerMinute  *float64
	InputTokenBurst       *float64
	OutputTokensPerMinute *float64
	OutputTokenBurst      *float64
}

// Apply returns l with c's fields set.
func (c LimitChange) Apply(l throttle.Limit) throttle.Limit {
	set := func(dst *float64, v *float64) bool {
		if v == nil || *v == *dst {
			return false
		}
		*dst = *v
		return true
	}
	if c.MaxConcurrent != nil {
		l.MaxConcurrent = *c.MaxConcurrent
	}
	if c.MaxInflightTokens != nil {
		l.MaxInflightTokens = *c.MaxInflightTokens
	}
	for _, r := range []struct {
		rate, burst       *float64
		newRate, newBurst *float64
	}{{&l.RequestsPerSecond, &l.Burst, c.RequestsPerSecond, c.Burst}, {&l.TokensPerMinute, &l.TokenBurst, c.TokensPerMinute, c.TokenBurst},
		{&l.InputTokensPerMinute, &l.InputTokenBurst, c.InputTokensPerMinute, c.InputTokenBurst},
		{&l.OutputTokensPerMinute, &l.OutputTokenBurst, c.OutputTokensPerMinute, c.OutputTokenBurst}} {
		if set(r.rate, r.newRate) {
			*r.burst = 0
		}
		if r.newBurst != nil {
			*r.burst = *r.newBurst
		}
	}
	return l
}

// Empty reports whether c changes nothing.
func (c LimitChange) Empty() bool { return c == LimitChange{} }

// ErrInvalidLimit is wrapped by ChangeLimit's error when the changed limit does not validate; the
// message names the field and the value.
var ErrInvalidLimit = engine.ErrInvalidLimit

// ChangeLimit applies c to key's configuration under the limit row's lock, so that two changes at
// the same moment (two operators, the dashboard and the sluice command) both apply, and returns the
// limit stored. The result is validated first: an invalid one returns an error wrapping ErrInvalidLimit
// that names the field and value, and changes nothing. An unknown key is created from the zero Limit when create is set, and is otherwise an
// error wrapping ErrUnknownLimit. Like UpsertLimits, it applies at the next admission on every
// replica.
func (q *Queue) ChangeLimit(ctx context.Context, key string, c LimitChange, create bool) (throttle.Limit, error) {
	return q.e.ChangeLimit(ctx, key, create, c.Apply)
}
