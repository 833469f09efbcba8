package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// saasShape is the common SaaS shape: a fleet of worker processes calls one API (the line "api",
// a cap on concurrency) on behalf of many tenants, each capped at one call at a time by a limit
// derived from the activity's argument (Route.KeyLimits).
type saasShape struct {
	instances   int // plugin instances (worker processes), each with its own pool of 2 connections
	tenants     int
	activities  int // spread evenly over the tenants, a tenant's consecutive (see runSaaS)
	perWorkflow int // activities a workflow schedules
	apiMax      int // the line's MaxConcurrent
}

// saasMailer stands for an API called for many tenants (as tenant_test.go's mailer does): it records
// what the calls see, in flight per tenant and in all, and how often each activity ran.
type saasMailer struct {
	hold time.Duration // the API call

	mu         sync.Mutex
	inFlight   map[string]int // tenant -> calls in flight
	api        int            // calls in flight
	peakTenant int            // the most calls one tenant had in flight at once
	peakAPI    int
	runs       map[string]int // workflow ID/activity ID -> runs
	twice      []string       // activities that ran more than once
	retried    int            // runs of an attempt > 1
	waited     time.Duration  // the sum of the runs' waits in line (sluiceactivity.Admission)
	maxWaited  time.Duration
}

func newSaaSMailer(hold time.Duration) *saasMailer {
	return &saasMailer{hold: hold, inFlight: map[string]int{}, runs: map[string]int{}}
}

// Send is the activity: one call to the API for tenant.
func (m *saasMailer) Send(ctx context.Context, tenant string) error {
	adm, ok := sluiceactivity.Admission(ctx)
	if !ok {
		return errors.New("saas mailer: not run by Sluice")
	}
	info := activity.GetInfo(ctx)
	key := info.WorkflowExecution.ID + "/" + info.ActivityID
	m.mu.Lock()
	m.runs[key]++
	if m.runs[key] == 2 {
		m.twice = append(m.twice, fmt.Sprintf("%s (tenant %s, attempt %d)", key, tenant, info.Attempt))
	}
	if info.Attempt > 1 {
		m.retried++
	}
	m.inFlight[tenant]++
	m.api++
	m.peakTenant = max(m.peakTenant, m.inFlight[tenant])
	m.peakAPI = max(m.peakAPI, m.api)
	m.waited += adm.Waited
	m.maxWaited = max(m.maxWaited, adm.Waited)
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.inFlight[tenant]--
		m.api--
		m.mu.Unlock()
	}()
	select { // the API call
	case <-time.After(m.hold):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SaaSSendAll sends one mail for each of tenants, from coroutines of at most 20 activities each
// (see sumActivities: one long loop can exceed the deadlock detection timeout under load).
func SaaSSendAll(ctx workflow.Context, tenants []string) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		// The wait in line counts against StartToClose: it covers the whole run, so that no attempt
		// times out while queued. A retry would show as a second run, which the run fails on.
		StartToCloseTimeout: 30 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	const chunk = 20
	errs := workflow.NewChannel(ctx)
	parts := 0
	for lo := 0; lo < len(tenants); lo += chunk {
		part := tenants[lo:min(lo+chunk, len(tenants))]
		parts++
		workflow.Go(ctx, func(ctx workflow.Context) {
			fs := make([]workflow.Future, len(part))
			for i, t := range part {
				fs[i] = workflow.ExecuteActivity(ctx, "SaaSSend", t)
			}
			var err error
			for _, f := range fs {
				err = errors.Join(err, f.Get(ctx, nil))
			}
			errs.Send(ctx, err)
		})
	}
	var all error
	for range parts {
		var err error
		errs.Receive(ctx, &err)
		all = errors.Join(all, err)
	}
	return all
}

// logTally is a slog.Handler that passes records on to next and keeps Sluice's warnings and errors,
// marking those that say a claim or a take failed (or any error) as failures.
type logTally struct {
	next slog.Handler
	s    *tallyState
}

type tallyState struct {
	mu       sync.Mutex
	warnings []string // every warning and error, as a line
	failures []string // those a run must not have
}

func (h logTally) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h logTally) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		line := b.String()
		failed := r.Level >= slog.LevelError || strings.HasPrefix(r.Message, "sluice: claim") || strings.Contains(r.Message, "take")
		h.s.mu.Lock()
		h.s.warnings = append(h.s.warnings, line)
		if failed {
			h.s.failures = append(h.s.failures, line)
		}
		h.s.mu.Unlock()
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h logTally) WithAttrs(as []slog.Attr) slog.Handler {
	return logTally{next: h.next.WithAttrs(as), s: h.s}
}

