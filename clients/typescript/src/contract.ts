/**
 * The gate's contract, version 1: the names and JSON payloads of the two activities a Sluice gate
 * serves. This file mirrors gate/contract.go in the Sluice repository, field for field; the fixtures
 * in gate/testdata/contract/*.json are read by a Go test and by this package's tests, so a change on
 * either side fails a test. The contract is described in docs/gate.md.
 *
 * Nothing here imports Temporal: it is safe in workflow code, activity code and clients alike.
 */

/**
 * The version of the gate's contract. Every payload carries it in `version`; a gate refuses a
 * version it does not serve (SluiceContractVersion).
 */
export const ContractVersion = 1;

/** The task queue a gate serves Acquire on unless it is configured otherwise. */
export const DefaultTaskQueue = 'sluice-gate';

/**
 * Waits in line for room on the limits an AcquireRequest names and returns a Permit once admitted.
 * Schedule it on the gate's task queue. It completes asynchronously: waiting holds no activity slot.
 */
export const AcquireActivity = 'sluice.gate.v1.Acquire';

/**
 * Gives a Permit back with what the call used (a ReleaseRequest) and returns a ReleaseResult.
 * Schedule it on the permit's release_task_queue.
 */
export const ReleaseActivity = 'sluice.gate.v1.Release';

/**
 * The type of the non-retryable ApplicationFailure a gate fails Acquire with when an allowance
 * refused the call; its first detail is a Refusal.
 */
export const ErrTypeAllowanceSpent = 'SluiceAllowanceSpent';
/** A field of the request is missing or out of range; the message names the field and the value. */
export const ErrTypeBadRequest = 'SluiceBadRequest';
/** The request names a limit key or route the gate does not know. */
export const ErrTypeUnknownLimit = 'SluiceUnknownLimit';
/** The request's version is not one this gate serves. */
export const ErrTypeVersion = 'SluiceContractVersion';

/** Every error type a gate fails an activity with; none of them is worth a retry. */
export const NonRetryableErrorTypes: readonly string[] = [
  ErrTypeAllowanceSpent,
  ErrTypeBadRequest,
  ErrTypeUnknownLimit,
  ErrTypeVersion,
];

/** The most limit keys one request may name. */
export const MaxLimits = 16;
/** The longest a permit may be held, in milliseconds (24 hours). */
export const MaxHoldMS = 24 * 60 * 60 * 1000;
/** The largest token estimate or usage a request may give, per figure (2^40). */
export const MaxTokens = 2 ** 40;

/** The reasons of a ReleaseResult that released nothing. */
export const ReasonReleased = 'released';
export const ReasonLapsed = 'lapsed';
export const ReasonWorkflowClosed = 'workflow_closed';
export const ReasonUnknown = 'unknown';

/** Why a ReleaseResult released nothing. */
export type ReleaseReason =
  | typeof ReasonReleased
  | typeof ReasonLapsed
  | typeof ReasonWorkflowClosed
  | typeof ReasonUnknown;

/** The input of AcquireActivity. */
export interface AcquireRequest {
  /** ContractVersion. Required. */
  version: number;
  /** A route the gate defines: its limits, model and tenant limit. Give route or limits. */
  route?: string;
  /**
   * The keys of the limits the call draws on, at most MaxLimits; the first is its line, where a
   * 429 and the provider's headers apply. With route, they are added after the route's.
   */
  limits?: string[];
  /** The estimated tokens of the call as one figure. Give tokens, or input_tokens and output_tokens. */
  tokens?: number;
  /** The estimate by dimension, for limits with input and output budgets. */
  input_tokens?: number;
  output_tokens?: number;
  /** Prices the estimate and the usage in money. Empty means the route's model, or none. */
  model?: string;
  /** Orders requests within a line, lower first, 1 to 5. Absent means 3. */
  priority?: number;
  /** Shares a line fairly between tenants; with a route's tenant limit, draws on it too. */
  tenant?: string;
  /** The longest the permit may be held, in milliseconds, at most MaxHoldMS. Absent: the gate's default. */
  max_hold_ms?: number;
}

/** The result of AcquireActivity: the call may go ahead. Give it back with ReleaseActivity. */
export interface Permit {
  /** ContractVersion. */
  version: number;
  /** The admission ticket the permit holds (sluice explain TICKET_ID). */
  ticket_id: number;
  /** The gate process holding the permit. */
  holder: string;
  /**
   * The task queue of the gate process holding the permit: schedule ReleaseActivity there. If that
   * process is gone the Release is never picked up: a ScheduleToStart timeout means released.
   */
  release_task_queue: string;
  /** The keys the permit draws on; the first is the line. */
  limits: string[];
  /** When the request was admitted (RFC 3339). */
  admitted_at: string;
  /** When the gate releases the permit if it has not been released by then (RFC 3339). */
  expires_at: string;
  /** How long the request waited in line, in milliseconds. */
  waited_ms: number;
}

/** The input of ReleaseActivity. */
export interface ReleaseRequest {
  /** ContractVersion. Required. */
  version: number;
  /** The permit to release, as AcquireActivity returned it. */
  permit: Permit;
  /**
   * What the call used: tokens, or input_tokens and output_tokens. All absent means not known:
   * the reservation is kept as spent.
   */
  tokens?: number;
  input_tokens?: number;
  output_tokens?: number;
  /** Prices the usage when it is not the request's model. */
  model?: string;
  /** The provider answered 429: the line's limit is paused on every replica. */
  rate_limited?: boolean;
  /** The provider's Retry-After in milliseconds, only with rate_limited. */
  retry_after_ms?: number;
  /** The provider's response headers (names in any case), for header learning and Retry-After. */
  headers?: Record<string, string[]>;
}

/** The result of ReleaseActivity. */
export interface ReleaseResult {
  /** ContractVersion. */
  version: number;
  /**
   * True when this request released the permit; false when it was released before (reason says
   * how).
   */
  released: boolean;
  /** When released is false: released, lapsed, workflow_closed or unknown. */
  reason?: ReleaseReason;
}

/** What an allowance counts. */
export type Meter = 'requests' | 'tokens' | 'input_tokens' | 'output_tokens' | 'money';

/**
 * Why a gate refused a call rather than let it wait: the detail of a SluiceAllowanceSpent failure,
 * the same flat JSON the Go plugin's refusal has (throttle.Refusal).
 */
export interface Refusal {
  /** The key of the limit whose allowance is spent. */
  limit: string;
  /** The allowance, in the operators' syntax (tokens=50000/day). */
  allowance: string;
  meter: Meter;
  /** The currency of a money allowance. */
  currency?: string;
  /** What the allowance had counted in its window. */
  used: number;
  /** The allowance's amount. */
  amount: number;
  /** What the call needed. */
  needs: number;
  /** When the allowance has room again (RFC 3339); absent when no window will ever have room. */
  reset_at?: string;
  window_start?: string;
  window_end?: string;
  /** The call's deadline, when it has one. */
  deadline?: string;
  on_spent?: 'wait' | 'refuse';
  refundable?: number;
}

/** Usage a call reports: one figure, or input and output. */
export type Usage = { tokens: number } | { input_tokens?: number; output_tokens?: number };
