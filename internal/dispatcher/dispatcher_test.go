package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
	"github.com/sluicehq/sluice/throttle"
)

// testDeadline bounds a test's waits: generous, for a busy 2-core machine.
const testDeadline = 3 * time.Minute

// ignoreShared are goroutines that outlive a service by design, because they belong to the pool
// the services share: its health check, and the background reader pgconn starts on a connection
// whose query a stopping service cancelled (it drains the server's answer, then ends; the connection
// goes back to the pool).
var ignoreShared = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
	goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
	goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead"),
}

// testSetup is a dispatcher's configuration over a throwaway schema, and a queue of the test's own
// over the same schema, to look at the tables with.
type testSetup struct {
	Config
	Queue *store.Queue
}

func testConfig(t *testing.T, limits ...throttle.Limit) testSetup {
	t.Helper()
	c := temporaltest.Require(t, server).Client(t)
	s := dbConfig(t, limits...)
	s.Client = c
	return s
}

// dbConfig is testConfig without a Temporal client, for the services that talk to Postgres only (the
// maintenance services): their tests run without the dev server.
func dbConfig(t *testing.T, limits ...throttle.Limit) testSetup {
	t.Helper()
	q := testdb.Engine(t, store.Options{})
	if len(limits) > 0 {
		require.NoError(t, q.UpsertLimits(context.Background(), limits...))
	}
	return testSetup{Queue: q, Config: Config{Owner: "owner-" + t.Name(), Tunables: Tunables{
		Pool: q.Pool(), Schema: q.Schema(), Identity: "test", MaxHeld: 100,
		LeaseTTL: 15 * time.Second, PollInterval: 50 * time.Millisecond, HeartbeatInterval: time.Second,
		ClaimBatch: 10, SelfCheckInterval: time.Second, DataConverter: converter.GetDefaultDataConverter(),
		FailureConverter: temporal.GetDefaultFailureConverter(), Logger: testenv.Logger(t),
	}}}
}

// newDispatcher is New, for a test.
func newDispatcher(t testing.TB, s testSetup) *Dispatcher {
	t.Helper()
	d, err := New(s.Config)
	require.NoError(t, err)
	return d
}

func TestServices_StartStop(t *testing.T) {
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
	ctx := context.Background()
	d := newDispatcher(t, cfg)
	services := map[string]service{
		"Claimer": d.claimer, "Runner": d.runner, "Completer": d.completer, "Enqueuer": d.enqueuer,
		"Deliverer": d.deliverer, "Heartbeater": d.heartbeater, "LeaseRenewer": d.leaseRenewer, "Rescuer": d.rescuer,
		"Gauger": d.gauger, "Forgetter": d.forgetter, "Pruner": d.pruner, "SelfChecker": d.selfChecker,
	}
	for _, s := range d.maintenance() {
		require.Contains(t, slices.Collect(maps.Values(services)), s, "every maintenance service is checked")
	}
	for name, s := range services {
		t.Run(name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			require.NoError(t, s.Stop(ctx), "Stop before Start is safe")
			require.NoError(t, s.Start(ctx))
			require.ErrorIs(t, s.Start(ctx), errStarted)
			require.NoError(t, s.Stop(ctx))
			require.NoError(t, s.Stop(ctx), "Stop twice is safe")
			goleak.VerifyNone(t, append(ignoreShared, before)...)
			require.NoError(t, s.Start(ctx), "a stopped service starts again")
			require.NoError(t, s.Stop(ctx))
			goleak.VerifyNone(t, append(ignoreShared, before)...)
		})
	}
}

// heldAtEnqueue pauses key so that the tickets enqueued until release is called wait in line: the
// enqueue's own claim (store.EnqueueClaiming) admits nothing, and a test can have another replica's
// claim, or this process's claimer, admit them. release resumes the limit.
func heldAtEnqueue(t *testing.T, q *store.Queue, key string) (release func()) {
	t.Helper()
	require.NoError(t, q.Pause(context.Background(), key, time.Now().Add(time.Hour)))
	return func() { require.NoError(t, q.Resume(context.Background(), key)) }
}

// enqueue holds an invocation running run on limit "k" and writes its ticket.
func enqueue(t *testing.T, d *Dispatcher, key string, run RunFunc) *Invocation {
	t.Helper()
	inv := NewInvocation(InvocationParams{Key: InvocationKey("default", key, "run", "1", 1), Run: run, Context: context.Background(),
		TaskToken: []byte("not-a-task-token"), Namespace: "default", Line: "k"}, time.Now())
	require.NoError(t, d.Enqueue(context.Background(), inv, store.EnqueueParams{
		LimitKeys: []string{"k"}, Priority: 3, Namespace: "default", WorkflowID: key, RunID: "run",
		ActivityID: "1", ActivityType: "Test", Attempt: 1, TaskToken: []byte("not-a-task-token")}))
	return inv
}

