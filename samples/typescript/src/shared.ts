// What the workflow and the activity share. Nothing here imports: the workflow bundle takes it in.

/** The model every call names, and the prompt around each document (the Go demo's). */
export const chatModel = 'gpt-4o-mini';
export const systemPrompt = 'You are a careful analyst. You write short, faithful summaries.';
export const instruction = 'Summarise the following document in three sentences:\n\n';

/** The error type of a 429, carrying a RateLimitDetail: not retried by Temporal, released by withSluice. */
export const ProviderRateLimited = 'ProviderRateLimited';

/** One document to summarise. */
export interface Doc {
  id: number;
  text: string;
}

/** What summarize returns: the summary, what the provider counted, and its rate-limit headers. */
export interface Summary {
  id: number;
  text: string;
  usage: { input_tokens: number; output_tokens: number };
  headers: Record<string, string[]>;
}

/** The detail of a ProviderRateLimited failure: what withSluice's rateLimited option returns. */
export interface RateLimitDetail {
  retryAfterMs?: number;
  headers: Record<string, string[]>;
}
