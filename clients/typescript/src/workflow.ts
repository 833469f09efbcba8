/**
 * Sluice's admission in workflow code: import from '@sluice/temporal/workflow' in a workflow file.
 *
 *   const answer = await withSluice({ route: 'openai', tokens: 1200 }, () => callModel(prompt), {
 *     usage: (r) => ({ input_tokens: r.usage.prompt_tokens, output_tokens: r.usage.completion_tokens }),
 *     rateLimited: (err) => rateLimitOf(err),
 *   });
 *
 * withSluice acquires a permit from a Sluice gate (the activity sluice.gate.v1.Acquire on the gate's
 * task queue), runs the call, and releases the permit (sluice.gate.v1.Release on the permit's
 * release_task_queue) whatever the call's outcome, even when the workflow is cancelled during it.
 */
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  CancelledFailure,
  TimeoutFailure,
  TimeoutType,
  type Duration,
} from '@temporalio/common';
import { CancellationScope, log, proxyActivities } from '@temporalio/workflow';
import {
  AcquireActivity,
  DefaultTaskQueue,
  ErrTypeBadRequest,
  NonRetryableErrorTypes,
  Permit,
  ReasonUnknown,
  ReleaseActivity,
  ReleaseResult,
  Usage,
} from './contract';
import {
  buildAcquireRequest,
  buildReleaseRequest,
  positiveMs,
  RateLimit,
  ReleaseReport,
  SluiceRequest,
  Headers,
} from './request';

export * from './contract';
export * from './request';

/** How Acquire is scheduled (and, for a permit admitted as the wait was cancelled, Release). */
export interface AcquireOptions extends ReleaseOptions {
  /** The gate's task queue. Default 'sluice-gate'. */
  taskQueue?: string;
  /**
   * The longest the call may wait in line for a permit (Acquire's StartToClose and ScheduleToClose
   * timeouts). Default 10 minutes.
   */
  maxWait?: Duration;
  /**
   * Acquire's heartbeat timeout: the gate heartbeats a waiting request at 0.8 times it, so it
   * bounds how long a cancelled workflow's request stays in line and how soon a dead gate's
   * requests are retried on another. Default 30 seconds.
   */
  heartbeatTimeout?: Duration;
  /**
   * What cancelling the workflow while it waits does. WAIT_CANCELLATION_COMPLETED (the default)
   * waits until the gate has taken the request out of line, which it learns at its next heartbeat;
   * should the gate admit it meanwhile, the permit is released at once, unused. TRY_CANCEL fails the
   * wait at once, but a permit admitted in that moment is held until the gate sees the workflow
   * closed, or its hold lapses.
   */
  cancellationType?: ActivityCancellationType;
}

/** How Release is scheduled. */
export interface ReleaseOptions {
  /**
   * How long a Release may wait to be picked up by the gate process holding the permit. Past it,
   * that process is taken to be gone, and its permits with it: the release counts as done.
   * Default 60 seconds.
   */
  releaseScheduleToStart?: Duration;
  /** Release's StartToClose timeout. Default 30 seconds. */
  releaseStartToClose?: Duration;
  /** How many times Release is tried. Default 5. */
  releaseAttempts?: number;
}

/** What a release did: the gate's ReleaseResult, or holderGone when no process held the permit. */
export interface ReleaseOutcome extends ReleaseResult {
  /**
   * True when the Release timed out before the holder picked it up: the gate process holding the
   * permit is gone and the permit went with it (released is false, reason "unknown").
   */
  holderGone?: boolean;
}

/** The options of withSluice; T is what the call returns. */
export interface WithSluiceOptions<T> extends AcquireOptions, ReleaseOptions {
  /** What the call used, from its result. Absent or undefined: not known (the estimate is kept). */
  usage?: (result: T) => Usage | undefined;
  /** What a call that threw used, when the error tells. Absent or undefined: not known. */
  usageOnError?: (err: unknown) => Usage | undefined;
  /**
   * Whether the call's error is the provider's 429: return a RateLimit (or true) to release the
   * permit as rate limited, which pauses the limit for every caller and gives back the reservation.
   */
  rateLimited?: (err: unknown) => RateLimit | boolean | undefined;
  /** The provider's response headers, from the call's result, for the gate's header learning. */
  headers?: (result: T) => Headers | undefined;
  /** Prices the usage when it is not the request's model. */
  model?: string;
}

const acquireDefaults = { taskQueue: DefaultTaskQueue, maxWait: '10 minutes', heartbeatTimeout: '30 seconds' } as const;
const releaseDefaults = { scheduleToStart: '60 seconds', startToClose: '30 seconds', attempts: 5 } as const;

type GateActivities = Record<string, (arg: unknown) => Promise<unknown>>;

/**
 * Waits for a permit from the gate for request and returns it. Release it with release, whatever
 * the call's outcome. An allowance that refuses the call fails it with a non-retryable
 * SluiceAllowanceSpent (isAllowanceSpent reads the refusal); a bad request with SluiceBadRequest.
 */
