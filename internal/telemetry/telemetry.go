// Package telemetry holds Sluice's span and metric names and the one type that records them: the
// tracer, the W3C propagation of a ticket's trace, and the metrics handler. The interceptor package
// re-exports the names for users.
package telemetry

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// TracerName names Sluice's tracer: the module path.
const TracerName = "github.com/sluicehq/sluice"

// Span names.
const (
	SpanWait = "sluice.wait" // from the ticket written to its admission
	SpanRun  = "sluice.run"  // the activity's run, after admission
)

// Metric names, all tagged with the limit key (sluice_key) of the ticket's line.
const (
	MetricTicketsQueued     = "sluice_tickets_queued"      // counter: tickets written
	MetricTicketsAdmitted   = "sluice_tickets_admitted"    // counter: tickets admitted (by this process's claims)
	MetricTicketsCompleted  = "sluice_tickets_completed"   // counter, tagged sluice_outcome: runs finished
	MetricTicketsHandedBack = "sluice_tickets_handed_back" // counter: tickets handed back to Temporal
	// MetricTicketsRefused counts, tagged sluice_refused_by (the limit's key), the tickets this
	// process's claims refused because an allowance was spent.
	MetricTicketsRefused = "sluice_tickets_refused"
	MetricRateLimited    = "sluice_rate_limited"    // counter: 429s reported by activities
	MetricTokensReserved = "sluice_tokens_reserved" // counter: tokens reserved at admission
	MetricTokensUsed     = "sluice_tokens_used"     // counter: tokens reported used
	MetricInflight       = "sluice_inflight"        // gauge: tickets admitted and running, all replicas
	MetricInflightTokens = "sluice_inflight_tokens" // gauge: tokens reserved by them
	MetricQueueDepth     = "sluice_queue_depth"     // gauge: tickets queued in the line at the last admission
	MetricWaitTime       = "sluice_wait_time"       // timer (histogram): written to admitted
	// MetricSelfCheckReconciled counts, tagged sluice_action (run, take, hand_back), the tickets a
	// process's self-check found Postgres and its memory disagreed on, and reconciled.
	MetricSelfCheckReconciled = "sluice_self_check_reconciled"
)

// Attribute keys of Sluice's spans.
const (
	AttrLimitKeys    = attribute.Key("sluice.limit_keys")
	AttrReservedCost = attribute.Key("sluice.reserved_cost")
	AttrActualCost   = attribute.Key("sluice.actual_cost")
	AttrPriority     = attribute.Key("sluice.priority")
	AttrFairnessKey  = attribute.Key("sluice.fairness_key")
	AttrAttempt      = attribute.Key("sluice.attempt")
	AttrWaitReason   = attribute.Key("sluice.wait_reason")
	AttrQueueDepth   = attribute.Key("sluice.queue_depth")
	AttrTicketID     = attribute.Key("sluice.ticket_id")
	AttrOutcome      = attribute.Key("sluice.outcome")
	AttrRequeues     = attribute.Key("sluice.requeues")
	AttrOwner        = attribute.Key("sluice.owner")       // the process that holds and runs the invocation
	AttrAdmittedBy   = attribute.Key("sluice.admitted_by") // the process whose claim admitted it
)

// Telemetry records Sluice's spans and metrics. The zero value is not usable: call New. It is safe
// for concurrent use.
type Telemetry struct {
	tracer  trace.Tracer
	prop    propagation.TraceContext
	metrics client.MetricsHandler
}

// New returns the Telemetry of a plugin; nil arguments mean the global tracer provider and no metrics.
func New(tp trace.TracerProvider, m client.MetricsHandler) Telemetry {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if m == nil {
		m = client.MetricsNopHandler
	}
	return Telemetry{tracer: tp.Tracer(TracerName), metrics: m}
}

// Inject returns the W3C trace context of ctx's span, stored with the ticket so that whichever
// replica admits it can join the trace.
func (tm Telemetry) Inject(ctx context.Context) string {
	c := propagation.MapCarrier{}
	tm.prop.Inject(ctx, c)
	return c["traceparent"]
}

func (tm Telemetry) extract(traceparent string) context.Context {
	return tm.prop.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
}

