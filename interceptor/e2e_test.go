package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
	"github.com/sluicehq/sluice/throttle"
)

var server *temporaltest.Server

func TestMain(m *testing.M) {
	if runSubprocessWorker() {
		return
	}
	s, err := temporaltest.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server = s
	code := m.Run()
	server.Stop()
	testenv.Exit(code)
}

// acts are the test activities; their counters are the activities' own observations.
type acts struct {
	inFlight, peak atomic.Int64
	calls          sync.Map // activity ID -> *atomic.Int64 runs
	hold           time.Duration
	failUntil      int32         // fail attempts below this
	gate           chan struct{} // when set, each run heartbeats until it is closed, then returns
	maxWaited      atomic.Int64  // the longest wait in line a run saw (sluiceactivity.Admission), ns
}

func (a *acts) Double(ctx context.Context, x int) (int, error) {
	info := activity.GetInfo(ctx)
	if info.ActivityType.Name != "Double" {
		return 0, fmt.Errorf("GetInfo says %q", info.ActivityType.Name)
	}
	activity.GetLogger(ctx).Debug("double", "x", x, "attempt", info.Attempt)
	v, _ := a.calls.LoadOrStore(info.WorkflowExecution.ID+"/"+info.ActivityID, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	n := a.inFlight.Add(1)
	defer a.inFlight.Add(-1)
	for {
		p := a.peak.Load()
		if n <= p || a.peak.CompareAndSwap(p, n) {
			break
		}
	}
	activity.RecordHeartbeat(ctx, x)
	if adm, ok := sluiceactivity.Admission(ctx); ok {
		for {
			m := a.maxWaited.Load()
			if int64(adm.Waited) <= m || a.maxWaited.CompareAndSwap(m, int64(adm.Waited)) {
				break
			}
		}
	}
	for open := a.gate != nil; open; {
		select {
		case <-a.gate:
			open = false
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
			activity.RecordHeartbeat(ctx, x)
		}
	}
	if info.Attempt < a.failUntil {
		return 0, temporal.NewApplicationError(fmt.Sprintf("attempt %d fails", info.Attempt), "Flaky")
	}
	if a.hold > 0 {
		select {
		case <-time.After(a.hold):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return 2 * x, nil
}

// Block heartbeats until its context ends.
func (a *acts) Block(ctx context.Context) error {
	for {
		activity.RecordHeartbeat(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

type fanOutInput struct {
	N                int
	HeartbeatTimeout time.Duration
	MaxAttempts      int32
}

func FanOut(ctx workflow.Context, in fanOutInput) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		HeartbeatTimeout:    in.HeartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 1, MaximumAttempts: in.MaxAttempts},
	})
	return sumActivities(ctx, "Double", in.N)
}

// sumActivities runs n activities of type name, the i-th with argument i, and returns the sum of
// their results, or the first error. They are scheduled from coroutines of at most 20 each, so that
// no workflow coroutine runs long between two yields: one loop scheduling 200 activities can, under
// the race detector on a busy machine, exceed the SDK's deadlock detection timeout.
func sumActivities(ctx workflow.Context, name string, n int) (int, error) {
	const chunk = 20
	type part struct {
		Sum int
		Err error
	}
	results := workflow.NewChannel(ctx)
	parts := 0
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		parts++
		workflow.Go(ctx, func(ctx workflow.Context) {
			fs := make([]workflow.Future, 0, hi-lo)
			for i := lo; i < hi; i++ {
				fs = append(fs, workflow.ExecuteActivity(ctx, name, i))
			}
			var p part
			for _, f := range fs {
				var v int
				if p.Err = f.Get(ctx, &v); p.Err != nil {
					break
				}
				p.Sum += v
			}
			results.Send(ctx, p)
		})
	}
	sum := 0
	for range parts {
		var p part
		results.Receive(ctx, &p)
		if p.Err != nil {
			return 0, p.Err
		}
		sum += p.Sum
	}
	return sum, nil
}

func BlockAll(ctx workflow.Context, n int) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute, HeartbeatTimeout: 10 * time.Second, WaitForCancellation: true,
	})
	futures := make([]workflow.Future, n)
	for i := range n {
		futures[i] = workflow.ExecuteActivity(ctx, "Block")
	}
	var errs []error
	for _, f := range futures {
		errs = append(errs, f.Get(ctx, nil))
	}
	return errors.Join(errs...)
}

