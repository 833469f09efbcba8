// Package sim holds Sluice's simulation of admission: a pure reference model of what the engine may
// admit (this file), and a driver (sim_test.go, run by `make sim`) that runs the real pgqueue engine
// on a real Postgres, from several simulated replicas, under a virtual clock, through random
// sequences of operations, and checks the engine against the model after every step.
//
// The model is written from the rules as documented, not from the engine's SQL: it keeps each
// limit's state with throttle's pure arithmetic, applied at the instants the engine is documented to
// apply it (an admission at its claim's instant; a completion's release when the next holder of the
// limit row folds the ledger; a cancel, requeue or hand-back at once), and it decides on its own which
// allowances count a ticket: those configured when the ticket was admitted, and no other.
package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

// MaxUsage is the most tokens (and money, in micro-units) the model takes a run to have used: the
// engine's documented bound on reported usage. Larger reports count as this much.
const MaxUsage = int64(1) << 40

// MaxMoneyUsage bounds reported money as the engine documents it.
const MaxMoneyUsage = throttle.MaxAllowanceAmount

// TicketState is where the model has a ticket.
type TicketState string

// The states of a ticket in the model.
const (
	Queued   TicketState = "queued"
	Admitted TicketState = "admitted"
	Running  TicketState = "running"
	Finished TicketState = "finished" // released; its outcome waits for delivery (or was delivered)
	Returned TicketState = "returned" // handed back and delivered: kept so that a retry keeps its place
	Gone     TicketState = "gone"     // cancelled while queued, expired, or delivered and deleted
)

// Ticket is one ticket as the model knows it.
type Ticket struct {
	Index     int   // the simulation's own number, stable across replays
	ID        int64 // the engine's
	Owner     string
	Keys      []string
	Cost      throttle.Cost
	Money     int64
	Deadline  time.Time
	NotBefore time.Time
	Activity  string // Temporal activity identity, for retries
	Attempt   int

	State      TicketState
	AdmittedAt time.Time
	FinishedAt time.Time
	// Charged are, by limit key, the allowances (by Allowance.Key) that counted the ticket when it
	// was admitted.
	Charged map[string][]string
	// Ends counts how often the ticket ended (released, refused, expired, cancelled): exactly once.
	Ends int
	// Kind is how it ended: completed, canceled, handed_back, refused, expired.
	Kind string
}

// Spend is what the ticket counts against allowances.
func (t *Ticket) Spend() throttle.Spend { return throttle.Spend{Tokens: t.Cost, Money: t.Money} }

// Usage is what a finished run reported: tokens in all (negative: not reported), of which output, and
// money (negative: not known).
type Usage struct {
	Total, Output, Money int64
	Void                 bool // the run never started: everything comes back
}

// clamped is u as the engine is documented to take it: usage above MaxUsage counts as MaxUsage.
func (u Usage) clamped() Usage {
	u.Total = min(u.Total, MaxUsage)
	u.Output = min(max(0, u.Output), max(0, u.Total))
	u.Money = min(u.Money, MaxMoneyUsage)
	return u
}

// release is one ticket's release, waiting for the fold (completions) or applied at once.
type release struct {
	t     *Ticket
	usage Usage
}

// allowance is one allowance's state, kept by its Key while the limit exists, whether it is
// configured or not: removing an allowance and adding it back within its window keeps its count.
type allowance struct {
	a throttle.Allowance // the configured one, or one parsed from the key (its amount unused)
	s throttle.AllowanceState
}

// Key is one limit as the model has it.
type Key struct {
	Limit throttle.Limit // as configured, defaults filled in
	State throttle.State // buckets and in-flight figures, without allowances
	allow map[string]*allowance
	// pending are completions not yet folded into the buckets; pendingSpend into the allowances.
	pending, pendingSpend []release
	// ConfiguredAt is when the configuration last changed.
	ConfiguredAt time.Time
}

