/**
 * @sluice/temporal: Sluice's admission for Temporal TypeScript workflows. withSluice, acquire and
 * release schedule the gate's activities, so they run in workflow code; the gate's contract (types
 * and constants) and the pure helpers (buildAcquireRequest, isAllowanceSpent, ...) run anywhere.
 * '@sluice/temporal/workflow' and '@sluice/temporal/contract' are the same, and the contract alone.
 */
export * from './workflow';