export async function acquire(request: SluiceRequest, options: AcquireOptions = {}): Promise<Permit> {
  const req = buildAcquireRequest(request);
  const taskQueue = options.taskQueue ?? acquireDefaults.taskQueue;
  if (typeof taskQueue !== 'string' || taskQueue === '') {
    throw ApplicationFailure.create({
      message: `sluice: taskQueue ${JSON.stringify(taskQueue)}: must be the gate's task queue`,
      type: ErrTypeBadRequest,
      nonRetryable: true,
    });
  }
  const maxWait = positiveMs('maxWait', options.maxWait, acquireDefaults.maxWait);
  const heartbeat = positiveMs('heartbeatTimeout', options.heartbeatTimeout, acquireDefaults.heartbeatTimeout);
  const acts = proxyActivities<GateActivities>({
    taskQueue,
    startToCloseTimeout: maxWait,
    scheduleToCloseTimeout: maxWait,
    heartbeatTimeout: heartbeat,
    cancellationType: options.cancellationType ?? ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { nonRetryableErrorTypes: [...NonRetryableErrorTypes] },
  });
  const permit = (await acts[AcquireActivity](req)) as Permit;
  if (CancellationScope.current().consideredCancelled) {
    // The gate admitted the request as the workflow cancelled the wait: nobody will make the call,
    // so the permit goes back at once, with nothing used.
    await release(permit, { usage: { tokens: 0 } }, options);
    throw new CancelledFailure('sluice: cancelled while waiting for a permit; the permit was released unused');
  }
  return permit;
}

/**
 * Gives permit back with what report says the call used. It runs even in a cancelled scope. When
 * the gate process holding the permit is gone, the Release is never picked up; its
 * ScheduleToStart timeout then counts as released (holderGone).
 */
export async function release(permit: Permit, report: ReleaseReport = {}, options: ReleaseOptions = {}): Promise<ReleaseOutcome> {
  const req = buildReleaseRequest(permit, report);
  if (typeof permit.release_task_queue !== 'string' || permit.release_task_queue === '') {
    throw ApplicationFailure.create({
      message: `sluice: permit.release_task_queue ${JSON.stringify(permit.release_task_queue)}: must be the permit's`,
      type: ErrTypeBadRequest,
      nonRetryable: true,
    });
  }
  const scheduleToStart = positiveMs('releaseScheduleToStart', options.releaseScheduleToStart, releaseDefaults.scheduleToStart);
  const startToClose = positiveMs('releaseStartToClose', options.releaseStartToClose, releaseDefaults.startToClose);
  const attempts = options.releaseAttempts ?? releaseDefaults.attempts;
  if (!Number.isInteger(attempts) || attempts < 1) {
    throw ApplicationFailure.create({
      message: `sluice: releaseAttempts ${attempts}: must be an integer, 1 or more`,
      type: ErrTypeBadRequest,
      nonRetryable: true,
    });
  }
  const acts = proxyActivities<GateActivities>({
    taskQueue: permit.release_task_queue,
    scheduleToStartTimeout: scheduleToStart,
    startToCloseTimeout: startToClose,
    retry: { maximumAttempts: attempts, nonRetryableErrorTypes: [...NonRetryableErrorTypes] },
  });
  try {
    return await CancellationScope.nonCancellable(() => acts[ReleaseActivity](req) as Promise<ReleaseResult>);
  } catch (err) {
    if (isScheduleToStartTimeout(err)) {
      return { version: permit.version, released: false, reason: ReasonUnknown, holderGone: true };
    }
    throw err;
  }
}

/** Whether err is an activity's ScheduleToStart timeout: no worker picked it up in time. */
export function isScheduleToStartTimeout(err: unknown): boolean {
  return (
    err instanceof ActivityFailure &&
    err.cause instanceof TimeoutFailure &&
    err.cause.timeoutType === TimeoutType.SCHEDULE_TO_START
  );
}

/**
 * Runs call with a permit from the Sluice gate for request: acquires it (waiting in line for room
 * on the request's limits), runs call, and releases the permit whatever happens, with what
 * options.usage (or usageOnError) says the call used, or as rate limited when options.rateLimited
 * recognises the error as the provider's 429. Cancelling the workflow while it waits cancels the
 * wait; cancelling it during the call still releases the permit. A Release that fails is logged,
 * not thrown: the call's own outcome stands, and the gate releases the permit when its hold lapses
 * or the workflow closes.
 */
export async function withSluice<T>(
  request: SluiceRequest,
  call: (permit: Permit) => Promise<T>,
  options: WithSluiceOptions<T> = {},
): Promise<T> {
  const permit = await acquire(request, options);
  let report: ReleaseReport = { model: options.model };
  try {
    const result = await call(permit);
    report = { ...report, usage: guard('usage', () => options.usage?.(result)), headers: guard('headers', () => options.headers?.(result)) };
    return result;
  } catch (err) {
    const rl = guard('rateLimited', () => options.rateLimited?.(err));
    if (rl) {
      report = { ...report, rateLimit: rl === true ? {} : rl };
    } else {
      report = { ...report, usage: guard('usageOnError', () => options.usageOnError?.(err)) };
    }
    throw err;
  } finally {
    await CancellationScope.nonCancellable(async () => {
      try {
        await release(permit, report, options);
      } catch (err) {
        let failure = err;
        if (err instanceof ApplicationFailure && err.type === ErrTypeBadRequest) {
          // The report itself was bad (a usage callback's figure): release with usage unknown.
          log.warn('sluice: the release report is bad; releasing with usage unknown', { error: String(err) });
          try {
            await release(permit, { model: report.model }, options);
            return;
          } catch (again) {
            failure = again;
          }
        }
        log.warn('sluice: releasing the permit failed; the gate releases it when its hold lapses or the workflow closes', {
          ticketId: permit.ticket_id,
          error: String(failure),
        });
      }
    });
  }
}

function guard<R>(name: string, f: () => R): R | undefined {
  try {
    return f();
  } catch (err) {
    log.warn(`sluice: options.${name} threw; taking it as undefined`, { error: String(err) });
    return undefined;
  }
}
