package dispatcher

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// RunFunc runs the rest of the Temporal interceptor chain and the activity itself.
type RunFunc func(ctx context.Context) (any, error)

// InvocationParams describe a routed activity attempt the interceptor hands to the dispatcher.
type InvocationParams struct {
	// Key identifies the attempt before its ticket exists; see InvocationKey.
	Key string
	// Run runs the activity. Required.
	Run RunFunc
	// Context is the activity's context, whose values the run keeps; its cancellation is not kept.
	Context          context.Context
	TaskToken        []byte
	Namespace        string
	Deadline         time.Time // Temporal's deadline of the attempt; zero for none
	HeartbeatTimeout time.Duration
	// Line is the route's first limit: where provider headers and 429s apply.
	Line string
	// Model is the model the route names, which prices reported usage (Config.Prices); empty for
	// none.
	Model string
	// OutlivesAttempt says the run completes its Temporal activity itself, early, and goes on past
	// the attempt's deadline (a gate's permit, held until released): its context has no deadline.
	// Queued, the invocation is still forgotten once the deadline passes.
	OutlivesAttempt bool
}

// Invocation is one routed activity attempt held in this process's memory from ExecuteActivity until
// its outcome is recorded: the rest of the interceptor chain, the decoded arguments and the
// activity's context values. Inputs are never written to Postgres. Its mutable state is reached only
// through its methods, which are safe for concurrent use.
type Invocation struct {
	key       string
	run       RunFunc
	base      context.Context
	token     []byte
	namespace string
	deadline  time.Time
	hbTimeout time.Duration
	line      string
	model     string
	outlives  bool

	mu       sync.Mutex
	ticketID int64
	facts    admission.Facts
	limited  time.Time // the provider said 429 until then (sluiceactivity.RateLimited)
	observed bool      // the run reported the provider's headers
	running  bool
	begun    bool      // a run has begun since the invocation was held
	gone     bool      // let go of (abandon): no run of it begins
	gen      int       // the Requeues of the ticket the last run began: its admission's generation
	started  time.Time // when the run started; zero while queued
	finished bool      // the activity returned: Sluice records and delivers its outcome
	cancel   context.CancelCauseFunc
	details  []any
	pending  bool // details not yet sent
	lastSent time.Time
	actual   int64 // reported real cost in all; -1 when none
	output   int64 // the part of actual of output tokens
	money    int64 // the reported usage's cost in money; 0 when not known
}

// NewInvocation returns the invocation of p, created at now.
func NewInvocation(p InvocationParams, now time.Time) *Invocation {
	return &Invocation{
		key: p.Key, run: p.Run, base: context.WithoutCancel(p.Context), token: p.TaskToken,
		namespace: p.Namespace, deadline: p.Deadline, hbTimeout: p.HeartbeatTimeout, line: p.Line, model: p.Model,
		outlives: p.OutlivesAttempt, actual: -1, lastSent: now,
	}
}

type invocationCtxKey struct{}

// FromContext returns the invocation whose run ctx is, or nil outside a run Sluice started.
func FromContext(ctx context.Context) *Invocation {
	inv, _ := ctx.Value(invocationCtxKey{}).(*Invocation)
	return inv
}

// Key returns the invocation's key (see InvocationKey).
func (inv *Invocation) Key() string { return inv.key }

// Line returns the route's first limit, where provider headers and 429s apply.
func (inv *Invocation) Line() string { return inv.line }

// runContext returns the context a run gets: the activity's values, its deadline, cancellable with a
// cause (Temporal's cancellation, a stop), and the handles sluiceactivity reaches through run.
func (inv *Invocation) runContext(run admission.Run) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(inv.base)
	if !inv.deadline.IsZero() && !inv.outlives {
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithDeadline(ctx, inv.deadline)
		prev := cancel
		cancel = func(cause error) { prev(cause); cancelDeadline() }
	}
	ctx = context.WithValue(ctx, invocationCtxKey{}, inv)
	return admission.With(ctx, run), cancel
}

