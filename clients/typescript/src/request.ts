/**
 * The pure parts of the client: building and checking the gate's requests, and reading its
 * failures. Nothing here schedules anything, so it runs (and is tested) outside a workflow.
 */
import { ApplicationFailure, TemporalFailure } from '@temporalio/common';
import { msToNumber, type Duration } from '@temporalio/common/lib/time';
import {
  AcquireRequest,
  ContractVersion,
  ErrTypeAllowanceSpent,
  ErrTypeBadRequest,
  MaxHoldMS,
  MaxLimits,
  MaxTokens,
  Permit,
  Refusal,
  ReleaseRequest,
  Usage,
} from './contract';

/** What to acquire: an AcquireRequest whose version may be left out (it is ContractVersion). */
export type SluiceRequest = Omit<AcquireRequest, 'version'> & { version?: number };

/** A provider's 429, as a release reports it. */
export interface RateLimit {
  /** The provider's Retry-After in milliseconds; absent: the headers' or one second. */
  retryAfterMs?: number;
  /** The provider's response headers. */
  headers?: Headers;
}

/** Response headers, names in any case, one value or several. */
export type Headers = Record<string, string | readonly string[] | undefined>;

/** What a release reports about the call. */
export interface ReleaseReport {
  /** What the call used; absent means not known (the reservation is kept as spent). */
  usage?: Usage;
  /** Prices the usage when it is not the request's model. */
  model?: string;
  /** The provider answered 429. */
  rateLimit?: RateLimit;
  /** The provider's response headers, for the gate's header learning. */
  headers?: Headers;
}

/** The error a bad request or option gets: a non-retryable SluiceBadRequest naming the field. */
export function badRequest(field: string, value: unknown, why: string): ApplicationFailure {
  return ApplicationFailure.create({
    message: `sluice: ${field} ${show(value)}: ${why}`,
    type: ErrTypeBadRequest,
    nonRetryable: true,
  });
}

function show(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v);
  if (typeof v === 'number' || typeof v === 'boolean' || v === undefined || v === null) return String(v);
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}

function checkCount(field: string, v: unknown, max: number, min = 0): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw badRequest(field, v, `must be an integer from ${min} to ${max}`);
  }
  return v;
}

/**
 * The AcquireRequest of r, checked as the gate checks it (so that a mistake fails at once, naming
 * the field, rather than after a round trip). Zero and empty fields are left out, as Go leaves them.
 */
export function buildAcquireRequest(r: SluiceRequest): AcquireRequest {
  if (r === null || typeof r !== 'object') throw badRequest('request', r, 'must be an object');
  const version = r.version ?? ContractVersion;
  if (version !== ContractVersion) {
    throw badRequest('version', version, `this client speaks version ${ContractVersion}`);
  }
  const out: AcquireRequest = { version };
  if (r.route !== undefined && typeof r.route !== 'string') throw badRequest('route', r.route, 'must be a string');
  if (r.route) out.route = r.route;
  if (r.limits !== undefined) {
    if (!Array.isArray(r.limits)) throw badRequest('limits', r.limits, 'must be an array of limit keys');
    if (r.limits.length > MaxLimits) throw badRequest('limits', r.limits.length, `at most ${MaxLimits} keys`);
    r.limits.forEach((k, i) => {
      if (typeof k !== 'string' || k === '') throw badRequest(`limits[${i}]`, k, 'must be a non-empty limit key');
    });
    if (r.limits.length > 0) out.limits = [...r.limits];
  }
  if (!out.route && !out.limits) throw badRequest('route', r.route ?? '', 'give a route or limits');
  const tokens = checkCount('tokens', r.tokens, MaxTokens);
  const input = checkCount('input_tokens', r.input_tokens, MaxTokens);
  const output = checkCount('output_tokens', r.output_tokens, MaxTokens);
  if (tokens && (input || output)) {
    throw badRequest('tokens', tokens, 'give tokens, or input_tokens and output_tokens, not both');
  }
  if (tokens) out.tokens = tokens;
  if (input) out.input_tokens = input;
  if (output) out.output_tokens = output;
  if (r.model !== undefined && typeof r.model !== 'string') throw badRequest('model', r.model, 'must be a string');
  if (r.model) out.model = r.model;
  const priority = checkCount('priority', r.priority, 5);
  if (priority) out.priority = priority;
  if (r.tenant !== undefined) {
    if (typeof r.tenant !== 'string') throw badRequest('tenant', r.tenant, 'must be a string');
    const bytes = utf8Length(r.tenant);
    if (bytes > 200) throw badRequest('tenant', `of ${bytes} bytes`, 'must be at most 200 bytes');
    if (r.tenant) out.tenant = r.tenant;
  }
  const hold = checkCount('max_hold_ms', r.max_hold_ms, MaxHoldMS);
  if (hold) out.max_hold_ms = hold;
  return out;
}

