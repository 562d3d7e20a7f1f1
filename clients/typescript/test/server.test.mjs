// The client against a real server (started by the Go test in this
// directory, typescript_test.go, which passes its URLs in the environment)
// through a proxy that loses answers and injects 503s.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { PaymentsClient, ProblemError, DeclinedError, RetryBudgetExhaustedError, verifyWebhook } from '../src/index.mjs';
import { startFaultProxy } from '../testing/faultproxy.mjs';

const apiURL = process.env.PAYMENTSAPI_URL;
const simURL = process.env.PAYMENTSAPI_SIM_URL;
const apiKey = process.env.PAYMENTSAPI_KEY ?? 'sk_test_demo';
const skip = apiURL && simURL ? false : 'PAYMENTSAPI_URL and PAYMENTSAPI_SIM_URL unset (go test ./clients/typescript/ sets them)';

/** @type {Awaited<ReturnType<typeof startFaultProxy>>} */
let proxy;
/** @type {PaymentsClient} */
let client;
// Letters and digits, never a run of 13 digits (a card number, refused).
const run = `r${Date.now().toString(36)}${process.pid.toString(36)}`;

before(async () => {
  if (skip) return;
  proxy = await startFaultProxy(/** @type {string} */ (apiURL));
  // Short waits: the retries of these tests take milliseconds. The budget
  // covers every retry the tests cause (the last test spends a small one).
  client = new PaymentsClient({ baseUrl: proxy.url, apiKey, retry: { baseDelayMs: 10, maxDelayMs: 50, budget: { ratio: 1, burst: 100 } } });
});
after(async () => { await proxy?.close(); });

/** The simulator's records: its charges or refunds. @param {'charges' | 'refunds'} what */
async function sim(what) {
  const r = await fetch(`${simURL}/_sim/${what}`);
  return /** @type {any[]} */ ((await r.json())[what]);
}

/** @param {string} ref @param {object} [extra] */
function payment(ref, extra = {}) {
  return { accountId: 'acc_ts', amount: '10.00', currency: 'EUR', merchantReference: `${ref}-${run}`, paymentMethod: 'pm_card_visa', ...extra };
}

/**
 * Plans faults for the requests to path: the n-th matching request (0, 1,
 * ...) gets faults[n], later ones pass.
 * @param {string} method @param {RegExp} path @param {import('../testing/faultproxy.mjs').Fault[]} faults
 */
function faultsFor(method, path, faults) {
  let n = 0;
  proxy.plan((req) => (req.method === method && path.test(req.url ?? '') ? faults[n++] ?? 'pass' : 'pass'));
  const from = proxy.seen.length;
  /** the Idempotency-Keys of the matching requests sent since */
  return () => proxy.seen.slice(from).filter((s) => s.method === method && path.test(s.path)).map((s) => s.key);
}

test('a payment whose answers are lost and refused is charged once, under one key', { skip }, async () => {
  const keys = faultsFor('POST', /^\/payments$/, ['drop', '503', 'drop']);
  const res = await client.createPayment(payment('lost'));
  assert.equal(res.status, 201);
  assert.equal(res.attempts, 4);
  assert.equal(res.replayed, true, 'the answer after a lost one is the stored one');
  assert.deepEqual(keys(), Array(4).fill(res.idempotencyKey));
  const charges = (await sim('charges')).filter((c) => c.paymentId === res.payment.paymentId);
  assert.equal(charges.length, 1);
  assert.equal(charges[0].requestCount, 1, 'one create request reached the provider');
});

test("a caller's key is sent on every attempt, never replaced", { skip }, async () => {
  const keys = faultsFor('POST', /^\/payments$/, ['drop', 'drop']);
  const res = await client.createPayment(payment('own-key'), { idempotencyKey: `order-${run}` });
  assert.equal(res.idempotencyKey, `order-${run}`);
  assert.deepEqual(keys(), Array(3).fill(`order-${run}`));
});

test('Payments-Should-Retry: false stops the retries at once', { skip }, async () => {
  const keys = faultsFor('POST', /^\/payments$/, ['503-no-retry']);
  await assert.rejects(client.createPayment(payment('no-retry')), (err) => {
    assert.ok(err instanceof ProblemError);
    assert.equal(err.status, 503);
    assert.equal(err.shouldRetry, false);
    assert.equal(err.attempts, 1);
    return true;
  });
  assert.equal(keys().length, 1);
});

