package interceptor

import "github.com/sluicehq/sluice/internal/telemetry"

// TracerName names Sluice's tracer: the module path.
const TracerName = telemetry.TracerName

// Span names.
const (
	SpanWait = telemetry.SpanWait // from the ticket written to its admission
	SpanRun  = telemetry.SpanRun  // the activity's run, after admission
)

// Metric names, all tagged with the limit key (sluice_key) of the ticket's line.
const (
	MetricTicketsQueued     = telemetry.MetricTicketsQueued     // counter: tickets written
	MetricTicketsAdmitted   = telemetry.MetricTicketsAdmitted   // counter: tickets admitted (by this process's claims)
	MetricTicketsCompleted  = telemetry.MetricTicketsCompleted  // counter, tagged sluice_outcome: runs finished
	MetricTicketsHandedBack = telemetry.MetricTicketsHandedBack // counter: tickets handed back to Temporal
	MetricRateLimited       = telemetry.MetricRateLimited       // counter: 429s reported by activities
	MetricTokensReserved    = telemetry.MetricTokensReserved    // counter: tokens reserved at admission
	MetricTokensUsed        = telemetry.MetricTokensUsed        // counter: tokens reported used
	MetricInflight          = telemetry.MetricInflight          // gauge: tickets admitted and running, all replicas
	MetricInflightTokens    = telemetry.MetricInflightTokens    // gauge: tokens reserved by them
	MetricQueueDepth        = telemetry.MetricQueueDepth        // gauge: tickets queued in the line at the last admission
	MetricWaitTime          = telemetry.MetricWaitTime          // timer (histogram): written to admitted
	// MetricSelfCheckReconciled counts, tagged sluice_action (run, take, hand_back), the tickets the
	// self-check found Postgres and this process disagreeing on, and reconciled (see
	// Options.SelfCheckInterval). Zero in normal operation.
	MetricSelfCheckReconciled = telemetry.MetricSelfCheckReconciled
)

// Attribute keys of Sluice's spans.
const (
	AttrLimitKeys    = telemetry.AttrLimitKeys
	AttrReservedCost = telemetry.AttrReservedCost
	AttrActualCost   = telemetry.AttrActualCost
	AttrPriority     = telemetry.AttrPriority
	AttrFairnessKey  = telemetry.AttrFairnessKey
	AttrAttempt      = telemetry.AttrAttempt
	AttrWaitReason   = telemetry.AttrWaitReason
	AttrQueueDepth   = telemetry.AttrQueueDepth
	AttrTicketID     = telemetry.AttrTicketID
	AttrOutcome      = telemetry.AttrOutcome
	AttrRequeues     = telemetry.AttrRequeues
	AttrOwner        = telemetry.AttrOwner      // the process that holds and runs the invocation
	AttrAdmittedBy   = telemetry.AttrAdmittedBy // the process whose claim admitted it
)