type env struct {
	c      client.Client
	pool   *pgxpool.Pool
	schema string
	queue  string
	acts   *acts
	q      *store.Queue
	log    *slog.Logger // Sluice's logs, to t.Log; nil in a worker subprocess (the default then)
}

func newEnv(t testing.TB, a *acts) *env {
	t.Helper()
	s := temporaltest.Require(t, server)
	pool := testdb.Pool(t)
	e := &env{c: s.Client(t), pool: pool, schema: testdb.Schema(t, pool), queue: "q-" + testdb.NewSchemaName(), acts: a, log: testenv.Logger(t)}
	q, err := store.New(pool, store.Options{Schema: e.schema})
	require.NoError(t, err)
	e.q = q
	return e
}

func (e *env) options(limits ...throttle.Limit) sluiceinterceptor.Options {
	return sluiceinterceptor.Options{
		Pool: e.pool, Client: e.c, Schema: e.schema, Limits: limits,
		Routes: map[string]sluiceinterceptor.Route{
			"Double": {Limits: []string{"svc"}, Cost: func([]any) (int64, error) { return 10, nil }},
			"Block":  {Limits: []string{"svc"}},
		},
		// LeaseTTL stays at its default: a lease that lapses under a stall hands the owner's running
		// tickets back while they run (see TestPlugin_FanOutAcrossWorkers), which the fault tests
		// cover; the kill tests set a short one themselves.
		PollInterval: 200 * time.Millisecond, HeartbeatInterval: 500 * time.Millisecond,
		Logger: e.log,
	}
}

// startWorker starts a worker with the plugin built from opts, stopped at the end of the test.
func (e *env) startWorker(t *testing.T, opts sluiceinterceptor.Options) (worker.Worker, *sluiceinterceptor.Plugin) {
	t.Helper()
	plugin, err := sluiceinterceptor.NewPlugin(opts)
	require.NoError(t, err)
	w := worker.New(e.c, e.queue, worker.Options{DeadlockDetectionTimeout: temporaltest.DeadlockTimeout, Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 5 * time.Second})
	w.RegisterWorkflow(FanOut)
	w.RegisterWorkflow(BlockAll)
	w.RegisterWorkflow(ResumeOnce)
	w.RegisterActivity(e.acts)
	require.NoError(t, w.Start())
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			w.Stop()
		}
	})
	return w, plugin
}

func (e *env) run(t *testing.T, ctx context.Context, wf any, arg any) (client.WorkflowRun, error) {
	t.Helper()
	return e.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: e.queue, ID: "wf-" + testdb.NewSchemaName()}, wf, arg)
}

func requireHealthy(t testing.TB, q *store.Queue) {
	t.Helper()
	problems, err := q.Verify(context.Background())
	require.NoError(t, err)
	require.Empty(t, problems)
}

// requireSettled waits until no ticket of q is queued, admitted or running: Temporal hears a run's
// outcome before its completion commits (the runner delivers first), so a workflow that has returned
// may still have completions under way, releasing their limits.
func requireSettled(t testing.TB, ctx context.Context, q *store.Queue) {
	t.Helper()
	require.Eventually(t, func() bool {
		s, err := q.Status(ctx)
		if err != nil {
			return false
		}
		for _, k := range s {
			if k.Queued+k.Admitted+k.Running > 0 {
				return false
			}
		}
		return true
	}, time.Minute, 10*time.Millisecond, "every ticket completed")
}

