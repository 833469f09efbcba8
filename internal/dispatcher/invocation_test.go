package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func newTestInvocation(hbTimeout time.Duration, deadline time.Time) *Invocation {
	return NewInvocation(InvocationParams{Key: "k", Context: context.Background(), HeartbeatTimeout: hbTimeout,
		Deadline: deadline, Line: "line"}, t0)
}

func TestInvocation_HeartbeatDue(t *testing.T) {
	t.Parallel()
	const interval = 5 * time.Second
	tests := []struct {
		name      string
		hbTimeout time.Duration
		running   bool
		details   bool
		startedAt time.Duration // after t0, when the run started (t0 itself unless set)
		finished  bool
		outlives  bool          // a gate's permit: the run completed its activity itself
		at        time.Duration // after t0, the last heartbeat
		want      bool
	}{
		{name: "QueuedNoTimeoutBeforeInterval", at: interval - time.Millisecond, want: false},
		{name: "QueuedNoTimeoutAtInterval", at: interval, want: true},
		{name: "QueuedShortTimeoutAt80Percent", hbTimeout: 2 * time.Second, at: 1600 * time.Millisecond, want: true},
		{name: "QueuedShortTimeoutBefore80Percent", hbTimeout: 2 * time.Second, at: 1599 * time.Millisecond, want: false},
		{name: "QueuedLongTimeoutUsesInterval", hbTimeout: time.Minute, at: interval, want: true},
		{name: "RunningWithTimeoutNoDetails", hbTimeout: 10 * time.Second, running: true, at: time.Hour, want: false},
		{name: "RunningWithTimeoutDetailsThrottled", hbTimeout: 10 * time.Second, running: true, details: true, at: 999 * time.Millisecond, want: false},
		{name: "RunningWithTimeoutDetailsDue", hbTimeout: 10 * time.Second, running: true, details: true, at: time.Second, want: true},
		{name: "RunningWithoutTimeoutUsesInterval", running: true, at: interval, want: true},
		// The last heartbeat went out while queued, at t0; the run started at t0+1s.
		{name: "RunStartedAfterLastHeartbeatBridgedNear80Percent", hbTimeout: 10 * time.Second, running: true, startedAt: time.Second, at: 8 * time.Second, want: true},
		{name: "RunStartedAfterLastHeartbeatNotYet", hbTimeout: 10 * time.Second, running: true, startedAt: time.Second, at: 7999 * time.Millisecond, want: false},
		{name: "FinishedRunKeptAliveLikeQueued", hbTimeout: 10 * time.Second, running: true, finished: true, at: interval, want: true},
		{name: "FinishedRunNotBeforeInterval", hbTimeout: 10 * time.Second, running: true, finished: true, at: interval - time.Millisecond, want: false},
		// A held permit is never heartbeated: its Acquire is complete, and Temporal's NotFound would
		// cancel the hold (and a finished one has nothing to deliver).
		{name: "PermitHeldNotBridged", hbTimeout: 10 * time.Second, running: true, outlives: true, startedAt: time.Second, at: time.Hour, want: false},
		{name: "PermitHeldWithoutTimeout", running: true, outlives: true, at: time.Hour, want: false},
		{name: "PermitEnded", hbTimeout: 10 * time.Second, running: true, outlives: true, finished: true, at: time.Hour, want: false},
		{name: "PermitQueuedIsHeartbeated", hbTimeout: 10 * time.Second, outlives: true, at: 8 * time.Second, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inv := newTestInvocation(tt.hbTimeout, time.Time{})
			inv.outlives = tt.outlives
			if tt.running {
				inv.tryBegin(store.Ticket{ID: 1}, func(error) {}, t0.Add(tt.startedAt))
			}
			if tt.finished {
				inv.finish()
			}
			if tt.details {
				inv.recordDetails([]any{"progress"}, t0)
			}
			require.Equal(t, tt.want, inv.heartbeatDue(t0.Add(tt.at), interval))
		})
	}
}

func TestInvocation_Details(t *testing.T) {
	t.Parallel()
	inv := newTestInvocation(time.Second, time.Time{}) // details are sent at most every 500ms
	require.False(t, inv.recordDetails([]any{1}, t0.Add(499*time.Millisecond)), "within the throttle of half the timeout")
	require.True(t, inv.hasPendingDetails())
	require.True(t, inv.recordDetails([]any{2}, t0.Add(500*time.Millisecond)), "the latest details are due after half the timeout")
	require.Equal(t, []any{2}, inv.takeDetails(t0.Add(500*time.Millisecond)))
	require.False(t, inv.hasPendingDetails())
	require.False(t, inv.recordDetails([]any{3}, t0.Add(999*time.Millisecond)), "the send restarted the throttle")
	require.True(t, newTestInvocation(time.Minute, time.Time{}).recordDetails(nil, t0.Add(time.Second)), "never more than a second between sends")
}

func TestInvocation_Expired(t *testing.T) {
	t.Parallel()
	inv := newTestInvocation(0, t0)
	require.False(t, inv.expired(t0.Add(time.Second)), "a second of grace past the deadline")
	require.True(t, inv.expired(t0.Add(time.Second+time.Nanosecond)))
	inv.tryBegin(store.Ticket{ID: 1}, func(error) {}, t0)
	require.False(t, inv.expired(t0.Add(time.Hour)), "a running invocation is never swept: its run ends it")
	require.False(t, newTestInvocation(0, time.Time{}).expired(t0.Add(time.Hour)), "no deadline, never expired")
}

