package interceptor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uber-go/tally/v4"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	temporaltally "go.temporal.io/sdk/contrib/tally"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/throttle"
)

func spansNamed(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) any {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.AsInterface()
		}
	}
	return nil
}

// TestPlugin_Tracing runs two throttled activities behind Temporal's own OpenTelemetry interceptor,
// on two workers (two owners), so that some tickets are admitted by the replica that does not hold
// them: every wait and run span must still be a child of its activity's RunActivity span, in the
// workflow's trace.
func TestPlugin_Tracing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracing, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tp.Tracer("temporal")})
	require.NoError(t, err)

	e := newEnv(t, &acts{hold: 300 * time.Millisecond})
	c, err := client.NewClientFromExisting(e.c, client.Options{Interceptors: []interceptor.ClientInterceptor{tracing}, Logger: temporaltest.TestLogger(t)})
	require.NoError(t, err)
	defer c.Close()
	for range 2 {
		opts := e.options(throttle.Limit{Key: "svc", MaxConcurrent: 1})
		opts.TracerProvider = tp
		plugin, err := sluiceinterceptor.NewPlugin(opts)
		require.NoError(t, err)
		// Temporal's interceptor comes with the client, before the worker's own interceptors; Sluice,
		// appended to those by the plugin, thus runs inside its RunActivity span.
		w := worker.New(c, e.queue, worker.Options{DeadlockDetectionTimeout: temporaltest.DeadlockTimeout, Plugins: []worker.Plugin{plugin}})
		w.RegisterWorkflow(FanOut)
		w.RegisterActivity(e.acts)
		require.NoError(t, w.Start())
		defer w.Stop()
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: e.queue}, FanOut, fanOutInput{N: 4})
	require.NoError(t, err)
	require.NoError(t, run.Get(ctx, nil))

	require.Eventually(t, func() bool { return len(spansNamed(rec.Ended(), sluiceinterceptor.SpanRun)) == 4 }, time.Minute, 20*time.Millisecond)
	spans := rec.Ended()
	activitySpans := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spansNamed(spans, "RunActivity:Double") {
		activitySpans[s.SpanContext().SpanID()] = s
	}
	require.Len(t, activitySpans, 4)
	waits := spansNamed(spans, sluiceinterceptor.SpanWait)
	require.Len(t, waits, 4)
	var waited time.Duration
	for _, s := range append(waits, spansNamed(spans, sluiceinterceptor.SpanRun)...) {
		parent, ok := activitySpans[s.Parent().SpanID()]
		require.True(t, ok, "%s is a child of its activity's span", s.Name())
		require.Equal(t, parent.SpanContext().TraceID(), s.SpanContext().TraceID(), "in the workflow's trace")
		require.Equal(t, "svc", attr(s, "sluice.limit_keys"))
		require.Equal(t, int64(10), attr(s, "sluice.reserved_cost"))
		require.Equal(t, int64(1), attr(s, "sluice.attempt"))
		require.False(t, s.EndTime().Before(s.StartTime()))
		if s.Name() == sluiceinterceptor.SpanWait {
			waited = max(waited, s.EndTime().Sub(s.StartTime()))
			require.Contains(t, []any{"queue", "concurrency"}, attr(s, "sluice.wait_reason"))
			require.NotNil(t, attr(s, "sluice.queue_depth"))
		} else {
			require.Equal(t, "completed", attr(s, "sluice.outcome"))
		}
	}
	// Four activities one at a time, each holding its slot 300ms: each admission comes at least 300ms
	// after the one before it (its wait span ends before its run, whose slot frees the next). So a wait
	// span that covers the time in the queue lasts at least 300ms for each other admission within it.
	// How long the longest wait is depends on when Temporal handed each task to a worker, and is only
	// logged: a wall-clock floor (800ms was asserted) assumed the four arrived within 100ms.
	for _, w := range waits {
		others := 0
		for _, o := range waits {
			if o != w && !o.EndTime().Before(w.StartTime()) && o.EndTime().Before(w.EndTime()) {
				others++
			}
		}
		require.GreaterOrEqual(t, w.EndTime().Sub(w.StartTime()), time.Duration(others)*300*time.Millisecond,
			"the wait span covers the time in the queue: %d admissions within it", others)
	}
	t.Logf("the longest wait: %v", waited)
}