func (h logTally) WithGroup(name string) slog.Handler {
	return logTally{next: h.next.WithGroup(name), s: h.s}
}

// startSaaSFleet starts shape.instances workers on e's task queue, each with its own Temporal client
// and its own pool of 2 connections, as separate worker processes would have, all logging to log.
func startSaaSFleet(tb testing.TB, e *env, shape saasShape, m *saasMailer, log *slog.Logger) {
	tb.Helper()
	route := sluiceinterceptor.Route{
		Limits: []string{"api"},
		KeyLimits: func(_ sluiceinterceptor.ActivityInfo, args []any) []throttle.Limit {
			return []throttle.Limit{{Key: "tenant:" + args[0].(string), MaxConcurrent: 1}}
		},
	}
	for range shape.instances {
		cfg := testdb.PoolConfig(tb)
		cfg.MaxConns = 2
		c := server.Client(tb)
		plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
			Pool: testdb.PoolWith(tb, cfg), Client: c, Schema: e.schema,
			Limits: []throttle.Limit{{Key: "api", MaxConcurrent: shape.apiMax}},
			Routes: map[string]sluiceinterceptor.Route{"SaaSSend": route},
			Logger: log,
		})
		require.NoError(tb, err)
		w := worker.New(c, e.queue, worker.Options{DeadlockDetectionTimeout: temporaltest.DeadlockTimeout, Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 5 * time.Second})
		w.RegisterWorkflow(SaaSSendAll)
		w.RegisterActivityWithOptions(m.Send, activity.RegisterOptions{Name: "SaaSSend"})
		require.NoError(tb, w.Start())
		tb.Cleanup(w.Stop)
	}
}

// runSaaS starts the workflows that schedule shape's activities, waits for them all, and returns
// the wall time from the first start to the last result.
func runSaaS(tb testing.TB, ctx context.Context, e *env, shape saasShape) time.Duration {
	tb.Helper()
	start := time.Now()
	var runs []client.WorkflowRun
	for lo := 0; lo < shape.activities; lo += shape.perWorkflow {
		tenants := make([]string, 0, shape.perWorkflow)
		for i := lo; i < min(lo+shape.perWorkflow, shape.activities); i++ {
			// A tenant's activities are consecutive, so scheduled together by one coroutine: they
			// arrive in line at once and its cap binds. Spread over workflows, they arrive apart
			// and rarely overlap: a cap of 2 was then never reached either.
			tenants = append(tenants, fmt.Sprint(i*shape.tenants/shape.activities))
		}
		run, err := e.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: e.queue, ID: "saas-" + testdb.NewSchemaName()}, SaaSSendAll, tenants)
		require.NoError(tb, err)
		runs = append(runs, run)
	}
	for _, run := range runs {
		require.NoError(tb, run.Get(ctx, nil), "workflow %s", run.GetID())
	}
	return time.Since(start)
}

// saasOutcome is what a run of the SaaS shape saw.
type saasOutcome struct {
	ran, twice, retried, peakTenant, peakAPI int
	meanWaited, maxWaited                    time.Duration
	warnings, failures                       []string
}

// checkSaaS collects what the mailer and the logs saw and fails tb on any broken invariant: a cap
// exceeded, an activity that did not run or ran twice, a failed claim or take, an unhealthy queue,
// or a ticket left queued, admitted or running.
func checkSaaS(tb testing.TB, ctx context.Context, e *env, shape saasShape, m *saasMailer, logs *tallyState) saasOutcome {
	tb.Helper()
	m.mu.Lock()
	o := saasOutcome{ran: len(m.runs), twice: len(m.twice), retried: m.retried, peakTenant: m.peakTenant, peakAPI: m.peakAPI}
	twice := m.twice
	o.meanWaited, o.maxWaited = m.waited/time.Duration(max(1, o.ran)), m.maxWaited
	m.mu.Unlock()
	logs.mu.Lock()
	o.warnings, o.failures = logs.warnings, logs.failures
	logs.mu.Unlock()
	for _, l := range o.warnings {
		tb.Logf("sluice logged: %s", l)
	}
	require.Empty(tb, o.failures, "claims and takes must not fail")
	require.Empty(tb, twice, "no activity runs twice")
	require.LessOrEqual(tb, o.peakTenant, 1, "tenant cap: MaxConcurrent 1")
	require.LessOrEqual(tb, o.peakAPI, shape.apiMax, "the line api's MaxConcurrent")
	require.Equal(tb, shape.activities, o.ran, "every activity ran")
	requireHealthy(tb, e.q)
	requireSettled(tb, ctx, e.q) // the last completions commit after their workflows heard them
	var left int
	require.NoError(tb, e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.schema+`.sluice_ticket WHERE state IN ('queued', 'admitted', 'running')`).Scan(&left))
	require.Zero(tb, left, "no ticket is left queued, admitted or running")
	st, err := e.q.LimitStatus(ctx, fmt.Sprintf("tenant:%d", shape.tenants-1))
	require.NoError(tb, err)
	require.Equal(tb, 1, st.Configured.MaxConcurrent, "the tenant's limit was derived and created")
	return o
}