// rates is l without its allowances: what the buckets and in-flight figures apply.
func (k *Key) rates() throttle.Limit { l := k.Limit; l.Allowances = nil; return l }

// Model is the reference: the limits, and the tickets by the simulation's index.
type Model struct {
	Keys    map[string]*Key
	Tickets []*Ticket
}

// New returns an empty model.
func New() *Model { return &Model{Keys: map[string]*Key{}} }

// Configure creates key or replaces its configuration at now, keeping its state (buckets, in-flight,
// pause, allowance counts), as UpsertLimits does.
func (m *Model) Configure(l throttle.Limit, now time.Time) {
	l = l.WithDefaults()
	k := m.Keys[l.Key]
	if k == nil {
		k = &Key{allow: map[string]*allowance{}}
		m.Keys[l.Key] = k
	}
	k.Limit, k.ConfiguredAt = l, now
	for _, a := range l.Allowances {
		if st := k.allow[a.Key()]; st != nil {
			st.a = a
		}
	}
}

// Pause pauses key until until, keeping a later pause.
func (m *Model) Pause(key string, until time.Time) { k := m.Keys[key]; k.State = k.State.Pause(until) }

// Resume lifts key's pause.
func (m *Model) Resume(key string) { m.Keys[key].State.PausedUntil = time.Time{} }

// SetPause sets key's pause to exactly until, as an operator does (pgqueue.Queue.SetPause): shorter
// or longer than the pause in force; an until not after now lifts it.
func (m *Model) SetPause(key string, until, now time.Time) {
	if !until.After(now) {
		m.Resume(key)
		return
	}
	m.Keys[key].State.PausedUntil = until
}

// state is the state of allowance a of k, created empty.
func (k *Key) state(a throttle.Allowance) *allowance {
	st := k.allow[a.Key()]
	if st == nil {
		st = &allowance{a: a}
		k.allow[a.Key()] = st
	}
	return st
}

// Refusal is why the model refuses a ticket at an instant on one of its limits: "" when it has room.
type Refusal struct {
	Key    string
	Reason throttle.Reason
	// Allowance is the allowance that has no room, for ReasonAllowance.
	Allowance throttle.Allowance
	Used      int64
	// RetryAt is when the allowance has room again (zero: never).
	RetryAt time.Time
}

// Check returns the first of t's limits that refuses it at now, in t's key order; ok when all have
// room.
func (m *Model) Check(t *Ticket, now time.Time) (Refusal, bool) {
	for _, key := range t.Keys {
		k := m.Keys[key]
		if k == nil {
			return Refusal{Key: key}, false
		}
		if d := k.rates().CheckCost(k.State, now, t.Cost); !d.OK() {
			return Refusal{Key: key, Reason: d.Reason, RetryAt: d.RetryAt}, false
		}
		for _, a := range k.Limit.Allowances {
			st := k.state(a).s
			if d := a.Check(st, now, a.Of(t.Spend())); !d.OK() {
				return Refusal{Key: key, Reason: throttle.ReasonAllowance, Allowance: a, Used: a.Used(st, now), RetryAt: d.RetryAt}, false
			}
		}
	}
	return Refusal{}, true
}

// Admit checks that the model has room for t at now on every limit and admits it: an error names
// the limit and why when it has not (the engine over-admitted).
func (m *Model) Admit(t *Ticket, now time.Time) error {
	if r, ok := m.Check(t, now); !ok {
		what := r.Reason.String()
		if r.Reason == throttle.ReasonAllowance {
			what = fmt.Sprintf("allowance %s (used %d)", r.Allowance, r.Used)
		}
		return fmt.Errorf("over-admission: ticket #%d (id %d, keys %v, cost %+v, money %d) admitted at %s, but limit %q has no room: %s",
			t.Index, t.ID, t.Keys, t.Cost, t.Money, now.Format(time.RFC3339Nano), r.Key, what)
	}
	t.Charged = map[string][]string{}
	for _, key := range t.Keys {
		k := m.Keys[key]
		k.State = k.rates().AdmitCost(k.State, now, t.Cost)
		for _, a := range k.Limit.Allowances {
			st := k.state(a)
			st.s = a.Admit(st.s, now, a.Of(t.Spend()))
			t.Charged[key] = append(t.Charged[key], a.Key())
		}
	}
	t.State, t.AdmittedAt = Admitted, now
	return nil
}

