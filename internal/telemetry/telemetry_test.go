package telemetry

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uber-go/tally/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	temporaltally "go.temporal.io/sdk/contrib/tally"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// spanContext is a sampled span context with fixed IDs, as an activity's span would carry.
func spanContext(t *testing.T) trace.SpanContext {
	t.Helper()
	traceID, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	require.NoError(t, err)
	spanID, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	require.NoError(t, err)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled})
}

func TestTelemetry_InjectExtract(t *testing.T) {
	t.Parallel()
	tm := New(nil, nil)

	t.Run("RoundTrips", func(t *testing.T) {
		t.Parallel()
		sc := spanContext(t)
		traceparent := tm.Inject(trace.ContextWithSpanContext(context.Background(), sc))
		require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", traceparent, "W3C traceparent")
		got := trace.SpanContextFromContext(tm.extract(traceparent))
		require.Equal(t, sc.TraceID(), got.TraceID())
		require.Equal(t, sc.SpanID(), got.SpanID())
		require.True(t, got.IsSampled())
		require.True(t, got.IsRemote(), "the span was started by another process")
	})

	t.Run("NoSpanNoContext", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, tm.Inject(context.Background()))
		require.False(t, trace.SpanContextFromContext(tm.extract("")).IsValid())
		require.False(t, trace.SpanContextFromContext(tm.extract("not-a-traceparent")).IsValid())
	})
}

// The wait span joins the activity's trace from the ticket's stored trace context, whichever replica
// admits it, and spans the ticket's wait.
func TestTelemetry_AdmittedJoinsTheTicketsTrace(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
	scope := tally.NewTestScope("", nil)
	tm := New(tp, temporaltally.NewMetricsHandler(scope))
	sc := spanContext(t)
	tk := store.Ticket{ID: 7, LineKey: "k", LimitKeys: []string{"k", "tenant:a"}, Cost: 120, Owner: "holder",
		EnqueuedAt: t0, AdmittedAt: t0.Add(3 * time.Second), TraceContext: tm.Inject(trace.ContextWithSpanContext(context.Background(), sc))}

	tm.Admitted(tk, 5, "admitter")
	spans := rec.Ended()
	require.Len(t, spans, 1)
	s := spans[0]
	require.Equal(t, SpanWait, s.Name())
	require.Equal(t, sc.TraceID(), s.SpanContext().TraceID(), "in the activity's trace")
	require.Equal(t, sc.SpanID(), s.Parent().SpanID(), "a child of the activity's span")
	require.Equal(t, t0, s.StartTime())
	require.Equal(t, t0.Add(3*time.Second), s.EndTime())
	attrs := attribute.NewSet(s.Attributes()...)
	for k, want := range map[attribute.Key]any{AttrTicketID: int64(7), AttrLimitKeys: "k,tenant:a", AttrWaitReason: "queue",
		AttrQueueDepth: int64(5), AttrOwner: "holder", AttrAdmittedBy: "admitter"} {
		v, ok := attrs.Value(k)
		require.True(t, ok, "%s", k)
		require.Equal(t, want, v.AsInterface(), "%s", k)
	}
	snap := scope.Snapshot()
	require.EqualValues(t, 1, counter(t, snap, MetricTicketsAdmitted, "k"))
	require.EqualValues(t, 120, counter(t, snap, MetricTokensReserved, "k"))
}

func TestTelemetry_Gauges(t *testing.T) {
	t.Parallel()
	scope := tally.NewTestScope("", nil)
	tm := New(nil, temporaltally.NewMetricsHandler(scope))
	tm.Gauges("k", throttle.State{InflightCount: 3, InflightTokens: 1200})
	tm.Gauges("idle", throttle.State{})
	got := map[string]float64{}
	for _, g := range scope.Snapshot().Gauges() {
		got[g.Name()+"/"+g.Tags()["sluice_key"]] = g.Value()
	}
	require.Equal(t, map[string]float64{
		MetricInflight + "/k": 3, MetricInflightTokens + "/k": 1200,
		MetricInflight + "/idle": 0, MetricInflightTokens + "/idle": 0,
	}, got)
}

// counter returns the value of counter name tagged with key.
func counter(t *testing.T, snap tally.Snapshot, name, key string) int64 {
	t.Helper()
	for _, c := range snap.Counters() {
		if c.Name() == name && c.Tags()["sluice_key"] == key {
			return c.Value()
		}
	}
	require.Failf(t, "no counter", "%s{sluice_key=%s}", name, key)
	return 0
}

// A refused ticket's wait span ends at the refusal, in error, and the refusal is counted by the limit
// that refused it.
func TestTelemetry_Refused(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
	scope := tally.NewTestScope("", nil)
	tm := New(tp, temporaltally.NewMetricsHandler(scope))
	tk := store.Ticket{ID: 9, LineKey: "llm", LimitKeys: []string{"llm", "tenant:free"}, EnqueuedAt: t0,
		FinishedAt: t0.Add(2 * time.Second), OutcomeKind: store.OutcomeRefused, WaitReason: "allowance of tenant:free"}

	tm.Refused(tk)
	spans := rec.Ended()
	require.Len(t, spans, 1)
	s := spans[0]
	require.Equal(t, SpanWait, s.Name())
	require.Equal(t, t0.Add(2*time.Second), s.EndTime())
	require.Equal(t, codes.Error, s.Status().Code)
	require.Equal(t, "refused: an allowance of tenant:free is spent", s.Status().Description)
	var refused int64
	for _, c := range scope.Snapshot().Counters() {
		if c.Name() == MetricTicketsRefused && c.Tags()["sluice_key"] == "llm" && c.Tags()["sluice_refused_by"] == "tenant:free" {
			refused = c.Value()
		}
	}
	require.EqualValues(t, 1, refused)
}