// TestPlugin_SaaSTenantsCapsHold runs a small SaaS shape (8 instances, 300 tenants capped at 1, 600
// activities on a line of 40) and checks its invariants, not its pace.
func TestPlugin_SaaSTenantsCapsHold(t *testing.T) {
	t.Parallel()
	// A fleet of pools: one such test at a time on the shared database.
	testdb.Heavy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	shape := saasShape{instances: 8, tenants: 300, activities: 600, perWorkflow: 100, apiMax: 40}
	e := newEnv(t, &acts{})
	m := newSaaSMailer(20 * time.Millisecond)
	logs := &tallyState{}
	startSaaSFleet(t, e, shape, m, slog.New(logTally{next: e.log.Handler(), s: logs}))
	runSaaS(t, ctx, e, shape)
	o := checkSaaS(t, ctx, e, shape, m, logs)
	require.GreaterOrEqual(t, o.peakAPI, 2, "the fleet ran calls side by side")
	t.Logf("peaks: tenant %d, api %d; in line: mean %s, max %s; retried %d; %d warnings",
		o.peakTenant, o.peakAPI, o.meanWaited, o.maxWaited, o.retried, len(o.warnings))
}

// BenchmarkPlugin_SaaSTenants measures the SaaS shape through Temporal: 8 plugin instances (each
// with its own pool of 2 connections), one line api of MaxConcurrent 40, and a cap of 1 per tenant
// derived from the activity's argument, at 1,000 tenants with 3,000 activities and at 10,000
// tenants with one activity each; each call takes 20 ms. An iteration is a whole run; run it with
// -benchtime 1x. Besides the pace it reports the peaks the calls observed, and fails on a cap
// exceeded, an activity run twice, or a failed claim or take.
func BenchmarkPlugin_SaaSTenants(b *testing.B) {
	for _, shape := range []saasShape{
		{instances: 8, tenants: 1_000, activities: 3_000, perWorkflow: 500, apiMax: 40},
		{instances: 8, tenants: 10_000, activities: 10_000, perWorkflow: 500, apiMax: 40},
	} {
		b.Run(fmt.Sprintf("tenants=%d/activities=%d", shape.tenants, shape.activities), func(b *testing.B) {
			benchSaaS(b, shape)
		})
	}
}

// benchSaaS is one case of BenchmarkPlugin_SaaSTenants: a fresh schema, task queue and fleet.
func benchSaaS(b *testing.B, shape saasShape) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e := newEnv(b, &acts{})
	m := newSaaSMailer(20 * time.Millisecond)
	logs := &tallyState{}
	startSaaSFleet(b, e, shape, m, slog.New(logTally{next: e.log.Handler(), s: logs}))
	b.Logf("load average before: %s", loadAvg())
	var wall time.Duration
	runs := 0
	for b.Loop() {
		wall += runSaaS(b, ctx, e, shape)
		runs++
	}
	b.Logf("load average after: %s", loadAvg())
	shape.activities *= runs // checkSaaS counts the runs of every iteration
	o := checkSaaS(b, ctx, e, shape, m, logs)
	b.Logf("%d activities over %d tenants in %.1fs: %.0f/s; peaks: tenant %d, api %d; in line: mean %s, max %s; retried %d; %d warnings",
		shape.activities, shape.tenants, wall.Seconds(), float64(shape.activities)/wall.Seconds(),
		o.peakTenant, o.peakAPI, o.meanWaited, o.maxWaited, o.retried, len(o.warnings))
	b.ReportMetric(float64(shape.activities)/wall.Seconds(), "activities/s")
	b.ReportMetric(wall.Seconds()/float64(runs), "wall_s")
	b.ReportMetric(float64(o.peakTenant), "peak_tenant")
	b.ReportMetric(float64(o.peakAPI), "peak_api")
	b.ReportMetric(float64(o.twice), "ran_twice")
	b.ReportMetric(float64(o.retried), "retried")
	b.ReportMetric(float64(o.meanWaited.Milliseconds()), "mean_wait_ms")
	b.ReportMetric(float64(o.maxWaited.Milliseconds()), "max_wait_ms")
	b.ReportMetric(float64(len(o.warnings)), "warnings")
}

// loadAvg returns the first three fields of /proc/loadavg, or "unknown" where there is none.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
