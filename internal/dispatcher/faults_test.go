package dispatcher

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/faultproxy"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// The fault tests put a proxy (internal/faultproxy) between the dispatcher's pool and Postgres and
// lose one statement's answer on a path whose outcome the dispatcher cannot know: the statement ran,
// its COMMIT included, and the caller hears a broken connection. Each then checks, from a pool of its
// own, that nothing was lost or left behind: the activity ran as often as it should (once, or never
// for a ticket its caller heard fail), no ticket is left unfinished, the limit's in-flight figures
// match its tickets (Verify: no reservation charged twice, no release lost), and the usage history
// counts each admission once. A ticket left running without a run is reconciled by the self-check
// within two SelfCheckIntervals of the fault (1 s in these tests) plus the confirmation second.

// faultBundle is a dispatcher whose statements pass through a proxy, and a queue over the same
// schema that does not.
type faultBundle struct {
	d      *Dispatcher
	cfg    testSetup
	proxy  *faultproxy.Proxy
	direct *store.Queue
	runs   atomic.Int64 // runs of the activities enqueued with bundle.enqueue
}

const faultKey = "k"

func faultSetup(t *testing.T, limit throttle.Limit) *faultBundle {
	t.Helper()
	cfg := testConfig(t)
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	proxy, through := faultproxy.ForTest(t, testdb.PoolConfig(t))
	var err error
	cfg.Pool, cfg.Schema = testdb.PoolWith(t, through), schema
	cfg.Queue, err = store.New(cfg.Pool, store.Options{Schema: schema})
	require.NoError(t, err)
	direct, err := store.New(pool, store.Options{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, direct.UpsertLimits(context.Background(), limit))
	cfg.Owner = "owner-" + t.Name()
	return &faultBundle{d: newDispatcher(t, cfg), cfg: cfg, proxy: proxy, direct: direct}
}

func (b *faultBundle) start(t *testing.T, ctx context.Context) {
	t.Helper()
	require.NoError(t, b.d.Start(ctx))
	t.Cleanup(func() { b.d.Stop(context.Background()) })
}

// enqueue writes a ticket on faultKey whose run counts itself and returns run's answer.
func (b *faultBundle) enqueue(t *testing.T, name string, cost int64, run RunFunc) (*Invocation, error) {
	t.Helper()
	inv := NewInvocation(InvocationParams{Key: InvocationKey("default", name, "run", "1", 1), Context: context.Background(),
		Run: func(ctx context.Context) (any, error) {
			b.runs.Add(1)
			return run(ctx)
		}, TaskToken: []byte("not-a-task-token"), Namespace: "default", Line: faultKey}, time.Now())
	err := b.d.Enqueue(context.Background(), inv, store.EnqueueParams{
		LimitKeys: []string{faultKey}, Cost: cost, Namespace: "default", WorkflowID: name, RunID: "run",
		ActivityID: "1", ActivityType: "Test", Attempt: 1, TaskToken: []byte("not-a-task-token")})
	return inv, err
}

// waitFor polls the database (a row's state, a count) until cond holds, within testDeadline. It is for
// outcomes no one service signals: a ticket finishes through the runner, the completer, a hand-back
// or another process's deliverer, and the test waits for whichever comes. Events a service signals
// are waited for with its test signal.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waited in vain for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// fired waits for f to have dropped its connection.
func fired(t *testing.T, ctx context.Context, f *faultproxy.Fault) {
	t.Helper()
	select {
	case <-f.Fired():
	case <-ctx.Done():
		t.Fatal("the fault never fired")
	}
}

// unfinished counts the schema's tickets still queued, admitted or running.
func (b *faultBundle) unfinished(t *testing.T, ctx context.Context) int {
	t.Helper()
	var n int
	require.NoError(t, b.direct.Pool().QueryRow(ctx, `SELECT count(*) FROM `+
		pgx.Identifier{b.direct.Schema(), "sluice_ticket"}.Sanitize()+` WHERE state IN ('queued', 'admitted', 'running')`).Scan(&n))
	return n
}

// requireSettled checks, once nothing is unfinished, that the limit holds nothing and agrees with its
// tickets, and that the usage history counts admissions requests: each admission charged once.
func (b *faultBundle) requireSettled(t *testing.T, ctx context.Context, admissions ...int64) {
	t.Helper()
	waitFor(t, ctx, "every ticket to finish", func() bool { return b.unfinished(t, ctx) == 0 })
	problems, err := b.direct.Verify(ctx)
	require.NoError(t, err)
	require.Empty(t, problems)
	st, err := b.direct.LimitStatus(ctx, faultKey)
	require.NoError(t, err)
	require.Zero(t, st.State.InflightCount, "every reservation released, once")
	require.Zero(t, st.State.InflightTokens)
	var requests int64
	require.NoError(t, b.direct.Pool().QueryRow(ctx, `SELECT coalesce(sum(requests), 0) FROM `+
		pgx.Identifier{b.direct.Schema(), "sluice_usage"}.Sanitize()+` WHERE key = $1`, faultKey).Scan(&requests))
	require.Contains(t, admissions, requests, "each admission charged once")
}

func faultContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	t.Cleanup(cancel)
	return ctx
}