func TestDispatcher_StopCancelsRunsAfterTheStopTimeout(t *testing.T) {
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	before := goleak.IgnoreCurrent()
	d := newDispatcher(t, cfg)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { d.Stop(context.Background()) })
	started, cause := make(chan struct{}), make(chan error, 1)
	enqueue(t, d, "running", func(ctx context.Context) (any, error) {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	queued := enqueue(t, d, "queued", func(context.Context) (any, error) { return nil, errors.New("never admitted") })
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the first ticket was never run")
	}
	d.SetStopTimeout(0)
	d.Stop(ctx)
	require.ErrorIs(t, <-cause, errStopping, "the stop cancelled the run with its own cause")
	require.True(t, d.Stopping())
	require.Nil(t, d.deps.reg.lookup(InvocationKey("default", "running", "run", "1", 1)))
	require.Nil(t, d.deps.reg.lookup(queued.Key()), "the queued ticket was handed back and forgotten")
	st, err := cfg.Queue.LimitStatus(ctx, "k")
	require.NoError(t, err)
	require.Zero(t, st.State.InflightCount, "the run's slot was released by its hand-back")
	stats, err := cfg.Queue.Status(ctx)
	require.NoError(t, err)
	for _, ks := range stats {
		require.Zero(t, ks.Queued+ks.Admitted+ks.Running, "nothing is left in line for the stopped owner: %+v", ks)
	}
	d.Stop(ctx) // twice is safe
	goleak.VerifyNone(t, append(ignoreShared, before)...)
}

func TestDispatcher_StopGivesUpOnARunThatIgnoresCancellation(t *testing.T) {
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	before := goleak.IgnoreCurrent()
	d := newDispatcher(t, cfg)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { d.Stop(context.Background()) })
	started, release := make(chan struct{}), make(chan struct{})
	enqueue(t, d, "stubborn", func(context.Context) (any, error) {
		close(started)
		<-release
		return "late", nil
	})
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the ticket was never run")
	}
	d.SetStopTimeout(0)
	d.Stop(ctx) // returns after drainGrace without the run
	st, err := cfg.Queue.LimitStatus(ctx, "k")
	require.NoError(t, err)
	require.Zero(t, st.State.InflightCount, "the abandoned run's ticket was handed back")

	close(release)
	select {
	case <-d.runner.idleCh():
	case <-ctx.Done():
		t.Fatal("the late run never ended")
	}
	require.Nil(t, d.deps.reg.lookup(InvocationKey("default", "stubborn", "run", "1", 1)), "the late run let its invocation go")
	goleak.VerifyNone(t, append(ignoreShared, before)...)
}

// signalHandler passes records to next and closes seen at the first whose message is msg.
type signalHandler struct {
	slog.Handler
	msg  string
	once *sync.Once
	seen chan struct{}
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.seen) })
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h signalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(as)
	return h
}

// A ticket another transaction holds locked while the stop hands back (another owner's claim under
// way, or a cancelled claim of this one whose backend has not let go yet) is skipped by the hand-back
// but still handed back before Stop returns, once the lock is gone.
func TestDispatcher_StopHandsBackTicketsOthersHeldLocked(t *testing.T) {
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
	waits := signalHandler{Handler: cfg.Logger.Handler(), msg: msgStopWaitsForLocks, once: &sync.Once{}, seen: make(chan struct{})}
	cfg.Logger = slog.New(waits)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	d := newDispatcher(t, cfg)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { d.Stop(context.Background()) })
	started := make(chan struct{})
	enqueue(t, d, "running", func(ctx context.Context) (any, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	queued := enqueue(t, d, "queued", func(context.Context) (any, error) { return nil, errors.New("never admitted") })
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the first ticket was never run")
	}
	id, _, _ := queued.state()
	lock, err := cfg.Queue.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(context.Background()) }()
	var locked int64
	require.NoError(t, lock.QueryRow(ctx, `SELECT id FROM `+pgx.Identifier{cfg.Queue.Schema(), "sluice_ticket"}.Sanitize()+
		` WHERE id = $1 AND state = 'queued' FOR UPDATE`, id).Scan(&locked))

	d.SetStopTimeout(0)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		d.Stop(ctx)
	}()
	select {
	case <-waits.seen:
	case <-stopped:
		t.Fatal("Stop returned while a ticket of its owner was locked and queued")
	case <-ctx.Done():
		t.Fatal("the stop never waited for the locked ticket")
	}
	require.NoError(t, lock.Commit(ctx))
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("the stop never returned")
	}
	require.Nil(t, d.deps.reg.lookup(queued.Key()), "the locked ticket was handed back once free")
	stats, err := cfg.Queue.Status(ctx)
	require.NoError(t, err)
	for _, ks := range stats {
		require.Zero(t, ks.Queued+ks.Admitted+ks.Running+int64(ks.State.InflightCount), "nothing is left for the stopped owner: %+v", ks)
	}
}

// countHandler counts the records whose message is msg, and passes every record to next.
type countHandler struct {
	slog.Handler
	msg string
	n   *atomic.Int64
}

func (h countHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

// A heartbeat cut short because its loop is stopping says nothing: a worker stopping with thousands
// of queued tickets logged a warning for each of them.
func TestHeartbeater_AStoppedLoopDoesNotWarn(t *testing.T) {
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
	warned := countHandler{Handler: cfg.Logger.Handler(), msg: msgHeartbeatFailed, n: &atomic.Int64{}}
	cfg.Logger = slog.New(warned)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	d := newDispatcher(t, cfg)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { d.Stop(context.Background()) })
	inv := enqueue(t, d, "held", func(context.Context) (any, error) { return nil, nil })

	stopped, stop := context.WithCancel(ctx)
	stop()
	d.heartbeater.Send(stopped, inv)
	require.Zero(t, warned.n.Load(), "a heartbeat its stopped loop cut short")

	// The same heartbeat while the loop runs fails (the token is not Temporal's) and is worth a warning:
	// the check above can fail.
	d.heartbeater.Send(ctx, inv)
	require.Positive(t, warned.n.Load(), "a heartbeat that failed while running")
}
