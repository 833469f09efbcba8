// The sample's activity: one chat completion from an OpenAI-compatible API (the demo's fake
// provider), with plain fetch. It does not know about Sluice: the workflow wraps it in withSluice.
import { ApplicationFailure } from '@temporalio/common';
import { Context } from '@temporalio/activity';
import { chatModel, Doc, instruction, ProviderRateLimited, RateLimitDetail, Summary, systemPrompt } from './shared';

interface ChatCompletion {
  choices: { message: { content: string } }[];
  usage: { prompt_tokens: number; completion_tokens: number };
}

/** The activities, calling the provider at baseURL (ending in /v1/). */
export function createActivities(baseURL: string) {
  return {
    async summarize(doc: Doc, maxTokens: number): Promise<Summary> {
      const res = await fetch(new URL('chat/completions', baseURL), {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer fake' },
        body: JSON.stringify({
          model: chatModel,
          max_completion_tokens: maxTokens,
          messages: [
            { role: 'system', content: systemPrompt },
            { role: 'user', content: instruction + doc.text },
          ],
        }),
        signal: Context.current().cancellationSignal,
      });
      // The provider's rate-limit headers (x-ratelimit-*, retry-after): the gate learns from them.
      const headers: Record<string, string[]> = {};
      res.headers.forEach((v, k) => {
        if (k.startsWith('x-ratelimit-') || k.startsWith('retry-after')) headers[k] = [v];
      });
      if (res.status === 429) {
        const ms = Number(res.headers.get('retry-after-ms'));
        const detail: RateLimitDetail = { headers, retryAfterMs: Number.isFinite(ms) && ms > 0 ? ms : undefined };
        throw ApplicationFailure.create({ message: 'the provider answered 429', type: ProviderRateLimited, nonRetryable: true, details: [detail] });
      }
      if (!res.ok) throw new Error(`the provider answered ${res.status}: ${await res.text()}`);
      const body = (await res.json()) as ChatCompletion;
      return {
        id: doc.id,
        text: body.choices[0]?.message.content ?? '',
        usage: { input_tokens: body.usage.prompt_tokens, output_tokens: body.usage.completion_tokens },
        headers,
      };
    },
  };
}