// ok is an activity that succeeds.
func ok(context.Context) (any, error) { return "done", nil }

func TestFaults_ClaimCommitAnswerLost(t *testing.T) {
	t.Parallel()
	ctx := faultContext(t)
	b := faultSetup(t, throttle.Limit{Key: faultKey, MaxConcurrent: 5})
	// The first claim that admits tickets (to running: they are the claimer's own) commits, and its
	// answer is lost: the claimer hears an error and runs nothing. (An enqueue's own claim is
	// TestFaults_EnqueueCommitAnswerLost's.)
	f := b.proxy.Arm(faultproxy.AfterRun, func(r faultproxy.RoundTrip) bool {
		return r.Commits() && r.Contains("SET state = CASE WHEN") && !r.TxContains(".sluice_ticket (state, line_key")
	})
	b.start(t, ctx)
	release := heldAtEnqueue(t, b.direct, faultKey) // admitted by the claimer, not by their enqueue
	for _, name := range []string{"a", "b", "c"} {
		_, err := b.enqueue(t, name, 10, ok)
		require.NoError(t, err)
	}
	release()
	fired(t, ctx, f)
	lost := time.Now()
	waitFor(t, ctx, "the self-check to run the tickets the lost claim admitted", func() bool { return b.runs.Load() == 3 })
	t.Logf("lost claim answer to its tickets run: %s (the bound: 2 x SelfCheckInterval %s + %s)",
		time.Since(lost).Round(time.Millisecond), b.cfg.SelfCheckInterval, selfCheckConfirm)
	b.requireSettled(t, ctx, 3)
	require.EqualValues(t, 3, b.runs.Load(), "the self-check ran each admitted ticket, once")
}

func TestFaults_TakeCommitAnswerLost(t *testing.T) {
	t.Parallel()
	ctx := faultContext(t)
	b := faultSetup(t, throttle.Limit{Key: faultKey, MaxConcurrent: 5})
	// A process that polls (behind a transaction pooler) does not listen: claims admit its tickets
	// for a take.
	b.cfg.TransactionPooler = true
	b.d = newDispatcher(t, b.cfg)
	b.start(t, ctx)
	require.NoError(t, b.d.claimer.Stop(ctx)) // another replica admits this one's tickets: it takes them
	release := heldAtEnqueue(t, b.direct, faultKey)
	for _, name := range []string{"a", "b"} {
		_, err := b.enqueue(t, name, 10, ok)
		require.NoError(t, err)
	}
	release()
	f := b.proxy.Arm(faultproxy.AfterRun, func(r faultproxy.RoundTrip) bool {
		return r.Commits() && r.TxContains("SET state = 'running'")
	})
	res, err := b.direct.Claim(ctx, store.ClaimParams{Owner: "another-replica"})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 2)
	fired(t, ctx, f)
	b.requireSettled(t, ctx, 2)
	require.EqualValues(t, 2, b.runs.Load())
}

// A listening process reads the tickets another replica's claim moved to running for it; when that
// read's answer is lost, the self-check runs them, each once.
func TestFaults_NotifiedReadAnswerLost(t *testing.T) {
	t.Parallel()
	ctx := faultContext(t)
	b := faultSetup(t, throttle.Limit{Key: faultKey, MaxConcurrent: 5})
	b.start(t, ctx)
	require.NoError(t, b.d.claimer.Stop(ctx)) // another replica admits this one's tickets
	release := heldAtEnqueue(t, b.direct, faultKey)
	for _, name := range []string{"a", "b"} {
		_, err := b.enqueue(t, name, 10, ok)
		require.NoError(t, err)
	}
	release()
	f := b.proxy.Arm(faultproxy.AfterRun, func(r faultproxy.RoundTrip) bool {
		return r.Contains("state = 'running' AND ($2::bigint[] IS NULL")
	})
	res, err := b.direct.Claim(ctx, store.ClaimParams{Owner: "another-replica"})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 2)
	fired(t, ctx, f) // the owner read the tickets named to it: they were moved straight to running
	b.requireSettled(t, ctx, 2)
	require.EqualValues(t, 2, b.runs.Load())
}