test('a 4xx is never retried, and its code is typed', { skip }, async () => {
  const keys = faultsFor('POST', /^\/payments$/, []);
  await assert.rejects(client.createPayment(payment('bad', { amount: '-1' })), (err) => {
    assert.ok(err instanceof ProblemError);
    assert.equal(err.code, 'VALIDATION_FAILED');
    assert.equal(err.attempts, 1);
    return true;
  });
  assert.equal(keys().length, 1);
});

test('a decline is final: a DeclinedError after one attempt', { skip }, async () => {
  faultsFor('POST', /^\/payments$/, []);
  await assert.rejects(client.createPayment(payment('declined', { paymentMethod: 'pm_card_chargeDeclined' })), (err) => {
    assert.ok(err instanceof DeclinedError);
    assert.equal(err.code, 'PAYMENT_DECLINED');
    assert.equal(err.declineCode, 'generic_decline');
    assert.equal(err.attempts, 1);
    return true;
  });
});

test('a retry that finds the original in flight (409 IDEMPOTENCY_KEY_IN_USE) waits for its answer', { skip }, async () => {
  faultsFor('POST', /^\/payments$/, []);
  const body = payment('in-flight', { paymentMethod: 'pm_sim_slow' });
  const idempotencyKey = `slow-${run}`;
  const first = client.createPayment(body, { idempotencyKey });
  await new Promise((r) => setTimeout(r, 150));
  const second = await client.createPayment(body, { idempotencyKey });
  const res = await first;
  assert.equal(second.payment.paymentId, res.payment.paymentId);
  assert.ok(second.attempts > 1, 'the second call met the key in use and retried');
  assert.equal((await sim('charges')).filter((c) => c.paymentId === res.payment.paymentId).length, 1);
});

test('a refund, a capture and a cancel whose answers are lost each act once', { skip }, async () => {
  faultsFor('POST', /^\/payments$/, []);
  const paid = await client.createPayment(payment('refund-me'));
  let keys = faultsFor('POST', /\/refunds$/, ['drop', '503']);
  const refunded = await client.refund(paid.payment.paymentId, { amount: '3.00', reason: 'requested_by_customer' });
  assert.equal(refunded.status, 201);
  assert.deepEqual(keys(), Array(3).fill(refunded.idempotencyKey));
  assert.equal((await sim('refunds')).filter((r) => r.refundId === refunded.refund.refundId).length, 1);

  faultsFor('POST', /^\/payments$/, []);
  const held = await client.createPayment(payment('capture-me', { captureMethod: 'manual' }));
  assert.equal(held.payment.status, 'REQUIRES_CAPTURE');
  keys = faultsFor('POST', /\/capture$/, ['drop', 'drop']);
  const captured = await client.capture(held.payment.paymentId, { amount: '8.00' });
  assert.equal(captured.payment.status, 'SUCCEEDED');
  assert.deepEqual(keys(), Array(3).fill(captured.idempotencyKey));
  const [charge] = (await sim('charges')).filter((c) => c.paymentId === held.payment.paymentId);
  assert.equal(charge.captureRequestCount, 1);
  assert.equal(charge.amountCaptured, '8.00');

  faultsFor('POST', /^\/payments$/, []);
  const toCancel = await client.createPayment(payment('cancel-me', { captureMethod: 'manual' }));
  keys = faultsFor('POST', /\/cancel$/, ['drop']);
  const canceled = await client.cancel(toCancel.payment.paymentId, { reason: 'requested_by_customer' });
  assert.equal(canceled.payment.status, 'CANCELED');
  assert.deepEqual(keys(), Array(2).fill(canceled.idempotencyKey));
  const [voided] = (await sim('charges')).filter((c) => c.paymentId === toCancel.payment.paymentId);
  assert.equal(voided.voidRequestCount, 1);

  const got = await client.getPayment(toCancel.payment.paymentId);
  assert.equal(got.status, 'CANCELED');
  await assert.rejects(client.getPayment('pay_nothing'), (err) => err instanceof ProblemError && err.code === 'NOT_FOUND');
});

test('listPayments pages through every payment with an async iterator', { skip }, async () => {
  faultsFor('GET', /^\/payments\?/, ['503']);
  const accountId = `acc_pages_${process.pid}`;
  const made = [];
  for (let i = 0; i < 5; i++) made.push((await client.createPayment(payment(`page-${i}`, { accountId }))).payment.paymentId);
  const seen = [];
  for await (const p of client.listPayments({ accountId, limit: 2 })) seen.push(p.paymentId);
  assert.deepEqual(seen.sort(), made.sort());
  assert.ok(proxy.seen.filter((s) => s.path.includes('cursor=')).length >= 2, 'it followed nextCursor');
});