// execute runs the rest of the interceptor chain and the activity, turning a panic into an error.
func (inv *Invocation) execute(ctx context.Context) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = temporal.NewApplicationError(fmt.Sprintf("activity panicked: %v", p), "PanicError")
		}
	}()
	return inv.run(ctx)
}

// outcomeTicket is the ticket that reports kind and outcome for the invocation's ticket id, as much
// of it as a delivery needs.
func (inv *Invocation) outcomeTicket(id int64, kind string, outcome []byte) store.Ticket {
	return store.Ticket{ID: id, TaskToken: inv.token, Namespace: inv.namespace, OutcomeKind: kind, Outcome: outcome}
}

func (inv *Invocation) taskToken() []byte { return inv.token }

func (inv *Invocation) setTicket(id int64) {
	inv.mu.Lock()
	inv.ticketID = id
	inv.mu.Unlock()
}

// beginResult is what tryBegin did.
type beginResult int

const (
	runBegun     beginResult = iota // the run began
	runAlready                      // a run is under way, or a run of the same admission began already
	runAbandoned                    // the invocation was let go (abandon): nothing runs it
)

// tryBegin marks the invocation running ticket t from now, cancellable with cancel, and reports
// whether it did: not when a run is under way, nor when a run of the same admission began already,
// nor once the invocation was let go (see abandon). An admission is told from the next by the
// ticket's Requeues, which each requeue adds one to. The claimer, the take loop and the self-check
// may each hand the runner the same admission (the self-check acts on what the others' lost answers
// left behind); it is run once.
func (inv *Invocation) tryBegin(t store.Ticket, cancel context.CancelCauseFunc, now time.Time) beginResult {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	switch {
	case inv.ranLocked(t):
		return runAlready
	case inv.gone:
		return runAbandoned
	}
	inv.begun, inv.gen = true, t.Requeues
	inv.ticketID, inv.running, inv.cancel, inv.started, inv.finished = t.ID, true, cancel, now, false
	inv.facts = admission.Facts{TicketID: t.ID, Limits: t.LimitKeys, Reserved: t.Reserved(),
		EnqueuedAt: t.EnqueuedAt, AdmittedAt: t.AdmittedAt, Requeues: t.Requeues}
	return runBegun
}

// abandon lets the invocation go unless a run of it is under way: then it returns the run's cancel
// function and true, and otherwise marks the invocation so that tryBegin refuses every run of it from
// now on. Deciding and beginning are atomic, under inv.mu: whoever drops a held invocation while its
// ticket may be taken (Registry.letGo) calls abandon first, because the runner may have looked the
// invocation up already. A run it began after the drop would run unregistered, and the self-check,
// finding a running ticket nobody holds, would hand it back (its limits released) while the activity
// runs. Refused instead, the runner hands the ticket back before anything runs.
func (inv *Invocation) abandon() (cancel context.CancelCauseFunc, running bool) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.running {
		return inv.cancel, true
	}
	inv.gone = true
	return nil, false
}

// runReport is what a finished run reported through sluiceactivity.
type runReport struct {
	actual   int64     // real cost in all; -1 when none
	output   int64     // the part of actual of output tokens
	money    int64     // its cost in money; 0 when not known
	limited  time.Time // the provider refused the call until then; zero when it did not
	observed bool      // the provider's headers were reported
}

// finish marks the activity returned and returns what the run reported, forgetting that headers were
// observed.
func (inv *Invocation) finish() runReport {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	r := runReport{actual: inv.actual, output: inv.output, money: inv.money, limited: inv.limited, observed: inv.observed}
	inv.observed, inv.finished = false, true
	return r
}

// requeued makes the invocation queued again after a refused run, as if just heartbeated at now. It
// comes before the ticket is put back in line, never after: once the ticket is back, a claim may
// admit it and a new run begin at any moment, and marking the invocation queued then would wipe that
// run's state (its cancel function: a cancelled workflow would no longer reach it).
func (inv *Invocation) requeued(now time.Time) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.running, inv.cancel, inv.limited, inv.actual, inv.output, inv.money, inv.lastSent = false, nil, time.Time{}, -1, 0, 0, now
	inv.started, inv.finished = time.Time{}, false
}