// Complete records that t's run ended with usage: its release waits in the ledger for the next
// holder of each limit row (Fold).
func (m *Model) Complete(t *Ticket, u Usage) {
	for _, key := range t.Keys {
		if k := m.Keys[key]; k != nil {
			k.pending = append(k.pending, release{t, u})
			if len(t.Charged[key]) > 0 {
				k.pendingSpend = append(k.pendingSpend, release{t, u})
			}
		}
	}
	t.State = Finished
}

// ReleaseNow releases t at now on every limit at once, as a cancel, requeue or hand-back does under
// the limit rows' locks.
func (m *Model) ReleaseNow(t *Ticket, now time.Time, u Usage) {
	for _, key := range t.Keys {
		k := m.Keys[key]
		if k == nil {
			continue
		}
		k.State = k.rates().ReleaseMany(k.State, now, released(t, u))
		k.reconcile(release{t, u}, now)
	}
}

// Fold applies to key at now the completions waiting in its bucket ledger: the engine folds them, all
// at once, when a transaction takes the limit row's lock.
func (m *Model) Fold(key string, now time.Time) {
	k := m.Keys[key]
	if k == nil || len(k.pending) == 0 {
		return
	}
	var sum throttle.Released
	for _, r := range k.pending {
		sum = sum.Add(released(r.t, r.usage))
	}
	k.State = k.rates().ReleaseMany(k.State, now, sum)
	k.pending = nil
}

// FoldSpends applies to key at now the completions waiting in its allowance ledger.
func (m *Model) FoldSpends(key string, now time.Time) {
	k := m.Keys[key]
	if k == nil {
		return
	}
	for _, r := range k.pendingSpend {
		k.reconcile(r, now)
	}
	k.pendingSpend = nil
}

// PendingKeys are the keys with completions not yet folded into their buckets (spends: into their
// allowances).
func (m *Model) PendingKeys(spends bool) []string {
	var out []string
	for key, k := range m.Keys {
		if (!spends && len(k.pending) > 0) || (spends && len(k.pendingSpend) > 0) {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// released is what t gives back to a limit's buckets and in-flight figures, given its usage.
func released(t *Ticket, u Usage) throttle.Released {
	if u.Void {
		return throttle.ReleasedCost(t.Cost, throttle.Cost{}, true)
	}
	u = u.clamped()
	used, reported := admit.ReportedUsage(u.Total, u.Output)
	return throttle.ReleasedCost(t.Cost, used, reported)
}

// reconcile reconciles r's ticket at now on the allowances of k that counted it when it was admitted,
// in the window it was admitted in, and on no other.
func (k *Key) reconcile(r release, now time.Time) {
	t := r.t
	for _, ak := range t.Charged[k.Limit.Key] {
		st := k.allow[ak]
		if st == nil {
			continue
		}
		n := st.a.Of(t.Spend())
		actual := int64(-1)
		switch u := r.usage.clamped(); {
		case r.usage.Void:
			actual = 0
		case u.Total >= 0:
			used, _ := admit.ReportedUsage(u.Total, u.Output)
			money := u.Money
			if money < 0 {
				money = t.Money
				if used.Total() == 0 {
					money = 0
				}
			}
			actual = st.a.Of(throttle.Spend{Tokens: used, Money: money})
		}
		st.s = st.a.Release(st.s, now, t.AdmittedAt, n, actual)
	}
}
