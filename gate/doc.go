// Package gate serves Sluice's admission to workflows written in any Temporal SDK: a Go worker with
// two activities on a task queue of its own, AcquireActivity and ReleaseActivity, whose names and
// JSON payloads are a versioned contract (ContractVersion; docs/gate.md).
//
// A workflow schedules Acquire with the limits it draws on (or a route the gate defines) and its
// estimated cost. The gate writes an admission ticket and frees the activity's slot; once the ticket
// is admitted (caps, rates, token budgets and allowances checked globally, as for the plugin), the
// gate completes Acquire with a Permit. The workflow makes its call, then schedules Release on the
// permit's ReleaseTaskQueue with what the call used, or that the provider answered 429: the gate
// reconciles it exactly as the plugin reconciles a run.
//
// A permit never leaks: the gate releases it, as an abandoned run (its reservation kept as spent),
// when its hold time lapses or when its workflow closes; and when the gate process holding it dies,
// the surviving replicas hand its ticket back.
//
// The sluice command runs a gate (sluice gate); a Go program hosts one in a worker it already has
// with New and Register.
package gate