func TestPlugin_Metrics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	scope := tally.NewTestScope("", nil)
	e := newEnv(t, &acts{hold: 50 * time.Millisecond})
	opts := e.options(throttle.Limit{Key: "svc", MaxConcurrent: 2})
	opts.MetricsHandler = temporaltally.NewMetricsHandler(scope)
	e.startWorker(t, opts)
	run, err := e.run(t, ctx, FanOut, fanOutInput{N: 6})
	require.NoError(t, err)
	require.NoError(t, run.Get(ctx, nil))

	counter := func(name string, tags map[string]string) int64 {
		for _, c := range scope.Snapshot().Counters() {
			if c.Name() != name {
				continue
			}
			match := true
			for k, v := range tags {
				match = match && c.Tags()[k] == v
			}
			if match {
				return c.Value()
			}
		}
		return 0
	}
	key := map[string]string{"sluice_key": "svc"}
	require.Equal(t, int64(6), counter(sluiceinterceptor.MetricTicketsQueued, key), "counted before the ticket is reported written")
	// The claim counts its admissions after it commits, in parallel with the runs it admitted: the
	// workflow may be done first. Wait for the counts, then check that they stop at six.
	waits := func() int {
		n := 0
		for _, tm := range scope.Snapshot().Timers() {
			if tm.Name() == sluiceinterceptor.MetricWaitTime {
				n += len(tm.Values())
			}
		}
		return n
	}
	require.Eventually(t, func() bool {
		return counter(sluiceinterceptor.MetricTicketsCompleted, map[string]string{"sluice_key": "svc", "sluice_outcome": "completed"}) >= 6 &&
			counter(sluiceinterceptor.MetricTicketsAdmitted, key) >= 6 && waits() >= 6
	}, time.Minute, 20*time.Millisecond)
	require.Equal(t, int64(6), counter(sluiceinterceptor.MetricTicketsCompleted, map[string]string{"sluice_key": "svc", "sluice_outcome": "completed"}))
	require.Equal(t, int64(6), counter(sluiceinterceptor.MetricTicketsAdmitted, key))
	require.Equal(t, int64(60), counter(sluiceinterceptor.MetricTokensReserved, key))
	require.Equal(t, 6, waits(), "one wait time per admission")
	require.Eventually(t, func() bool {
		for _, g := range scope.Snapshot().Gauges() {
			if g.Name() == sluiceinterceptor.MetricInflight && g.Tags()["sluice_key"] == "svc" {
				return g.Value() == 0
			}
		}
		return false
	}, time.Minute, 50*time.Millisecond, "the in-flight gauge is published and back to zero")
}

// TestPlugin_TracingAcrossReplicas writes a ticket as another process would (its owner is elsewhere)
// and lets a replica that does not hold it admit it: the wait span still joins the activity's trace,
// from the W3C trace context stored with the ticket.
func TestPlugin_TracingAcrossReplicas(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	e := newEnv(t, &acts{})
	opts := e.options(throttle.Limit{Key: "svc", MaxConcurrent: 5})
	opts.TracerProvider = tp
	_, plugin := e.startWorker(t, opts)

	actCtx, activitySpan := tp.Tracer("test").Start(ctx, "RunActivity:Elsewhere")
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(actCtx, c)
	activitySpan.End()
	other, err := store.New(e.pool, store.Options{Schema: e.schema}) // another process's engine
	require.NoError(t, err)
	// The other process is alive: its lease is held, or the plugin's hand-back would return its
	// ticket to Temporal before a claim admits it (as it did on a loaded machine).
	_, err = other.RenewLease(ctx, "another-process", time.Hour)
	require.NoError(t, err)
	_, err = other.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{"svc"}, Owner: "another-process", Cost: 7, TraceContext: c["traceparent"]})
	require.NoError(t, err)

	require.Eventually(t, func() bool { return len(spansNamed(rec.Ended(), sluiceinterceptor.SpanWait)) == 1 }, time.Minute, 20*time.Millisecond)
	w := spansNamed(rec.Ended(), sluiceinterceptor.SpanWait)[0]
	require.Equal(t, activitySpan.SpanContext().TraceID(), w.SpanContext().TraceID())
	require.Equal(t, activitySpan.SpanContext().SpanID(), w.Parent().SpanID())
	require.Equal(t, "another-process", attr(w, "sluice.owner"))
	require.Equal(t, plugin.Owner(), attr(w, "sluice.admitted_by"))
	require.Equal(t, int64(7), attr(w, "sluice.reserved_cost"))
}