func TestInvocation_FinishAndRequeue(t *testing.T) {
	t.Parallel()
	inv := newTestInvocation(0, time.Time{})
	var cause error
	inv.tryBegin(store.Ticket{ID: 7, Cost: 100, LimitKeys: []string{"a"}}, func(err error) { cause = err }, t0)
	require.Equal(t, int64(7), inv.admissionFacts().TicketID)
	inv.reportUsage(throttle.Tokens(42), 0)
	inv.rateLimited(t0.Add(time.Second))
	inv.rateLimited(t0) // an earlier reset does not shorten the pause
	inv.observe()
	require.Equal(t, runReport{actual: 42, limited: t0.Add(time.Second), observed: true}, inv.finish())
	require.False(t, inv.finish().observed, "headers observed are reported once")
	inv.cancelRun(errStopping)
	require.ErrorIs(t, cause, errStopping)

	inv.requeued(t0.Add(time.Minute))
	id, running, cancel := inv.state()
	require.Equal(t, int64(7), id)
	require.False(t, running)
	require.Nil(t, cancel)
	require.Equal(t, runReport{actual: -1}, inv.finish())
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := NewRegistry(1)
	ctx := context.Background()
	a := newTestInvocation(0, time.Time{})
	require.NoError(t, r.acquire(ctx))
	r.hold(a)
	require.Same(t, a, r.lookup("k"))

	full, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, r.acquire(full), context.Canceled, "no slot is free while one invocation is held")

	r.drop(a)
	r.drop(a) // twice is safe and frees one slot only
	require.Nil(t, r.lookup("k"))
	require.NoError(t, r.acquire(ctx))
	require.ErrorIs(t, r.acquire(full), context.Canceled, "the second drop did not free a second slot")

	b := NewInvocation(InvocationParams{Key: InvocationKey("ns", "wf", "run", "act", 2), Context: ctx}, t0)
	r.hold(b)
	r.dropTicket(store.Ticket{Namespace: "ns", WorkflowID: "wf", RunID: "run", ActivityID: "act", Attempt: 2}, errStopping)
	require.Empty(t, r.snapshot())
}

// letGo and tryBegin decide under the invocation's lock: a queued invocation let go is dropped and
// never begins a run; a running one is kept, and its run's cancel function returned.
func TestRegistry_LetGo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := NewRegistry(2)

	queued := newTestInvocation(0, time.Time{})
	require.NoError(t, r.acquire(ctx))
	r.hold(queued)
	cancel, running := r.letGo(queued)
	require.False(t, running)
	require.Nil(t, cancel)
	require.Nil(t, r.lookup(queued.Key()), "let go")
	require.Equal(t, runAbandoned, queued.tryBegin(store.Ticket{ID: 1}, func(error) {}, t0), "a run looked up before the drop never begins")

	busy := NewInvocation(InvocationParams{Key: "r", Context: ctx}, t0)
	require.NoError(t, r.acquire(ctx))
	r.hold(busy)
	var cause error
	require.Equal(t, runBegun, busy.tryBegin(store.Ticket{ID: 2}, func(err error) { cause = err }, t0))
	cancel, running = r.letGo(busy)
	require.True(t, running)
	require.Same(t, busy, r.lookup("r"), "the run holds it")
	cancel(errActivityGone)
	require.ErrorIs(t, cause, errActivityGone, "the run's own cancel function")
	require.Equal(t, runAlready, busy.tryBegin(store.Ticket{ID: 2}, func(error) {}, t0))

	busy.requeued(t0)
	_, running = r.letGo(busy)
	require.False(t, running, "requeued, it is queued again: let go")
	require.Equal(t, runAbandoned, busy.tryBegin(store.Ticket{ID: 2, Requeues: 1}, func(error) {}, t0),
		"the next admission never begins")
	require.Empty(t, r.snapshot())
}

// Temporal's answer to a heartbeat sent while a gate's permit was still queued can arrive after its
// run began and completed Acquire: NotFound then says nothing about the permit, which the run holds
// until Release. The heartbeater leaves such a run alone, and cancels any other run as before.
func TestHeartbeater_InterruptLeavesAHeldPermit(t *testing.T) {
	t.Parallel()
	h := &Heartbeater{}
	permit := NewInvocation(InvocationParams{Key: "p", Context: context.Background(), HeartbeatTimeout: time.Second,
		Line: "line", OutlivesAttempt: true}, t0)
	var permitCancelled, runCancelled bool
	require.Equal(t, runBegun, permit.tryBegin(store.Ticket{ID: 1}, func(error) { permitCancelled = true }, t0))
	h.interrupt(permit, errActivityGone)
	require.False(t, permitCancelled, "the hold was cancelled")

	run := newTestInvocation(time.Second, time.Time{})
	require.Equal(t, runBegun, run.tryBegin(store.Ticket{ID: 2}, func(error) { runCancelled = true }, t0))
	h.interrupt(run, errActivityGone)
	require.True(t, runCancelled, "an activity's run is cancelled when Temporal no longer knows it")
}