func TestPlugin_FanOutAcrossWorkers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{hold: 20 * time.Millisecond})
	for range 3 {
		e.startWorker(t, e.options(throttle.Limit{Key: "svc", MaxConcurrent: 5}))
	}
	run, err := e.run(t, ctx, FanOut, fanOutInput{N: 200})
	require.NoError(t, err)
	var sum int
	require.NoError(t, run.Get(ctx, &sum))
	require.Equal(t, 2*(199*200/2), sum, "every activity completed with the right result")
	var twice []string // a run whose ticket was handed back while it ran (its owner's lease lapsed) runs again
	e.acts.calls.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); n > 1 {
			twice = append(twice, fmt.Sprintf("%v ran %d times", k, n))
		}
		return true
	})
	require.LessOrEqual(t, e.acts.peak.Load(), int64(5), "the activities' own observation of concurrency; activities run more than once: %v", twice)
	require.GreaterOrEqual(t, e.acts.peak.Load(), int64(2), "the limit was actually exercised")
	requireHealthy(t, e.q)
	t.Logf("peak concurrency observed by the activities: %d", e.acts.peak.Load())
}

func TestPlugin_QueuedLongerThanHeartbeatTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// One at a time, and the first run holds its slot (heartbeating, as an activity with a
	// HeartbeatTimeout must) until the tickets behind it have been in line for more than two
	// HeartbeatTimeouts. With MaximumAttempts 1, any heartbeat timeout fails the workflow.
	const hbTimeout = 5 * time.Second
	e := newEnv(t, &acts{gate: make(chan struct{})})
	e.startWorker(t, e.options(throttle.Limit{Key: "svc", MaxConcurrent: 1}))
	run, err := e.run(t, ctx, FanOut, fanOutInput{N: 6, HeartbeatTimeout: hbTimeout, MaxAttempts: 1})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var queued int
		var waited float64 // seconds
		err := e.pool.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM max(clock_timestamp() - enqueued_at)), 0)
			FROM `+e.schema+`.sluice_ticket WHERE state = 'queued'`).Scan(&queued, &waited)
		return err == nil && queued == 5 && waited > (2*hbTimeout+time.Second).Seconds()
	}, 3*time.Minute, 100*time.Millisecond, "five tickets in line, the oldest for over two HeartbeatTimeouts")
	close(e.acts.gate)
	var sum int
	require.NoError(t, run.Get(ctx, &sum), "no attempt timed out on heartbeat while queued")
	require.Equal(t, 30, sum)
	require.Greater(t, time.Duration(e.acts.maxWaited.Load()), 2*hbTimeout, "a run waited in line for over two HeartbeatTimeouts")
	requireHealthy(t, e.q)
}

func TestPlugin_RetryPolicyAppliesAsUsual(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{failUntil: 3})
	e.startWorker(t, e.options(throttle.Limit{Key: "svc", MaxConcurrent: 2}))
	run, err := e.run(t, ctx, FanOut, fanOutInput{N: 3, MaxAttempts: 5})
	require.NoError(t, err)
	var sum int
	require.NoError(t, run.Get(ctx, &sum))
	require.Equal(t, 6, sum)
	e.acts.calls.Range(func(k, v any) bool {
		require.Equal(t, int64(3), v.(*atomic.Int64).Load(), "activity %v: two failures, then success", k)
		return true
	})

	// And a failure past MaximumAttempts reaches the workflow as the activity's own error.
	run, err = e.run(t, ctx, FanOut, fanOutInput{N: 1, MaxAttempts: 2})
	require.NoError(t, err)
	err = run.Get(ctx, nil)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, "Flaky", appErr.Type())
	requireHealthy(t, e.q)
}

func TestPlugin_CancelReachesQueuedAndRunning(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{})
	e.startWorker(t, e.options(throttle.Limit{Key: "svc", MaxConcurrent: 2}))
	run, err := e.run(t, ctx, BlockAll, 6)
	require.NoError(t, err)
	// Two running, four queued.
	require.Eventually(t, func() bool {
		s, err := e.q.Status(ctx)
		return err == nil && len(s) == 1 && s[0].Admitted+s[0].Running == 2 && s[0].Queued == 4
	}, 30*time.Second, 50*time.Millisecond)
	start := time.Now()
	require.NoError(t, e.c.CancelWorkflow(ctx, run.GetID(), run.GetRunID()))
	err = run.Get(ctx, nil)
	elapsed := time.Since(start)
	var canceled *temporal.CanceledError
	require.ErrorAs(t, err, &canceled, "the workflow ends cancelled once all six activities report cancellation")
	requireSettled(t, ctx, e.q) // no ticket is left behind
	requireHealthy(t, e.q)
	t.Logf("cancellation of 2 running and 4 queued activities took %s (HeartbeatInterval 500ms)", elapsed)
}

func TestPlugin_UnroutedAndLocalActivitiesPassThrough(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{})
	opts := e.options(throttle.Limit{Key: "svc", MaxConcurrent: 1})
	opts.Routes = map[string]sluiceinterceptor.Route{"Other": {Limits: []string{"svc"}}}
	e.startWorker(t, opts)
	run, err := e.run(t, ctx, FanOut, fanOutInput{N: 5})
	require.NoError(t, err)
	var sum int
	require.NoError(t, run.Get(ctx, &sum))
	require.Equal(t, 20, sum)
	var n int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.schema+`.sluice_ticket`).Scan(&n))
	require.Zero(t, n, "unrouted activities write no ticket")
}

func TestNewPlugin_RejectsBadOptions(t *testing.T) {
	t.Parallel()
	s := temporaltest.Require(t, server)
	c := s.Client(t)
	pool := testdb.Pool(t)
	good := sluiceinterceptor.Options{Pool: pool, Client: c, Routes: map[string]sluiceinterceptor.Route{"A": {Limits: []string{"k"}}}}
	for _, tc := range []struct {
		name string
		mod  func(*sluiceinterceptor.Options)
		want string
	}{
		{"NoPool", func(o *sluiceinterceptor.Options) { o.Pool = nil }, "Options.Pool must not be nil"},
		{"NoClient", func(o *sluiceinterceptor.Options) { o.Client = nil }, "Options.Client must not be nil"},
		{"EmptyRouteName", func(o *sluiceinterceptor.Options) {
			o.Routes = map[string]sluiceinterceptor.Route{"": {Limits: []string{"k"}}}
		}, "Options.Routes has an empty activity type name"},
		{"HostileSchema", func(o *sluiceinterceptor.Options) { o.Schema = `a"; DROP TABLE x; --` }, "Schema must match"},
		{"BadLimit", func(o *sluiceinterceptor.Options) { o.Limits = []throttle.Limit{{Key: "k", RequestsPerSecond: -1}} }, "Options.Limits[0]"},
		{"RouteWithoutLimits", func(o *sluiceinterceptor.Options) { o.Routes = map[string]sluiceinterceptor.Route{"A": {}} }, `Routes["A"].Limits must name`},
		{"RouteNamesLimitTwice", func(o *sluiceinterceptor.Options) {
			o.Routes = map[string]sluiceinterceptor.Route{"A": {Limits: []string{"k", "k"}}}
		}, `names "k" twice`},
		{"NegativeMaxHeld", func(o *sluiceinterceptor.Options) { o.MaxHeld = -1 }, "MaxHeld must be >= 1, got -1"},
		{"TinyPollInterval", func(o *sluiceinterceptor.Options) { o.PollInterval = time.Millisecond }, "PollInterval must be >= 10ms, got 1ms"},
		{"ShortLease", func(o *sluiceinterceptor.Options) { o.LeaseTTL = time.Millisecond }, "LeaseTTL must be >= 1s, got 1ms"},
		{"ModelWithoutPrices", func(o *sluiceinterceptor.Options) {
			o.Routes = map[string]sluiceinterceptor.Route{"A": {Limits: []string{"k"}, Model: "gpt-4o"}}
		}, `Options.Routes["A"].Model is "gpt-4o" but Options.Prices is nil`},
		{"ModelNotPriced", func(o *sluiceinterceptor.Options) {
			o.Prices = &throttle.PriceTable{Currency: "USD", Models: map[string]throttle.Price{"m": {Input: 1}}}
			o.Routes = map[string]sluiceinterceptor.Route{"A": {Limits: []string{"k"}, Model: "gpt-4o"}}
		}, `Options.Routes["A"].Model: throttle: price table: unknown model "gpt-4o": the table prices ["m"]`},
		{"BadPrices", func(o *sluiceinterceptor.Options) { o.Prices = &throttle.PriceTable{Currency: "dollars"} }, "Options.Prices: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.mod(&o)
			_, err := sluiceinterceptor.NewPlugin(o)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := sluiceinterceptor.NewPlugin(good)
	require.NoError(t, err)
}

