import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as c from '../src/contract';
import { buildAcquireRequest, buildReleaseRequest, isAllowanceSpent, ReleaseReport } from '../src/request';
import { ApplicationFailure, ActivityFailure, RetryState } from '@temporalio/common';
import { fixtures } from './fixtures';

// Each type's JSON fields. Record<keyof T, true> makes the compiler check each list against its
// type; the tests check it against the fixtures, which the Go test checks against gate/contract.go.
const acquireFields: Record<keyof c.AcquireRequest, true> = {
  version: true, route: true, limits: true, tokens: true, input_tokens: true, output_tokens: true,
  model: true, priority: true, tenant: true, max_hold_ms: true,
};
const permitFields: Record<keyof c.Permit, true> = {
  version: true, ticket_id: true, holder: true, release_task_queue: true, limits: true,
  admitted_at: true, expires_at: true, waited_ms: true,
};
const releaseFields: Record<keyof c.ReleaseRequest, true> = {
  version: true, permit: true, tokens: true, input_tokens: true, output_tokens: true, model: true,
  rate_limited: true, retry_after_ms: true, headers: true,
};
const resultFields: Record<keyof c.ReleaseResult, true> = { version: true, released: true, reason: true };
const refusalFields: Record<keyof c.Refusal, true> = {
  limit: true, allowance: true, meter: true, currency: true, used: true, amount: true, needs: true,
  reset_at: true, window_start: true, window_end: true, deadline: true, on_spent: true, refundable: true,
};

// Every fixture of prefix has only the type's fields, and together they give every field that a
// request must be able to carry (so a field added in Go, and to a fixture, fails here until added).
function checkFields(prefix: string, fields: Record<string, true>, optionalInFixtures: string[] = []) {
  const seen = new Set<string>();
  for (const [name, obj] of fixtures(prefix)) {
    for (const k of Object.keys(obj)) {
      assert.ok(k in fields, `${name}: field ${JSON.stringify(k)} is not in the TypeScript contract`);
      seen.add(k);
    }
  }
  for (const k of Object.keys(fields)) {
    if (!optionalInFixtures.includes(k)) assert.ok(seen.has(k), `no ${prefix}*.json fixture gives ${k}`);
  }
}

test('fixtures have exactly the contract fields', () => {
  checkFields('acquire_request', acquireFields);
  checkFields('permit', permitFields);
  checkFields('release_request', releaseFields);
  checkFields('release_result', resultFields);
  // A refusal's currency, deadline and refundable are left out when zero; the fixture need not give them.
  checkFields('refusal', refusalFields, ['currency', 'deadline', 'refundable']);
  for (const [name, r] of fixtures('release_request')) {
    for (const k of Object.keys(r.permit as object)) assert.ok(k in permitFields, `${name}: permit.${k}`);
  }
});

test('constants match the Go contract', () => {
  const [k] = [...fixtures('constants').values()];
  assert.deepEqual(k, {
    contract_version: c.ContractVersion,
    acquire_activity: c.AcquireActivity,
    release_activity: c.ReleaseActivity,
    error_types: {
      allowance_spent: c.ErrTypeAllowanceSpent,
      bad_request: c.ErrTypeBadRequest,
      unknown_limit: c.ErrTypeUnknownLimit,
      version: c.ErrTypeVersion,
    },
    reasons: [c.ReasonReleased, c.ReasonLapsed, c.ReasonWorkflowClosed, c.ReasonUnknown],
    max_limits: c.MaxLimits,
    max_hold_ms: c.MaxHoldMS,
    max_tokens: c.MaxTokens,
  });
});

test('buildAcquireRequest round-trips the acquire fixtures', () => {
  for (const [name, r] of fixtures('acquire_request')) {
    const built = buildAcquireRequest(r as unknown as c.AcquireRequest);
    assert.deepEqual(JSON.parse(JSON.stringify(built)), r, name);
  }
});

test('buildReleaseRequest round-trips the release fixtures', () => {
  for (const [name, raw] of fixtures('release_request')) {
    const r = raw as unknown as c.ReleaseRequest;
    const report: ReleaseReport = { model: r.model, headers: r.headers };
    if (r.rate_limited) {
      report.rateLimit = { retryAfterMs: r.retry_after_ms, headers: r.headers };
    } else if (r.tokens !== undefined) {
      report.usage = { tokens: r.tokens };
    } else if (r.input_tokens !== undefined || r.output_tokens !== undefined) {
      report.usage = { input_tokens: r.input_tokens, output_tokens: r.output_tokens };
    }
    const built = buildReleaseRequest(r.permit, report);
    assert.deepEqual(JSON.parse(JSON.stringify(built)), raw, name);
  }
});

test('isAllowanceSpent reads the refusal fixture from an activity failure', () => {
  const [refusal] = [...fixtures('refusal').values()];
  const cause = ApplicationFailure.create({ message: 'spent', type: c.ErrTypeAllowanceSpent, nonRetryable: true, details: [refusal] });
  const err = new ActivityFailure('activity failed', c.AcquireActivity, '1', RetryState.NON_RETRYABLE_FAILURE, 'worker', cause);
  assert.deepEqual(isAllowanceSpent(err), refusal);
  assert.deepEqual(isAllowanceSpent(cause), refusal);
  assert.equal(isAllowanceSpent(new Error('other')), undefined);
  assert.equal(isAllowanceSpent(ApplicationFailure.create({ message: 'x', type: c.ErrTypeBadRequest })), undefined);
  assert.equal(isAllowanceSpent(undefined), undefined);
});