// ranAdmission reports whether a run of t's admission has begun, or a run is under way: the
// self-check leaves such a ticket to the run (or the requeue) that holds it.
func (inv *Invocation) ranAdmission(t store.Ticket) bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.ranLocked(t)
}

// ranLocked is ranAdmission with inv.mu held.
func (inv *Invocation) ranLocked(t store.Ticket) bool {
	return inv.running || (inv.begun && t.Requeues <= inv.gen)
}

// state returns the ticket ID (0 while it is being written), whether a run is under way, and the
// run's cancel function (nil before the run starts).
func (inv *Invocation) state() (id int64, running bool, cancel context.CancelCauseFunc) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.ticketID, inv.running, inv.cancel
}

// cancelRun cancels the run with cause, if it has started.
func (inv *Invocation) cancelRun(cause error) {
	if _, _, cancel := inv.state(); cancel != nil {
		cancel(cause)
	}
}

// expired reports whether a queued invocation's Temporal deadline passed more than a second before now.
func (inv *Invocation) expired(now time.Time) bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return !inv.running && !inv.deadline.IsZero() && now.After(inv.deadline.Add(time.Second))
}

// heartbeatDue reports whether the heartbeat loop should heartbeat the invocation at now. Sluice
// keeps the attempt alive while it is in Sluice's hands: queued, and after the activity returned
// while its outcome is delivered and recorded. While the activity runs, a HeartbeatTimeout is the
// activity's own: Sluice only flushes the details it recorded, and sends one heartbeat if the last
// one went out before the run started and the timeout is near, so that the activity has at least its
// whole HeartbeatTimeout from its start, as it would without Sluice. A stuck activity is thus timed
// out between 1 and 1.8 HeartbeatTimeouts after it started.
func (inv *Invocation) heartbeatDue(now time.Time, interval time.Duration) bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	since := now.Sub(inv.lastSent)
	switch {
	case inv.running && inv.outlives:
		// The run completed its activity itself (a gate's permit): Temporal would answer NotFound,
		// and the answer would cancel the run that holds the permit.
		return false
	case inv.running && !inv.finished && inv.hbTimeout > 0:
		flush := inv.pending && since >= heartbeatThrottle(inv.hbTimeout)
		bridge := inv.lastSent.Before(inv.started) && since >= inv.hbTimeout*8/10
		return flush || bridge
	case inv.hbTimeout > 0:
		return since >= min(interval, inv.hbTimeout*8/10)
	default:
		return since >= interval
	}
}

// recordDetails keeps the activity's latest heartbeat details and reports whether they are due to be
// sent now.
func (inv *Invocation) recordDetails(details []any, now time.Time) bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.details, inv.pending = details, true
	return now.Sub(inv.lastSent) >= heartbeatThrottle(inv.hbTimeout)
}

// hasPendingDetails reports whether details were recorded and not yet sent.
func (inv *Invocation) hasPendingDetails() bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.pending
}

// takeDetails returns the details to send in a heartbeat at now and marks them sent.
func (inv *Invocation) takeDetails(now time.Time) []any {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.pending, inv.lastSent = false, now
	return inv.details
}

func (inv *Invocation) admissionFacts() admission.Facts {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.facts
}

func (inv *Invocation) reportUsage(used throttle.Cost, money int64) {
	inv.mu.Lock()
	inv.actual, inv.output, inv.money = used.Total(), used.Output, money
	inv.mu.Unlock()
}

func (inv *Invocation) rateLimited(until time.Time) {
	inv.mu.Lock()
	if until.After(inv.limited) {
		inv.limited = until
	}
	inv.mu.Unlock()
}

func (inv *Invocation) observe() {
	inv.mu.Lock()
	inv.observed = true
	inv.mu.Unlock()
}

// heartbeatThrottle is the least time between two heartbeats of a running activity; details recorded
// in between are sent by the heartbeat loop.
func heartbeatThrottle(hbTimeout time.Duration) time.Duration {
	if hbTimeout > 0 {
		return min(time.Second, hbTimeout/2)
	}
	return time.Second
}
