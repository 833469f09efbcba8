package dispatcher

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/internal/temporaltest"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testenv"
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

func testConfig(t *testing.T, limits ...throttle.Limit) Config {
	t.Helper()
	c := temporaltest.Require(t, server).Client(t)
	q := testdb.Engine(t, engine.Options{})
	if len(limits) > 0 {
		require.NoError(t, q.UpsertLimits(context.Background(), limits...))
	}
	return Config{
		Queue: q, Client: c, Owner: "owner-" + t.Name(), Identity: "test", MaxHeld: 100,
		LeaseTTL: 15 * time.Second, PollInterval: 50 * time.Millisecond, HeartbeatInterval: time.Second,
		ClaimBatch: 10, DataConverter: converter.GetDefaultDataConverter(),
		FailureConverter: temporal.GetDefaultFailureConverter(), Logger: testenv.Logger(t),
		Telemetry: telemetry.New(nil, nil),
	}
}

// service is what every service of the package is.
type service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

func TestServices_StartStop(t *testing.T) {
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
	ctx := context.Background()
	d := New(cfg)
	for name, s := range map[string]service{
		"Claimer": d.claimer, "Runner": d.runner, "Completer": d.completer,
		"Deliverer": d.deliverer, "Heartbeater": d.heartbeater, "Maintainer": d.maintainer,
	} {
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

// enqueue holds an invocation running run on limit "k" and writes its ticket.
func enqueue(t *testing.T, d *Dispatcher, key string, run RunFunc) *Invocation {
	t.Helper()
	inv := NewInvocation(InvocationParams{Key: InvocationKey("default", key, "run", "1", 1), Run: run, Context: context.Background(),
		TaskToken: []byte("not-a-task-token"), Namespace: "default", Line: "k"}, time.Now())
	require.NoError(t, d.Enqueue(context.Background(), inv, engine.EnqueueParams{
		LimitKeys: []string{"k"}, Priority: 3, Namespace: "default", WorkflowID: key, RunID: "run",
		ActivityID: "1", ActivityType: "Test", Attempt: 1, TaskToken: []byte("not-a-task-token")}))
	return inv
}

func TestDispatcher_StopCancelsRunsAfterTheStopTimeout(t *testing.T) {
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	before := goleak.IgnoreCurrent()
	d := New(cfg)
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
	stats, err := cfg.Queue.Stats(ctx)
	require.NoError(t, err)
	for _, ks := range stats {
		require.Zero(t, ks.Queued+ks.Admitted, "nothing is left in line for the stopped owner: %+v", ks)
	}
	d.Stop(ctx) // twice is safe
	goleak.VerifyNone(t, append(ignoreShared, before)...)
}

func TestDispatcher_StopGivesUpOnARunThatIgnoresCancellation(t *testing.T) {
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	before := goleak.IgnoreCurrent()
	d := New(cfg)
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