func TestFaults_CompleteCommitAnswerLost(t *testing.T) {
	t.Parallel()
	ctx := faultContext(t)
	b := faultSetup(t, throttle.Limit{Key: faultKey, MaxConcurrent: 5, TokensPerMinute: 60_000})
	f := b.proxy.Arm(faultproxy.AfterRun, func(r faultproxy.RoundTrip) bool {
		return r.Commits() && r.TxContains(".sluice_release (key, count")
	})
	b.start(t, ctx)
	for _, name := range []string{"a", "b"} {
		_, err := b.enqueue(t, name, 100, ok)
		require.NoError(t, err)
	}
	fired(t, ctx, f)
	// The completion is recorded; its retry finds the tickets finished, and the delivery loop
	// reports them.
	b.requireSettled(t, ctx, 2)
	require.EqualValues(t, 2, b.runs.Load(), "a recorded outcome is never run again")
}

func TestFaults_EnqueueCommitAnswerLost(t *testing.T) {
	t.Parallel()
	ctx := faultContext(t)
	b := faultSetup(t, throttle.Limit{Key: faultKey, MaxConcurrent: 5})
	b.start(t, ctx)
	f := b.proxy.Arm(faultproxy.AfterRun, func(r faultproxy.RoundTrip) bool {
		return r.Commits() && r.TxContains(".sluice_ticket (state, line_key")
	})
	inv, err := b.enqueue(t, "a", 10, ok)
	require.Error(t, err, "the caller hears the enqueue failed (Temporal retries the activity)")
	fired(t, ctx, f)
	require.Nil(t, b.d.deps.reg.lookup(inv.Key()))
	// The ticket was written all the same: it is handed back, never run.
	// Admitted once by a claim before the self-check handed it back, or not at all.
	b.requireSettled(t, ctx, 0, 1)
	require.Zero(t, b.runs.Load(), "a ticket whose caller heard it fail is never run")
}

func TestFaults_RequeueCommitAnswerLost(t *testing.T) {
	t.Parallel()
	ctx := faultContext(t)
	b := faultSetup(t, throttle.Limit{Key: faultKey, MaxConcurrent: 5})
	f := b.proxy.Arm(faultproxy.AfterRun, func(r faultproxy.RoundTrip) bool {
		return r.Commits() && r.TxContains("requeues = requeues + 1")
	})
	b.start(t, ctx)
	_, err := b.enqueue(t, "a", 10, func(ctx context.Context) (any, error) {
		return nil, sluiceactivity.RateLimitedFor(ctx, 0)
	})
	require.NoError(t, err)
	fired(t, ctx, f)
	// The requeue committed; the runner, hearing it failed, let the invocation go, so the ticket is
	// handed back when next admitted (or by the self-check), never run again by this process.
	// Admitted a second time before it was handed back, or handed back by the self-check first.
	b.requireSettled(t, ctx, 1, 2)
	require.EqualValues(t, 1, b.runs.Load())
	tk := b.onlyTicket(t, ctx)
	require.Equal(t, store.OutcomeHandedBack, tk.OutcomeKind)
}

// onlyTicket returns the schema's one ticket, by its workflow ID "a".
func (b *faultBundle) onlyTicket(t *testing.T, ctx context.Context) store.Ticket {
	t.Helper()
	var id int64
	require.NoError(t, b.direct.Pool().QueryRow(ctx, `SELECT id FROM `+
		pgx.Identifier{b.direct.Schema(), "sluice_ticket"}.Sanitize()+` WHERE workflow_id = 'a'`).Scan(&id))
	tk, err := b.direct.Ticket(ctx, id)
	require.NoError(t, err)
	return tk
}