function utf8Length(s: string): number {
  let n = 0;
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    n += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
  }
  return n;
}

/**
 * The ReleaseRequest that gives permit back with what report says. A usage figure that is not an
 * integer from 0 to MaxTokens is a SluiceBadRequest; a Retry-After is rounded up and capped at
 * MaxHoldMS.
 */
export function buildReleaseRequest(permit: Permit, report: ReleaseReport = {}): ReleaseRequest {
  if (permit === null || typeof permit !== 'object') throw badRequest('permit', permit, 'must be the Permit Acquire returned');
  if (typeof permit.ticket_id !== 'number' || permit.ticket_id <= 0) {
    throw badRequest('permit.ticket_id', permit.ticket_id, 'must be the ticket_id of a permit Acquire returned');
  }
  if (typeof permit.holder !== 'string' || permit.holder === '') {
    throw badRequest('permit.holder', permit.holder, 'must be the holder of a permit Acquire returned');
  }
  const out: ReleaseRequest = { version: ContractVersion, permit };
  if (report.rateLimit) {
    // A 429 gives the reservation back: what the call used does not matter.
    out.rate_limited = true;
    const ra = report.rateLimit.retryAfterMs;
    if (ra !== undefined) {
      if (typeof ra !== 'number' || Number.isNaN(ra) || ra < 0) {
        throw badRequest('retryAfterMs', ra, 'must be a number of milliseconds, 0 or more');
      }
      const ms = Math.min(Math.ceil(ra), MaxHoldMS);
      if (ms > 0) out.retry_after_ms = ms;
    }
  } else if (report.usage) {
    const u = report.usage as { tokens?: number; input_tokens?: number; output_tokens?: number };
    const tokens = checkCount('usage.tokens', u.tokens, MaxTokens);
    const input = checkCount('usage.input_tokens', u.input_tokens, MaxTokens);
    const output = checkCount('usage.output_tokens', u.output_tokens, MaxTokens);
    if (tokens !== undefined && (input !== undefined || output !== undefined)) {
      throw badRequest('usage.tokens', tokens, 'give tokens, or input_tokens and output_tokens, not both');
    }
    if (tokens !== undefined) out.tokens = tokens;
    if (input !== undefined) out.input_tokens = input;
    if (output !== undefined) out.output_tokens = output;
  }
  if (report.model) out.model = report.model;
  const headers = normalizeHeaders(report.rateLimit?.headers ?? report.headers);
  if (headers) out.headers = headers;
  return out;
}

/** h as the contract's headers (every value a list), or undefined when it has none. */
export function normalizeHeaders(h: Headers | undefined): Record<string, string[]> | undefined {
  if (!h) return undefined;
  const out: Record<string, string[]> = {};
  let any = false;
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined) continue;
    const vs = typeof v === 'string' ? [v] : [...v].map(String);
    if (vs.length === 0) continue;
    out[k] = vs;
    any = true;
  }
  return any ? out : undefined;
}

/** d in milliseconds, checked to be a positive duration; field names it in the error. */
export function positiveMs(field: string, d: Duration | undefined, dflt: Duration): number {
  const v = d ?? dflt;
  let ms: number;
  try {
    ms = msToNumber(v);
  } catch {
    throw badRequest(field, v, 'must be a duration such as "30 seconds" or a number of milliseconds');
  }
  if (!Number.isFinite(ms) || ms <= 0) throw badRequest(field, v, 'must be a positive duration');
  return ms;
}

/**
 * The first ApplicationFailure of type (any type when absent) in err's chain of causes: an
 * activity's failure arrives in a workflow as an ActivityFailure whose cause is the activity's.
 */
export function applicationFailure(err: unknown, type?: string): ApplicationFailure | undefined {
  for (let e: unknown = err, depth = 0; e && depth < 20; depth++) {
    if (e instanceof ApplicationFailure && (type === undefined || e.type === type)) return e;
    e = e instanceof TemporalFailure || e instanceof Error ? (e as Error).cause : undefined;
  }
  return undefined;
}

/**
 * The refusal when err is (or was caused by) a gate's SluiceAllowanceSpent failure: an allowance
 * refused the call rather than let it wait. Undefined otherwise.
 */
export function isAllowanceSpent(err: unknown): Refusal | undefined {
  const f = applicationFailure(err, ErrTypeAllowanceSpent);
  if (!f) return undefined;
  const d = f.details?.[0];
  if (d && typeof d === 'object') return d as Refusal;
  // The detail did not decode: the refusal is still a refusal, known only by its message.
  return { limit: '', allowance: '', meter: 'requests', used: 0, amount: 0, needs: 0 };
}
