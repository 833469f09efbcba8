// The test worker's activity: a call to the "provider", an HTTP server the Go test runs, which
// counts the calls in flight from every language.
import { ApplicationFailure } from '@temporalio/common';
import { Context } from '@temporalio/activity';

/** The type of the error callProvider fails with when the provider answers 429. */
export const ProviderRateLimited = 'ProviderRateLimited';

/** What callProvider sends: who calls, for the provider's records. */
export interface ProviderCall {
  /** The caller's name, e.g. "ts-3". */
  caller: string;
  /** The tokens the caller estimated. */
  tokens?: number;
}

/** What the provider answers: the call's usage. */
export interface ProviderAnswer {
  usage: { input_tokens: number; output_tokens: number };
  headers?: Record<string, string[]>;
}

/** The detail of a ProviderRateLimited failure. */
export interface RateLimitDetail {
  retryAfterMs?: number;
  headers: Record<string, string[]>;
}

export function providerActivities(providerURL: string) {
  return {
    /** Does nothing: the trivial call of the gate's latency benchmark. */
    async noop(): Promise<number> {
      return 0;
    },
    async callProvider(call: ProviderCall): Promise<ProviderAnswer> {
      const info = Context.current().info;
      const res = await fetch(providerURL, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...call, workflow_id: info.workflowExecution?.workflowId, pid: process.pid }),
        signal: Context.current().cancellationSignal,
      });
      const headers: Record<string, string[]> = {};
      res.headers.forEach((v, k) => {
        headers[k] = [v];
      });
      if (res.status === 429) {
        const ra = res.headers.get('retry-after');
        const secs = ra === null ? NaN : Number(ra);
        const detail: RateLimitDetail = { headers, retryAfterMs: Number.isFinite(secs) ? secs * 1000 : undefined };
        throw ApplicationFailure.create({ message: 'provider answered 429', type: ProviderRateLimited, nonRetryable: true, details: [detail] });
      }
      if (!res.ok) throw new Error(`provider answered ${res.status}: ${await res.text()}`);
      const body = (await res.json()) as ProviderAnswer;
      return { usage: body.usage, headers };
    },
  };
}
