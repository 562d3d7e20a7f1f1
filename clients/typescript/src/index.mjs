// @paymentsapi/client: the payments API over openapi-fetch, with its types
// generated from api/openapi.yaml (src/schema.d.ts) and every call retried
// by the one retry layer (src/retry.mjs).
import createClient from 'openapi-fetch';
import {
  RetryBudget, defaultRetryPolicy, retryingFetch, shouldRetryHeader, sleep,
} from './retry.mjs';

export { defaultRetryPolicy, RetryBudgetExhaustedError, shouldRetryHeader } from './retry.mjs';
export { verifyWebhook, WebhookVerificationError } from './webhooks.mjs';

/** @typedef {import('./schema.js').paths} paths */
/** @typedef {import('./schema.js').components['schemas']} schemas */
/** @typedef {schemas['Payment']} Payment */
/** @typedef {schemas['PaymentList']} PaymentList */
/** @typedef {schemas['CreatePaymentRequest']} CreatePaymentRequest */
/** @typedef {schemas['CapturePaymentRequest']} CapturePaymentRequest */
/** @typedef {schemas['CancelPaymentRequest']} CancelPaymentRequest */
/** @typedef {schemas['CreateRefundRequest']} CreateRefundRequest */
/** @typedef {schemas['Refund']} Refund */
/** @typedef {schemas['Event']} Event */
/** @typedef {schemas['EventList']} EventList */
/** @typedef {schemas['WebhookEndpoint']} WebhookEndpoint */
/** @typedef {schemas['WebhookEndpointWithSecret']} WebhookEndpointWithSecret */
/** @typedef {schemas['CreateWebhookEndpointRequest']} CreateWebhookEndpointRequest */
/** @typedef {schemas['Problem']} Problem */
/** @typedef {import('./retry.mjs').RetryPolicy} RetryPolicy */
/** @typedef {NonNullable<paths['/payments']['get']['parameters']['query']>} ListPaymentsQuery */
/** @typedef {NonNullable<paths['/events']['get']['parameters']['query']>} ListEventsQuery */

/**
 * @typedef {object} Outcome how a call under an idempotency key ended
 * @property {number} status 201 or 200; 202 when the outcome was still unknown after the last
 *   attempt (money may have moved: call again with the same key, or get the resource later)
 * @property {boolean} replayed the answer was the one stored for an earlier attempt with the key
 * @property {string} idempotencyKey the key every attempt carried
 * @property {number} attempts
 */

/**
 * @typedef {object} CallOptions
 * @property {string} [idempotencyKey] the key of every attempt; a fresh one when absent. Pass
 *   the key of an operation begun earlier (stored before the call) to resume it.
 * @property {AbortSignal} [signal]
 */

/**
 * An error answer: its status and problem, with the stable `code` to branch on.
 */
export class ProblemError extends Error {
  /**
   * @param {number} status @param {Problem} problem @param {Headers} headers
   * @param {{attempts: number, idempotencyKey?: string}} call
   */
  constructor(status, problem, headers, call) {
    super(`${status} ${problem.code}: ${problem.detail}`);
    this.name = 'ProblemError';
    /** @type {number} */ this.status = status;
    /** @type {Problem['code']} */ this.code = problem.code;
    /** @type {Problem & Record<string, unknown>} */ this.problem = problem;
    /** @type {boolean} the server's Payments-Should-Retry: true when the same call may still succeed */
    this.shouldRetry = headers.get(shouldRetryHeader) === 'true';
    this.attempts = call.attempts;
    this.idempotencyKey = call.idempotencyKey;
  }
}

/** A 402: the provider declined (PAYMENT_DECLINED, CAPTURE_DECLINED, REFUND_DECLINED). Final. */
export class DeclinedError extends ProblemError {
  /** @param {ConstructorParameters<typeof ProblemError>} args */
  constructor(...args) {
    super(...args);
    this.name = 'DeclinedError';
    /** @type {string | undefined} */
    this.declineCode = /** @type {any} */ (this.problem).declineCode;
  }
}

/** A fresh idempotency key (a version 4 UUID). */
export function newIdempotencyKey() {
  return globalThis.crypto.randomUUID();
}

/**
 * @typedef {object} ClientOptions
 * @property {string} baseUrl e.g. http://127.0.0.1:8080
 * @property {string} apiKey the bearer secret, e.g. sk_test_demo
 * @property {Partial<RetryPolicy>} [retry] changes to defaultRetryPolicy
 * @property {typeof fetch} [fetch]
 * @property {() => number} [random] uniform in [0, 1), for the jitter (tests)
 * @property {(ms: number, signal?: AbortSignal) => Promise<void>} [sleep] (tests)
 */