func TestFaults_HandBackCommitAnswerLost(t *testing.T) {
	t.Parallel()
	ctx := faultContext(t)
	b := faultSetup(t, throttle.Limit{Key: faultKey, MaxConcurrent: 5, TokensPerMinute: 60_000})
	// A dead owner's admitted ticket: no lease. This process's sweep hands it back.
	tk, err := b.direct.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{faultKey}, Owner: "dead", Cost: 100,
		Namespace: "default", WorkflowID: "a", RunID: "run", ActivityID: "1", ActivityType: "Test", Attempt: 1,
		TaskToken: []byte("not-a-task-token")})
	require.NoError(t, err)
	res, err := b.direct.Claim(ctx, store.ClaimParams{})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 1)
	f := b.proxy.Arm(faultproxy.AfterRun, func(r faultproxy.RoundTrip) bool {
		return r.Commits() && r.TxContains("outcome_kind = $3")
	})
	b.start(t, ctx)
	fired(t, ctx, f)
	b.requireSettled(t, ctx, 1)
	got, err := b.direct.Ticket(ctx, tk.ID)
	if !errors.Is(err, store.ErrNotFound) {
		require.NoError(t, err)
		require.Equal(t, store.OutcomeHandedBack, got.OutcomeKind, "handed back once")
	}
}

func TestFaults_DeliveryTakeAnswerLost(t *testing.T) {
	t.Parallel()
	ctx := faultContext(t)
	b := faultSetup(t, throttle.Limit{Key: faultKey, MaxConcurrent: 5})
	// A finished ticket of a dead process, for the delivery loop: its take's answer is lost.
	tk, err := b.direct.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{faultKey}, Owner: "gone", Namespace: "default",
		WorkflowID: "a", RunID: "run", ActivityID: "1", ActivityType: "Test", Attempt: 1, TaskToken: []byte("not-a-task-token")})
	require.NoError(t, err)
	_, err = b.direct.Claim(ctx, store.ClaimParams{Owner: "gone"})
	require.NoError(t, err)
	require.NoError(t, b.direct.Complete(ctx, store.CompleteParams{TicketID: tk.ID, ActualCost: -1, OutcomeKind: store.OutcomeCompleted}))
	f := b.proxy.Arm(faultproxy.AfterRun, func(r faultproxy.RoundTrip) bool { return r.Contains("deliveries = deliveries + 1") })
	b.start(t, ctx)
	fired(t, ctx, f)
	// Pushed back by the take that was lost, the delivery is taken again once that is due.
	waitFor(t, ctx, "the outcome to be delivered", func() bool {
		_, err := b.direct.Ticket(ctx, tk.ID)
		return errors.Is(err, store.ErrNotFound)
	})
	b.requireSettled(t, ctx, 1)
}

func TestFaults_LeaseRenewalAnswerLost(t *testing.T) {
	t.Parallel()
	ctx := faultContext(t)
	b := faultSetup(t, throttle.Limit{Key: faultKey, MaxConcurrent: 5})
	b.cfg.LeaseTTL = 3 * time.Second
	b.d = newDispatcher(t, b.cfg)
	renewed := &b.d.leaseRenewer.signals.Renewed
	renewed.Init()
	b.start(t, ctx)
	release := make(chan struct{})
	_, err := b.enqueue(t, "a", 10, func(ctx context.Context) (any, error) {
		<-release
		return "done", nil
	})
	require.NoError(t, err)
	f := b.proxy.Arm(faultproxy.AfterRun, func(r faultproxy.RoundTrip) bool { return r.Contains("sluice_owner (id, lease_expires_at") })
	fired(t, ctx, f)
	// The renewal whose answer was lost failed; the next, a leaseRetry later, keeps the lease: the
	// running ticket is not handed back.
	renewed.WaitUntil(t, func(r renewal) bool { return r.err != nil })
	next := renewed.WaitUntil(t, func(r renewal) bool { return r.err == nil })
	require.False(t, next.lapsed, "the lease held through the lost answer")
	close(release)
	b.requireSettled(t, ctx, 1)
	require.EqualValues(t, 1, b.runs.Load())
	tk := b.onlyTicketOrGone(t, ctx)
	require.NotEqual(t, store.OutcomeHandedBack, tk.OutcomeKind, "the live process's ticket was never handed back")
}

// onlyTicketOrGone returns the ticket of workflow "a", or a zero ticket once it is delivered (also
// when its delivery deletes it between the read of its ID and the read of the ticket).
func (b *faultBundle) onlyTicketOrGone(t *testing.T, ctx context.Context) store.Ticket {
	t.Helper()
	var id int64
	err := b.direct.Pool().QueryRow(ctx, `SELECT id FROM `+
		pgx.Identifier{b.direct.Schema(), "sluice_ticket"}.Sanitize()+` WHERE workflow_id = 'a'`).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Ticket{}
	}
	require.NoError(t, err)
	tk, err := b.direct.Ticket(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Ticket{} // delivered between the two reads
	}
	require.NoError(t, err)
	return tk
}
