// The retry layer alone, over a scripted fetch: which answers it retries,
// how long it waits, and that every attempt carries the call's one key.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PaymentsClient, ProblemError } from '../src/index.mjs';
import { backoffMs, defaultRetryPolicy, parseRetryAfterMs } from '../src/retry.mjs';

/**
 * A client whose fetch answers from script (a Response, or an Error to
 * throw), recording each request and each wait.
 * @param {(Response | Error)[]} script @param {number} [random]
 */
function scripted(script, random = 0.5) {
  /** @type {Request[]} */ const requests = [];
  /** @type {number[]} */ const waits = [];
  const client = new PaymentsClient({
    baseUrl: 'http://api.invalid', apiKey: 'sk_test_x',
    fetch: async (req) => {
      requests.push(req);
      const next = script.shift() ?? new Response('{}', { status: 500 });
      if (next instanceof Error) throw next;
      return next;
    },
    sleep: async (ms) => { waits.push(ms); },
    random: () => random,
  });
  return { client, requests, waits };
}

/** @param {number} status @param {string} code @param {Record<string, string>} [headers] */
const problem = (status, code, headers = {}) => new Response(JSON.stringify({ type: 'about:blank', title: 't', status, detail: 'd', code }),
  { status, headers: { 'Content-Type': 'application/problem+json', ...headers } });
const created = () => new Response(JSON.stringify({ paymentId: 'pay_1', status: 'SUCCEEDED' }), { status: 201, headers: { 'Content-Type': 'application/json' } });
const body = { accountId: 'a', amount: '1.00', currency: 'EUR', merchantReference: 'r', paymentMethod: 'pm_card_visa' };

test('full jitter: the wait before retry n is uniform below min(max, base·2^(n-1))', () => {
  const p = defaultRetryPolicy;
  assert.equal(backoffMs(p, 1, 0), 0);
  assert.equal(backoffMs(p, 1, 0.5), 125);
  assert.equal(backoffMs(p, 3, 0.5), 500);
  assert.equal(backoffMs(p, 10, 0.5), 2500, 'capped at maxDelayMs');
});

test('Retry-After is read as seconds or an HTTP date', () => {
  assert.equal(parseRetryAfterMs('3', 0), 3000);
  assert.equal(parseRetryAfterMs(new Date(10000).toUTCString(), 4000), 6000);
  assert.equal(parseRetryAfterMs('soon', 0), 0);
  assert.equal(parseRetryAfterMs(null, 0), 0);
});

test('transport errors, 5xx, 429 and 409 IDEMPOTENCY_KEY_IN_USE are retried under one key, after Retry-After', async () => {
  const { client, requests, waits } = scripted([
    new TypeError('fetch failed'), problem(500, 'INTERNAL'), problem(429, 'RATE_LIMITED', { 'Retry-After': '2' }),
    problem(409, 'IDEMPOTENCY_KEY_IN_USE'), created(),
  ]);
  const res = await client.createPayment(body);
  assert.equal(res.attempts, 5);
  assert.deepEqual(requests.map((r) => r.headers.get('Idempotency-Key')), Array(5).fill(res.idempotencyKey));
  assert.ok(waits[2] >= 2000, `waited ${waits[2]} ms after Retry-After: 2`);
});

test('another 4xx is never retried without the header', async () => {
  const { client, requests } = scripted([problem(409, 'DUPLICATE_MERCHANT_REFERENCE')]);
  await assert.rejects(client.createPayment(body), (err) => err instanceof ProblemError && err.code === 'DUPLICATE_MERCHANT_REFERENCE');
  assert.equal(requests.length, 1);
});

test('Payments-Should-Retry overrides the status: false stops a 500, true retries a 4xx', async () => {
  let s = scripted([problem(500, 'INTERNAL', { 'Payments-Should-Retry': 'false' })]);
  await assert.rejects(s.client.createPayment(body), (err) => err instanceof ProblemError && err.status === 500 && !err.shouldRetry);
  assert.equal(s.requests.length, 1);
  s = scripted([problem(409, 'SOMETHING_NEW', { 'Payments-Should-Retry': 'true' }), created()]);
  assert.equal((await s.client.createPayment(body)).attempts, 2);
});

test('a Retry-After beyond maxRetryAfterMs ends the call with that answer', async () => {
  const { client, requests } = scripted([problem(503, 'SERVICE_UNAVAILABLE', { 'Retry-After': '3600' })]);
  await assert.rejects(client.createPayment(body), (err) => err instanceof ProblemError && err.status === 503);
  assert.equal(requests.length, 1);
});

test('a 202 to a call under a key is asked again until resolved, or returned after the last attempt', async () => {
  const processing = () => new Response(JSON.stringify({ paymentId: 'pay_1', status: 'PROCESSING' }), { status: 202, headers: { 'Content-Type': 'application/json', 'Retry-After': '1' } });
  const { client, requests } = scripted([processing(), processing(), processing(), processing(), processing()]);
  const res = await client.createPayment(body);
  assert.equal(res.status, 202);
  assert.equal(res.payment.status, 'PROCESSING');
  assert.equal(requests.length, defaultRetryPolicy.maxAttempts);
});