test('events are listed and read', { skip }, async () => {
  faultsFor('GET', /^\/events/, ['503']);
  const paid = await client.createPayment(payment('events'));
  let found;
  for await (const e of client.listEvents({ limit: 50 })) {
    if (/** @type {any} */ (e.data)?.paymentId === paid.payment.paymentId) { found = e; break; }
  }
  assert.ok(found, 'the payment has an event');
  const one = await client.getEvent(found.eventId);
  assert.equal(one.eventId, found.eventId);
});

test('a webhook endpoint is created once though its answer is lost, listed and deleted', { skip }, async () => {
  const keys = faultsFor('POST', /^\/webhook-endpoints$/, ['drop']);
  const url = `https://example.com/hooks/${run}`;
  const created = await client.createWebhookEndpoint({ url, eventTypes: ['payment.succeeded'] });
  assert.equal(created.replayed, true);
  assert.match(created.endpoint.secret ?? '', /^whsec_/, 'the replay is completed with the secret');
  assert.deepEqual(keys(), Array(2).fill(created.idempotencyKey));
  const mine = (await client.listWebhookEndpoints()).filter((e) => e.url === url);
  assert.equal(mine.length, 1);
  await client.deleteWebhookEndpoint(created.endpoint.endpointId);
  assert.equal((await client.listWebhookEndpoints()).filter((e) => e.url === url).length, 0);
});

test('a payment whose customer must authenticate exposes nextAction.url, gone once the customer approved', { skip }, async () => {
  const res = await client.createPayment(payment('3ds', { paymentMethod: 'pm_card_threeDSecureRequired' }));
  assert.equal(res.status, 201);
  assert.equal(res.payment.status, 'REQUIRES_ACTION');
  assert.equal(res.payment.nextAction?.type, 'redirect');
  const page = new URL(res.payment.nextAction?.url ?? '');
  assert.equal(page.origin, new URL(/** @type {string} */ (simURL)).origin, "the provider's challenge page");
  assert.match(page.pathname, /^\/challenge\//);
  assert.deepEqual((await client.getPayment(res.payment.paymentId)).nextAction, res.payment.nextAction);

  // The customer presses Approve; the provider sends them to the
  // service's return route, which settles the payment.
  const pressed = await fetch(page, { method: 'POST', body: new URLSearchParams({ action: 'approve' }), redirect: 'manual' });
  assert.equal(pressed.status, 303);
  const back = new URL(pressed.headers.get('Location') ?? '', page);
  assert.equal(back.pathname, `/payments/${res.payment.paymentId}/return`);
  assert.equal((await fetch(back, { redirect: 'manual' })).status, 200);
  const settled = await client.getPayment(res.payment.paymentId);
  assert.equal(settled.status, 'SUCCEEDED');
  assert.equal(settled.nextAction, undefined);
});

test('a delivery the Go side signed verifies, and a tampered one does not', { skip: process.env.PAYMENTSAPI_SIGNED_WEBHOOK ? false : 'PAYMENTSAPI_SIGNED_WEBHOOK unset' }, () => {
  const signed = JSON.parse(/** @type {string} */ (process.env.PAYMENTSAPI_SIGNED_WEBHOOK));
  const msg = verifyWebhook({ secret: signed.secret, headers: signed.headers, body: signed.body });
  assert.equal(msg.id, signed.headers['webhook-id']);
  assert.equal(msg.type, 'payment.succeeded');
  // The second secret of a rotation verifies too.
  verifyWebhook({ secret: signed.secondSecret, headers: signed.headers, body: signed.body });
  assert.throws(() => verifyWebhook({ secret: signed.secret, headers: signed.headers, body: signed.body.replace('10.00', '99.00') }), /no signature matches/);
  assert.throws(() => verifyWebhook({ secret: signed.secret, headers: signed.headers, body: signed.body, nowSeconds: Number(signed.headers['webhook-timestamp']) + 301 }), /tolerance/);
});

test('an empty retry budget ends the call with its last failure', { skip }, async () => {
  const frugal = new PaymentsClient({ baseUrl: proxy.url, apiKey, retry: { baseDelayMs: 10, budget: { ratio: 0, burst: 1 } } });
  const keys = faultsFor('POST', /^\/payments$/, ['drop', 'drop', 'drop']);
  await assert.rejects(frugal.createPayment(payment('budget')), (err) => {
    assert.ok(err instanceof RetryBudgetExhaustedError);
    return true;
  });
  assert.equal(keys().length, 2, 'one retry, the one token of the budget');
});
