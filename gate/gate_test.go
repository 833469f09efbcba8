package gate_test

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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/gate"
	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
	"github.com/sluicehq/sluice/throttle"
)

var server *temporaltest.Server

func TestMain(m *testing.M) {
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

// provider counts the calls in flight from gate workflows and from plugin-routed activities alike:
// the calls a shared limit governs, whichever way they were admitted.
type provider struct {
	inFlight, peak, calls atomic.Int64
	release               chan struct{} // when set, each call waits for it (closed) before returning

	mu       sync.Mutex
	arrivals []time.Time // when each call came, for the busiest second (figures, not assertions)
}

func (p *provider) enter() func() {
	p.mu.Lock()
	p.arrivals = append(p.arrivals, time.Now())
	p.mu.Unlock()
	p.calls.Add(1)
	n := p.inFlight.Add(1)
	for {
		m := p.peak.Load()
		if n <= m || p.peak.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { p.inFlight.Add(-1) }
}

// peakSecond is the most calls that came in any window of a second.
func (p *provider) peakSecond() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	peak, lo := 0, 0
	for hi := range p.arrivals {
		for p.arrivals[hi].Sub(p.arrivals[lo]) >= time.Second {
			lo++
		}
		peak = max(peak, hi-lo+1)
	}
	return peak
}

func (p *provider) wait(ctx context.Context) error {
	if p.release == nil {
		return nil
	}
	select {
	case <-p.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Provider is the call a gate workflow makes once it holds a permit (not routed: the permit is its
// admission).
func (p *provider) Provider(ctx context.Context) (int64, error) {
	defer p.enter()()
	return 42, p.wait(ctx)
}

// Routed is the call a Go activity makes through the plugin, on the same limit.
func (p *provider) Routed(ctx context.Context) (int64, error) {
	defer p.enter()()
	return 7, p.wait(ctx)
}

// callInput is what GateCall does: acquire, maybe hang or call the provider, then release.
type callInput struct {
	GateQueue string
	Acquire   gate.AcquireRequest
	// Hang waits for the signal "go" after acquiring (a workflow that holds its permit).
	Hang bool
	// Call calls the provider between acquire and release.
	Call bool
	// Release, when set, is the release to send (its Permit is filled in).
	Release *gate.ReleaseRequest
}

type callOutput struct {
	Permit  gate.Permit
	Result  gate.ReleaseResult
	Called  int64
	Release bool
}

// GateCall is a Go workflow using the gate through its contract alone, as a workflow in another SDK
// does: the activities by name, JSON payloads.
func GateCall(ctx workflow.Context, in callInput) (callOutput, error) {
	var out callOutput
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: in.GateQueue,
		StartToCloseTimeout: 2 * time.Minute, HeartbeatTimeout: 20 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	if err := workflow.ExecuteActivity(actx, gate.AcquireActivity, in.Acquire).Get(ctx, &out.Permit); err != nil {
		return out, err
	}
	if in.Hang {
		workflow.GetSignalChannel(ctx, "go").Receive(ctx, nil)
	}
	if in.Call {
		pctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 2 * time.Minute})
		if err := workflow.ExecuteActivity(pctx, "Provider").Get(ctx, &out.Called); err != nil {
			return out, err
		}
	}
	if in.Release == nil {
		return out, nil
	}
	rel := *in.Release
	rel.Permit = out.Permit
	rctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: out.Permit.ReleaseTaskQueue,
		ScheduleToStartTimeout: time.Minute, StartToCloseTimeout: time.Minute})
	out.Release = true
	return out, workflow.ExecuteActivity(rctx, gate.ReleaseActivity, rel).Get(ctx, &out.Result)
}

// releaseInput is a Release to send on Queue.
type releaseInput struct {
	Queue string
	Req   gate.ReleaseRequest
}

// ReleaseOnly sends one Release, as a workflow that got its permit earlier does.
func ReleaseOnly(ctx workflow.Context, in releaseInput) (gate.ReleaseResult, error) {
	var res gate.ReleaseResult
	rctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: in.Queue,
		ScheduleToStartTimeout: time.Minute, StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	err := workflow.ExecuteActivity(rctx, gate.ReleaseActivity, in.Req).Get(ctx, &res)
	return res, err
}

