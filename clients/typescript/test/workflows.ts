// The test worker's workflows, bundled by the worker: what a user's workflow does with the client.
import { condition, proxyActivities } from '@temporalio/workflow';
import { acquire, applicationFailure, isAllowanceSpent, Permit, SluiceRequest, withSluice } from '../src/workflow';
import type { providerActivities, RateLimitDetail } from './activities';

// provider is the provider's activity, its StartToClose timeout callTimeoutMs (default a minute):
// a test that kills the worker running it sets a short one, so that the call is retried on another.
function provider(callTimeoutMs?: number) {
  return proxyActivities<ReturnType<typeof providerActivities>>({
    startToCloseTimeout: callTimeoutMs ?? '1 minute',
    retry: { initialInterval: '100 ms', maximumAttempts: 5, nonRetryableErrorTypes: ['ProviderRateLimited'] },
  });
}

/** The input of the test workflows. */
export interface LLMCallInput {
  /** What to acquire. */
  request: SluiceRequest;
  /** The gate's task queue; absent: the default. */
  gateTaskQueue?: string;
  /** The caller's name, sent to the provider. */
  caller: string;
  /** The Release's ScheduleToStart timeout in milliseconds; absent: the default. */
  releaseScheduleToStartMs?: number;
  /** The provider call's StartToClose timeout in milliseconds; absent: a minute. */
  callTimeoutMs?: number;
}

/** What llmCall returns. */
export interface LLMCallOutput {
  permit?: Permit;
  usage?: { input_tokens: number; output_tokens: number };
  /** The error type when the call failed: ProviderRateLimited, SluiceAllowanceSpent, ... */
  error?: string;
  refusal?: unknown;
}

/** One call to the provider under Sluice's admission, its usage reported. */
export async function llmCall(input: LLMCallInput): Promise<LLMCallOutput> {
  let permit: Permit | undefined;
  const { callProvider } = provider(input.callTimeoutMs);
  try {
    const answer = await withSluice(
      input.request,
      (p) => {
        permit = p;
        return callProvider({ caller: input.caller, tokens: input.request.tokens });
      },
      {
        taskQueue: input.gateTaskQueue,
        releaseScheduleToStart: input.releaseScheduleToStartMs,
        usage: (a) => a.usage,
        headers: (a) => a.headers,
        rateLimited: (err) => applicationFailure(err, 'ProviderRateLimited')?.details?.[0] as RateLimitDetail | undefined,
      },
    );
    return { permit, usage: answer.usage };
  } catch (err) {
    const refusal = isAllowanceSpent(err);
    const f = applicationFailure(err);
    if (refusal || f?.type === 'ProviderRateLimited') {
      return { permit, error: f?.type ?? undefined, refusal };
    }
    throw err;
  }
}

/** Acquires a permit and then waits forever, holding it: the test terminates or cancels it. */
export async function acquireAndHold(input: LLMCallInput): Promise<never> {
  await acquire(input.request, { taskQueue: input.gateTaskQueue });
  await condition(() => false);
  throw new Error('unreachable');
}

/**
 * Acquires under withSluice and then waits forever inside the call: cancelling it still releases,
 * reporting that the call used nothing.
 */
export async function holdInCall(input: LLMCallInput): Promise<void> {
  await withSluice(input.request, () => condition(() => false), {
    taskQueue: input.gateTaskQueue,
    usageOnError: () => ({ tokens: 0 }),
  });
}

/** The input of latency. */
export interface LatencyInput {
  /** What each gated call acquires: a limit that does not bind. */
  request: SluiceRequest;
  gateTaskQueue?: string;
  /** How many calls of each kind. */
  calls: number;
}

/**
 * The gate's latency benchmark (gate's BenchmarkGate_TypeScriptLatency): calls of a trivial
 * activity, one at a time, alternately bare and through withSluice, which the benchmark then reads
 * from the history's event timestamps.
 */
export async function latency(input: LatencyInput): Promise<void> {
  const { noop } = proxyActivities<ReturnType<typeof providerActivities>>({ startToCloseTimeout: '1 minute' });
  for (let i = 0; i < input.calls; i++) {
    await noop();
    await withSluice(input.request, () => noop(), { taskQueue: input.gateTaskQueue, usage: () => ({ tokens: 0 }) });
  }
}