export class PaymentsClient {
  /** @type {import('openapi-fetch').Client<paths>} */
  #api;
  #deps;

  /** @param {ClientOptions} o */
  constructor(o) {
    const policy = { ...defaultRetryPolicy, ...o.retry };
    this.#deps = {
      policy,
      budget: new RetryBudget(policy.budget),
      fetch: o.fetch ?? globalThis.fetch,
      sleep: o.sleep ?? sleep,
      random: o.random ?? Math.random,
      now: Date.now,
    };
    this.#api = createClient(/** @type {import('openapi-fetch').ClientOptions} */ ({
      baseUrl: o.baseUrl.replace(/\/+$/, ''),
      headers: { Authorization: `Bearer ${o.apiKey}` },
      // The API takes a list as one comma-separated parameter (status=A,B).
      querySerializer: { array: { style: 'form', explode: false } },
    }));
  }

  /**
   * Sends one call through the retry layer and returns its data, or throws
   * the problem it ended with.
   * @template T
   * @param {(fetch: (r: Request) => Promise<Response>) => Promise<{data?: T, error?: any, response: Response}>} send
   * @param {{signal?: AbortSignal, idempotencyKey?: string}} call
   * @returns {Promise<{data: T, response: Response, attempts: number}>}
   */
  async #call(send, call) {
    const attempts = { count: 0, keys: /** @type {string[]} */ ([]) };
    const { data, error, response } = await send(retryingFetch(this.#deps, attempts, call.signal));
    if (!response.ok) {
      const problem = error && typeof error === 'object' && 'code' in error ? error
        : { type: 'about:blank', title: response.statusText, status: response.status, detail: String(error ?? ''), code: 'INTERNAL' };
      const info = { attempts: attempts.count, idempotencyKey: call.idempotencyKey };
      throw response.status === 402
        ? new DeclinedError(response.status, problem, response.headers, info)
        : new ProblemError(response.status, problem, response.headers, info);
    }
    return { data: /** @type {T} */ (data), response, attempts: attempts.count };
  }

  /**
   * A call under an idempotency key: one key, chosen here once, on every attempt.
   * @template T
   * @param {CallOptions | undefined} o
   * @param {(key: string, fetch: (r: Request) => Promise<Response>) => Promise<{data?: T, error?: any, response: Response}>} send
   * @returns {Promise<{data: T, outcome: Outcome}>}
   */
  async #keyed(o, send) {
    const idempotencyKey = o?.idempotencyKey ?? newIdempotencyKey();
    const { data, response, attempts } = await this.#call((f) => send(idempotencyKey, f), { signal: o?.signal, idempotencyKey });
    return {
      data,
      outcome: {
        status: response.status,
        replayed: response.headers.get('Idempotent-Replayed') === 'true',
        idempotencyKey,
        attempts,
      },
    };
  }

  /**
   * Creates a payment. A decline is a DeclinedError.
   * @param {CreatePaymentRequest} body @param {CallOptions} [o]
   * @returns {Promise<{payment: Payment} & Outcome>}
   */
  async createPayment(body, o) {
    const { data, outcome } = await this.#keyed(o, (key, fetch) =>
      this.#api.POST('/payments', { params: { header: { 'Idempotency-Key': key } }, body, fetch, signal: o?.signal }));
    return { payment: data, ...outcome };
  }

  /** @param {string} paymentId @param {{signal?: AbortSignal}} [o] @returns {Promise<Payment>} */
  async getPayment(paymentId, o) {
    return (await this.#call((fetch) =>
      this.#api.GET('/payments/{paymentId}', { params: { path: { paymentId } }, fetch, signal: o?.signal }), { signal: o?.signal })).data;
  }

  /**
   * One page of payments.
   * @param {ListPaymentsQuery} [query] @param {{signal?: AbortSignal}} [o] @returns {Promise<PaymentList>}
   */
  async listPaymentsPage(query, o) {
    return (await this.#call((fetch) =>
      this.#api.GET('/payments', { params: { query }, fetch, signal: o?.signal }), { signal: o?.signal })).data;
  }

  /**
   * Every payment that meets the filters, newest first, page after page.
   * @param {Omit<ListPaymentsQuery, 'cursor'>} [query] @param {{signal?: AbortSignal}} [o]
   * @returns {AsyncGenerator<Payment>}
   */
  async *listPayments(query, o) {
    yield* pages((cursor) => this.listPaymentsPage({ ...query, cursor }, o));
  }

  /**
   * Refunds a succeeded payment, in full or in part. A decline is a DeclinedError.
   * @param {string} paymentId @param {CreateRefundRequest} body @param {CallOptions} [o]
   * @returns {Promise<{refund: Refund} & Outcome>}
   */
  async refund(paymentId, body, o) {
    const { data, outcome } = await this.#keyed(o, (key, fetch) => this.#api.POST('/payments/{paymentId}/refunds',
      { params: { path: { paymentId }, header: { 'Idempotency-Key': key } }, body, fetch, signal: o?.signal }));
    return { refund: data, ...outcome };
  }

  /**
   * Captures a manual payment's authorization (all of it, or `amount`).
   * @param {string} paymentId @param {CapturePaymentRequest} [body] @param {CallOptions} [o]
   * @returns {Promise<{payment: Payment} & Outcome>}
   */
  async capture(paymentId, body = {}, o) {
    const { data, outcome } = await this.#keyed(o, (key, fetch) => this.#api.POST('/payments/{paymentId}/capture',
      { params: { path: { paymentId }, header: { 'Idempotency-Key': key } }, body, fetch, signal: o?.signal }));
    return { payment: data, ...outcome };
  }

  /**
   * Cancels a payment that has not moved money (voids an authorization).
   * @param {string} paymentId @param {CancelPaymentRequest} [body] @param {CallOptions} [o]
   * @returns {Promise<{payment: Payment} & Outcome>}
   */
  async cancel(paymentId, body = {}, o) {
    const { data, outcome } = await this.#keyed(o, (key, fetch) => this.#api.POST('/payments/{paymentId}/cancel',
      { params: { path: { paymentId }, header: { 'Idempotency-Key': key } }, body, fetch, signal: o?.signal }));
    return { payment: data, ...outcome };
  }

  /**
   * One page of the tenant's events.
   * @param {ListEventsQuery} [query] @param {{signal?: AbortSignal}} [o] @returns {Promise<EventList>}
   */
  async listEventsPage(query, o) {
    return (await this.#call((fetch) =>
      this.#api.GET('/events', { params: { query }, fetch, signal: o?.signal }), { signal: o?.signal })).data;
  }

  /**
   * Every event that meets the filters, newest first, page after page.
   * @param {Omit<ListEventsQuery, 'cursor'>} [query] @param {{signal?: AbortSignal}} [o]
   * @returns {AsyncGenerator<Event>}
   */
  async *listEvents(query, o) {
    yield* pages((cursor) => this.listEventsPage({ ...query, cursor }, o));
  }

  /** @param {string} eventId @param {{signal?: AbortSignal}} [o] @returns {Promise<Event>} */
  async getEvent(eventId, o) {
    return (await this.#call((fetch) =>
      this.#api.GET('/events/{eventId}', { params: { path: { eventId } }, fetch, signal: o?.signal }), { signal: o?.signal })).data;
  }

  /** @param {{signal?: AbortSignal}} [o] @returns {Promise<WebhookEndpoint[]>} */
  async listWebhookEndpoints(o) {
    return (await this.#call((fetch) =>
      this.#api.GET('/webhook-endpoints', { fetch, signal: o?.signal }), { signal: o?.signal })).data.items;
  }

  /**
   * Registers a URL the service sends the tenant's events to. The answer
   * holds the signing secret; the server stores none in the answer it
   * replays, so after a lost answer the secret is read from the endpoint.
   * @param {CreateWebhookEndpointRequest} body @param {CallOptions} [o]
   * @returns {Promise<{endpoint: WebhookEndpointWithSecret} & Outcome>}
   */
  async createWebhookEndpoint(body, o) {
    const { data, outcome } = await this.#keyed(o, (key, fetch) => this.#api.POST('/webhook-endpoints',
      { params: { header: { 'Idempotency-Key': key } }, body, fetch, signal: o?.signal }));
    if (!data.secret) {
      const { endpointId } = data;
      const secret = await this.#call((fetch) => this.#api.GET('/webhook-endpoints/{endpointId}/secret',
        { params: { path: { endpointId } }, fetch, signal: o?.signal }), { signal: o?.signal });
      return { endpoint: { ...data, secret: secret.data.secret }, ...outcome };
    }
    return { endpoint: data, ...outcome };
  }

  /** Deletes an endpoint: deliveries to it stop. @param {string} endpointId @param {{signal?: AbortSignal}} [o] */
  async deleteWebhookEndpoint(endpointId, o) {
    await this.#call((fetch) => this.#api.DELETE('/webhook-endpoints/{endpointId}',
      { params: { path: { endpointId } }, fetch, signal: o?.signal }), { signal: o?.signal });
  }
}

/**
 * The items of a cursor-paginated listing, page after page.
 * @template T
 * @param {(cursor: string | undefined) => Promise<{items: T[], nextCursor?: string}>} page
 * @returns {AsyncGenerator<T>}
 */
async function* pages(page) {
  let cursor;
  do {
    const p = await page(cursor);
    yield* p.items;
    cursor = p.nextCursor;
  } while (cursor);
}