// ForKey returns the metrics handler tagged with a limit key.
func (tm Telemetry) ForKey(key string) client.MetricsHandler {
	return tm.metrics.WithTags(map[string]string{"sluice_key": key})
}

func ticketAttrs(t store.Ticket) []attribute.KeyValue {
	return []attribute.KeyValue{
		AttrTicketID.Int64(t.ID), AttrLimitKeys.String(strings.Join(t.LimitKeys, ",")),
		AttrReservedCost.Int64(t.Cost), AttrPriority.Int(t.Priority), AttrFairnessKey.String(t.FairnessKey),
		AttrAttempt.Int(t.Attempt), AttrRequeues.Int(t.Requeues), AttrOwner.String(t.Owner),
	}
}

// Admitted records, on the replica whose claim admitted it, a ticket's wait: a span from the instant
// it was written to the instant it was admitted, a child of the activity's span, and the admission
// metrics.
func (tm Telemetry) Admitted(t store.Ticket, queueDepth int64, by string) {
	reason := t.WaitReason
	if reason == "" {
		reason = "queue" // waited only behind other tickets, or not at all
	}
	_, span := tm.tracer.Start(tm.extract(t.TraceContext), SpanWait, trace.WithTimestamp(t.EnqueuedAt),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(ticketAttrs(t), AttrWaitReason.String(reason), AttrQueueDepth.Int64(queueDepth), AttrAdmittedBy.String(by))...))
	span.End(trace.WithTimestamp(t.AdmittedAt))
	m := tm.ForKey(t.LineKey)
	m.Counter(MetricTicketsAdmitted).Inc(1)
	m.Counter(MetricTokensReserved).Inc(t.Cost)
	m.Timer(MetricWaitTime).Record(t.AdmittedAt.Sub(t.EnqueuedAt))
	m.Gauge(MetricQueueDepth).Update(float64(queueDepth))
}

// Refused records a ticket this process's claim refused for a spent allowance: the wait span, from
// the instant it was written to the refusal, in error, and the refusal metric.
func (tm Telemetry) Refused(t store.Ticket) {
	by := strings.TrimPrefix(t.WaitReason, "allowance of ")
	_, span := tm.tracer.Start(tm.extract(t.TraceContext), SpanWait, trace.WithTimestamp(t.EnqueuedAt),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(ticketAttrs(t), AttrWaitReason.String(t.WaitReason), AttrOutcome.String(store.OutcomeRefused))...))
	span.SetStatus(codes.Error, "refused: an allowance of "+by+" is spent")
	span.End(trace.WithTimestamp(t.FinishedAt))
	tm.ForKey(t.LineKey).WithTags(map[string]string{"sluice_refused_by": by}).Counter(MetricTicketsRefused).Inc(1)
}

// StartRun starts the run span as a child of the activity's span.
func (tm Telemetry) StartRun(ctx context.Context, t store.Ticket) (context.Context, trace.Span) {
	parent := trace.SpanContextFromContext(ctx)
	if !parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.SpanContextFromContext(tm.extract(t.TraceContext)))
	}
	return tm.tracer.Start(ctx, SpanRun, trace.WithAttributes(ticketAttrs(t)...))
}

// EndRun ends the run span and records the run's metrics. actual is the reported real cost, -1 when
// none was reported.
func (tm Telemetry) EndRun(span trace.Span, t store.Ticket, actual int64, outcome string, err error) {
	span.SetAttributes(AttrOutcome.String(outcome))
	if actual >= 0 {
		span.SetAttributes(AttrActualCost.Int64(actual))
		tm.ForKey(t.LineKey).Counter(MetricTokensUsed).Inc(actual)
	}
	if err != nil && outcome != store.OutcomeCompleted {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	tm.ForKey(t.LineKey).WithTags(map[string]string{"sluice_outcome": outcome}).Counter(MetricTicketsCompleted).Inc(1)
}

// Gauges publishes key's in-flight figures, as the database has them.
func (tm Telemetry) Gauges(key string, s throttle.State) {
	m := tm.ForKey(key)
	m.Gauge(MetricInflight).Update(float64(s.InflightCount))
	m.Gauge(MetricInflightTokens).Update(float64(s.InflightTokens))
}