// RoutedCalls is a Go workflow whose activities the plugin throttles on the same limit.
func RoutedCalls(ctx workflow.Context, n int) (int64, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 2 * time.Minute})
	fs := make([]workflow.Future, n)
	for i := range fs {
		fs[i] = workflow.ExecuteActivity(actx, "Routed")
	}
	var sum int64
	for _, f := range fs {
		var v int64
		if err := f.Get(ctx, &v); err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// env is a gate on its task queue (one process: its own plugin) and an application worker (another
// plugin, another owner) running the workflows, the provider and routed activities.
type env struct {
	c         client.Client
	pool      *pgxpool.Pool
	schema    string
	gateQueue string
	appQueue  string
	q         *store.Queue
	prov      *provider
	log       *slog.Logger
	gate      *gate.Gate
	prices    *throttle.PriceTable // the gate's plugin's; nil for none
}

func newEnv(t testing.TB, limits ...throttle.Limit) *env {
	t.Helper()
	s := temporaltest.Require(t, server)
	pool := testdb.Pool(t)
	name := testdb.NewSchemaName()
	e := &env{c: s.Client(t), pool: pool, schema: testdb.Schema(t, pool), gateQueue: "gate-" + name, appQueue: "app-" + name,
		prov: &provider{}, log: testenv.Logger(t)}
	q, err := store.New(pool, store.Options{Schema: e.schema})
	require.NoError(t, err)
	e.q = q
	require.NoError(t, q.UpsertLimits(context.Background(), limits...))
	return e
}

func (e *env) pluginOptions() sluiceinterceptor.Options {
	return sluiceinterceptor.Options{Pool: e.pool, Client: e.c, Schema: e.schema, Logger: e.log,
		PollInterval: 200 * time.Millisecond, HeartbeatInterval: 500 * time.Millisecond}
}

// startGate starts the gate's worker and the gate, stopped (gate first) at the end of the test.
func (e *env) startGate(t testing.TB, opts gate.Options) *gate.Gate {
	t.Helper()
	po := e.pluginOptions()
	po.Prices = e.prices
	return e.startGateWith(t, po, opts)
}

// startGateWith is startGate with the plugin's options given.
func (e *env) startGateWith(t testing.TB, po sluiceinterceptor.Options, opts gate.Options) *gate.Gate {
	t.Helper()
	plugin, err := sluiceinterceptor.NewPlugin(po)
	require.NoError(t, err)
	opts.TaskQueue = e.gateQueue
	g, err := gate.New(plugin, opts)
	require.NoError(t, err)
	w := worker.New(e.c, e.gateQueue, worker.Options{Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 5 * time.Second})
	g.Register(w)
	require.NoError(t, w.Start())
	require.NoError(t, g.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		g.Stop(ctx)
		w.Stop()
	})
	e.gate = g
	return g
}

// startApp starts the application worker: the workflows, the provider, and Routed throttled by the
// plugin on key.
func (e *env) startApp(t testing.TB, key string) {
	t.Helper()
	e.startAppCosting(t, key, 0)
}

// startAppCosting is startApp with Routed reserving tokens each (and reporting no usage, so the
// reservation is what it spends).
func (e *env) startAppCosting(t testing.TB, key string, tokens int64) {
	t.Helper()
	opts := e.pluginOptions()
	opts.Routes = map[string]sluiceinterceptor.Route{"Routed": {Limits: []string{key},
		Cost: func([]any) (int64, error) { return tokens, nil }}}
	plugin, err := sluiceinterceptor.NewPlugin(opts)
	require.NoError(t, err)
	w := worker.New(e.c, e.appQueue, worker.Options{DeadlockDetectionTimeout: temporaltest.DeadlockTimeout, Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 5 * time.Second})
	w.RegisterWorkflow(GateCall)
	w.RegisterWorkflow(RoutedCalls)
	w.RegisterWorkflow(ReleaseOnly)
	w.RegisterActivity(e.prov)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
}

func (e *env) start(t testing.TB, wf any, arg any) client.WorkflowRun {
	t.Helper()
	run, err := e.c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{TaskQueue: e.appQueue,
		ID: "wf-" + testdb.NewSchemaName(), WorkflowExecutionTimeout: 5 * time.Minute}, wf, arg)
	require.NoError(t, err)
	return run
}

// waitEnded waits until ticket id no longer holds a slot: finished, returned, or delivered and gone.
func (e *env) waitEnded(t testing.TB, id int64) {
	t.Helper()
	var tk store.Ticket
	require.Eventually(t, func() bool {
		var err error
		tk, err = e.q.Ticket(context.Background(), id)
		return errors.Is(err, store.ErrNotFound) || err == nil && (tk.State == store.TicketStateFinished || tk.State == store.TicketStateReturned)
	}, 2*time.Minute, 20*time.Millisecond, "ticket %d still holds its slot (last %+v)", id, tk)
}

// status reads key's status, pending releases folded in.
func (e *env) status(t testing.TB, key string) store.KeyStatus {
	t.Helper()
	st, err := e.q.Status(context.Background(), key)
	require.NoError(t, err)
	require.Len(t, st, 1)
	return st[0]
}

// tokensCharged waits until the tokens key's usage rows count, all of them (not the last minute's:
// a figure that only a sliding window brings back would pass), are want.
func (e *env) tokensCharged(t testing.TB, key string, want int64) {
	t.Helper()
	var last string
	ok := assert.Eventually(t, func() bool {
		var got int64
		err := e.pool.QueryRow(context.Background(), `SELECT coalesce(sum(tokens), 0)::bigint FROM `+e.schema+`.sluice_usage WHERE key = $1`, key).Scan(&got)
		last = fmt.Sprint(got, err)
		return err == nil && got == want
	}, 2*time.Minute, 50*time.Millisecond, "tokens charged to %s: want %d", key, want)
	require.True(t, ok, "tokens charged to %s: want %d, last read %s", key, want, last)
}

// heldTicket waits for the gate ticket of the workflow run to be running (its permit held) and
// returns it.
func (e *env) heldTicket(t testing.TB, run client.WorkflowRun) store.Ticket {
	t.Helper()
	var found store.Ticket
	require.Eventually(t, func() bool {
		var n int64
		err := e.pool.QueryRow(context.Background(), fmt.Sprintf(
			`SELECT id FROM %s.sluice_ticket WHERE workflow_id = $1 AND state = 'running'`, e.schema), run.GetID()).Scan(&n)
		if err != nil {
			return false
		}
		found, err = e.q.Ticket(context.Background(), n)
		return err == nil
	}, 2*time.Minute, 20*time.Millisecond, "the permit of %s was never held", run.GetID())
	return found
}

func int64p(v int64) *int64 { return &v }