func TestPlugin_BadCostFailsTheAttemptClearly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{})
	opts := e.options(throttle.Limit{Key: "svc", MaxConcurrent: 1})
	opts.Routes = map[string]sluiceinterceptor.Route{"Double": {Limits: []string{"svc"}, Cost: func([]any) (int64, error) { return -5, nil }}}
	e.startWorker(t, opts)
	run, err := e.run(t, ctx, FanOut, fanOutInput{N: 1})
	require.NoError(t, err)
	err = run.Get(ctx, nil)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, "SluiceBadCost", appErr.Type())
	require.ErrorContains(t, err, `Routes["Double"].Cost must return a value in [0, 1099511627776], got -5`)
}

func TestPlugin_MaxHeldPushesBackIntoTemporal(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{hold: 100 * time.Millisecond})
	opts := e.options(throttle.Limit{Key: "svc", MaxConcurrent: 1})
	opts.MaxHeld = 2
	e.startWorker(t, opts)
	run, err := e.run(t, ctx, FanOut, fanOutInput{N: 12})
	require.NoError(t, err)
	result := make(chan error, 1)
	go func() { result <- run.Get(ctx, nil) }()
	peak := 0
	for {
		var n int
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.schema+`.sluice_ticket WHERE state IN ('queued', 'admitted', 'running')`).Scan(&n))
		peak = max(peak, n)
		select {
		case err := <-result:
			require.NoError(t, err)
			require.LessOrEqual(t, peak, 2, "no more tickets than MaxHeld invocations exist at once")
			require.Equal(t, 2, peak, "the bound was reached")
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Resume records progress in its heartbeat details and fails; the retry resumes from them.
func (a *acts) Resume(ctx context.Context) (int, error) {
	if activity.HasHeartbeatDetails(ctx) {
		var progress int
		if err := activity.GetHeartbeatDetails(ctx, &progress); err != nil {
			return 0, err
		}
		return progress, nil
	}
	activity.RecordHeartbeat(ctx, 42)
	return 0, temporal.NewApplicationError("fail after recording progress", "Flaky")
}

func ResumeOnce(ctx workflow.Context) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute, HeartbeatTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: 3},
	})
	var v int
	err := workflow.ExecuteActivity(ctx, "Resume").Get(ctx, &v)
	return v, err
}

func TestPlugin_HeartbeatDetailsReachTheRetry(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{})
	opts := e.options(throttle.Limit{Key: "svc", MaxConcurrent: 1})
	opts.Routes["Resume"] = sluiceinterceptor.Route{Limits: []string{"svc"}}
	e.startWorker(t, opts)
	run, err := e.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: e.queue}, ResumeOnce)
	require.NoError(t, err)
	var v int
	require.NoError(t, run.Get(ctx, &v))
	require.Equal(t, 42, v, "the details the activity recorded through activity.RecordHeartbeat")
}
