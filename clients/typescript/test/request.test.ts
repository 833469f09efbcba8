import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { ApplicationFailure } from '@temporalio/common';
import { ContractVersion, ErrTypeBadRequest, MaxHoldMS, MaxLimits, MaxTokens, Permit } from '../src/contract';
import { buildAcquireRequest, buildReleaseRequest, normalizeHeaders, positiveMs, SluiceRequest } from '../src/request';

const permit: Permit = {
  version: 1, ticket_id: 7, holder: 'h', release_task_queue: 'sluice-gate/h', limits: ['openai'],
  admitted_at: '2026-01-01T00:00:00Z', expires_at: '2026-01-01T01:00:00Z', waited_ms: 0,
};

// badRequest asserts f throws a non-retryable SluiceBadRequest whose message names field.
function badRequest(f: () => unknown, field: string) {
  assert.throws(f, (err: unknown) => {
    assert.ok(err instanceof ApplicationFailure, `not an ApplicationFailure: ${err}`);
    assert.equal(err.type, ErrTypeBadRequest);
    assert.equal(err.nonRetryable, true);
    assert.match(err.message, new RegExp(`sluice: ${field.replace(/[[\]]/g, '\\$&')} `));
    return true;
  });
}

test('buildAcquireRequest sets the version and leaves zero fields out', () => {
  assert.deepEqual(buildAcquireRequest({ route: 'openai', tokens: 0, model: '', priority: 0, tenant: '' }), {
    version: ContractVersion,
    route: 'openai',
  });
  assert.deepEqual(buildAcquireRequest({ limits: ['a', 'b'], input_tokens: 5, output_tokens: 7 }), {
    version: 1, limits: ['a', 'b'], input_tokens: 5, output_tokens: 7,
  });
  assert.deepEqual(buildAcquireRequest({ limits: ['a'], max_hold_ms: MaxHoldMS, tokens: MaxTokens }), {
    version: 1, limits: ['a'], max_hold_ms: MaxHoldMS, tokens: MaxTokens,
  });
});

test('buildAcquireRequest refuses what the gate refuses, naming the field', () => {
  const cases: Array<[SluiceRequest, string]> = [
    [{}, 'route'],
    [{ route: '', limits: [] }, 'route'],
    [{ route: 'r', version: 2 }, 'version'],
    [{ limits: Array.from({ length: MaxLimits + 1 }, (_, i) => `k${i}`) }, 'limits'],
    [{ limits: ['ok', ''] }, 'limits[1]'],
    [{ route: 'r', tokens: -1 }, 'tokens'],
    [{ route: 'r', tokens: 1.5 }, 'tokens'],
    [{ route: 'r', tokens: MaxTokens + 1 }, 'tokens'],
    [{ route: 'r', input_tokens: Number.NaN }, 'input_tokens'],
    [{ route: 'r', tokens: 3, output_tokens: 1 }, 'tokens'],
    [{ route: 'r', priority: 6 }, 'priority'],
    [{ route: 'r', priority: -1 }, 'priority'],
    [{ route: 'r', max_hold_ms: MaxHoldMS + 1 }, 'max_hold_ms'],
    [{ route: 'r', tenant: 'é'.repeat(101) }, 'tenant'],
    [{ route: 7 as unknown as string }, 'route'],
  ];
  for (const [req, field] of cases) badRequest(() => buildAcquireRequest(req), field);
  badRequest(() => buildAcquireRequest(null as unknown as SluiceRequest), 'request');
});

test('buildReleaseRequest: usage known, unknown, zero, and a 429', () => {
  assert.deepEqual(buildReleaseRequest(permit), { version: 1, permit });
  assert.deepEqual(buildReleaseRequest(permit, { usage: { tokens: 0 } }), { version: 1, permit, tokens: 0 });
  assert.deepEqual(buildReleaseRequest(permit, { usage: { input_tokens: 10 } }), { version: 1, permit, input_tokens: 10 });
  assert.deepEqual(
    buildReleaseRequest(permit, { usage: { tokens: 9 }, rateLimit: { retryAfterMs: 1500.2, headers: { 'Retry-After': '2' } } }),
    { version: 1, permit, rate_limited: true, retry_after_ms: 1501, headers: { 'Retry-After': ['2'] } },
    'a 429 reports no usage: the reservation comes back',
  );
  assert.deepEqual(buildReleaseRequest(permit, { rateLimit: { retryAfterMs: 10 * MaxHoldMS } }).retry_after_ms, MaxHoldMS);
  assert.deepEqual(buildReleaseRequest(permit, { rateLimit: {} }), { version: 1, permit, rate_limited: true });
  badRequest(() => buildReleaseRequest(permit, { usage: { tokens: -1 } }), 'usage.tokens');
  badRequest(() => buildReleaseRequest(permit, { usage: { tokens: 1, input_tokens: 1 } as never }), 'usage.tokens');
  badRequest(() => buildReleaseRequest(permit, { rateLimit: { retryAfterMs: -5 } }), 'retryAfterMs');
  badRequest(() => buildReleaseRequest({ ...permit, ticket_id: 0 }), 'permit.ticket_id');
  badRequest(() => buildReleaseRequest({ ...permit, holder: '' }), 'permit.holder');
});

test('normalizeHeaders makes every value a list and drops empty ones', () => {
  assert.equal(normalizeHeaders(undefined), undefined);
  assert.equal(normalizeHeaders({ a: undefined, b: [] }), undefined);
  assert.deepEqual(normalizeHeaders({ A: '1', b: ['2', '3'], c: undefined }), { A: ['1'], b: ['2', '3'] });
});

test('positiveMs reads durations and refuses bad ones, naming the option', () => {
  assert.equal(positiveMs('maxWait', undefined, '10 minutes'), 600_000);
  assert.equal(positiveMs('maxWait', 250, '10 minutes'), 250);
  assert.equal(positiveMs('maxWait', '2s', '10 minutes'), 2000);
  badRequest(() => positiveMs('maxWait', 0, '1s'), 'maxWait');
  badRequest(() => positiveMs('heartbeatTimeout', -3, '1s'), 'heartbeatTimeout');
  badRequest(() => positiveMs('heartbeatTimeout', 'soon' as never, '1s'), 'heartbeatTimeout');
});
