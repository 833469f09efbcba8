// The sample's workflow: summarise every document at once, each call admitted by the Sluice gate.
import { proxyActivities } from '@temporalio/workflow';
import { applicationFailure, withSluice } from '@sluice/temporal';
import type { createActivities } from './activities';
import { Doc, instruction, ProviderRateLimited, RateLimitDetail, systemPrompt } from './shared';

const { summarize } = proxyActivities<ReturnType<typeof createActivities>>({
  startToCloseTimeout: '1 minute',
  retry: { nonRetryableErrorTypes: [ProviderRateLimited] },
});

/** The input of summarizeAll. */
export interface SummarizeAllInput {
  docs: Doc[];
  /** max_completion_tokens of each call. */
  maxTokens: number;
  /** The gate's route for the provider. */
  route: string;
  /** The gate's task queue. */
  gateTaskQueue: string;
}

/** What summarizeAll returns. */
export interface SummarizeAllOutput {
  completed: number;
  /** The 429s the calls got (each was released as rate limited and the call made again). */
  rateLimited: number;
  /** The tokens the provider reported, input and output. */
  tokens: number;
  /** The longest any call waited in line for its permit, in milliseconds. */
  maxWaitedMs: number;
}

/**
 * What a call may use, at most: its prompt at four characters a token (English prose runs nearer
 * five), the chat framing, and all of max_tokens. The gate reserves this at admission and gives back
 * what the call did not use when withSluice releases the permit with the provider's usage.
 */
export function estimateTokens(doc: Doc, maxTokens: number): number {
  return Math.ceil((systemPrompt.length + instruction.length + doc.text.length) / 4) + 11 + maxTokens;
}

/** Summarises docs concurrently, every provider call through withSluice. */
export async function summarizeAll(input: SummarizeAllInput): Promise<SummarizeAllOutput> {
  const out: SummarizeAllOutput = { completed: 0, rateLimited: 0, tokens: 0, maxWaitedMs: 0 };
  await Promise.all(
    input.docs.map(async (doc) => {
      for (let attempt = 1; ; attempt++) {
        try {
          const s = await withSluice(
            { route: input.route, tokens: estimateTokens(doc, input.maxTokens) },
            (permit) => {
              out.maxWaitedMs = Math.max(out.maxWaitedMs, permit.waited_ms);
              return summarize(doc, input.maxTokens);
            },
            {
              taskQueue: input.gateTaskQueue,
              usage: (r) => r.usage,
              headers: (r) => r.headers,
              rateLimited: (err) => applicationFailure(err, ProviderRateLimited)?.details?.[0] as RateLimitDetail | undefined,
            },
          );
          out.completed++;
          out.tokens += s.usage.input_tokens + s.usage.output_tokens;
          return;
        } catch (err) {
          // A 429 paused the gate's limit for every caller; this call waits in line again.
          if (attempt < 5 && applicationFailure(err, ProviderRateLimited)) {
            out.rateLimited++;
            continue;
          }
          throw err;
        }
      }
    }),
  );
  return out;
}
