// The retry layer of the client, written once: every call goes through
// retryingFetch, which openapi-fetch uses in place of fetch. The request it
// is given already carries its Idempotency-Key (chosen once per call by the
// caller of this module), so every attempt sends the same key.

/**
 * @typedef {object} RetryPolicy
 * @property {number} maxAttempts     attempts of one call, the first included (1 never retries)
 * @property {number} baseDelayMs     before retry n the client waits a uniformly random time in
 *                                    [0, min(maxDelayMs, baseDelayMs·2^(n-1))) ("full jitter"),
 *                                    or the server's Retry-After if that is longer
 * @property {number} maxDelayMs
 * @property {number} maxRetryAfterMs the longest Retry-After the client waits for; an answer asking
 *                                    for more ends the call with that answer
 * @property {number} attemptTimeoutMs one attempt that runs out counts as a network error, retried
 * @property {{ratio: number, burst: number}} budget a token bucket shared by all calls of a client:
 *                                    each call adds `ratio` tokens (up to `burst`), each retry takes one
 */

/** @type {Readonly<RetryPolicy>} the Go client's defaults (client.DefaultRetryPolicy) */
export const defaultRetryPolicy = Object.freeze({
  maxAttempts: 5,
  baseDelayMs: 250,
  maxDelayMs: 5000,
  maxRetryAfterMs: 30000,
  attemptTimeoutMs: 30000,
  budget: Object.freeze({ ratio: 0.1, burst: 10 }),
});

/** The header by which the server says whether an error answer may be retried. */
export const shouldRetryHeader = 'Payments-Should-Retry';

/**
 * A token bucket of retries, counted in thousandths of a token so that a
 * ratio such as 0.1 adds up exactly.
 */
export class RetryBudget {
  #tokens;
  #ratio;
  #burst;
  /** @param {{ratio: number, burst: number}} b */
  constructor(b) {
    this.#burst = Math.round(Math.max(b.burst, 0) * 1000);
    this.#ratio = Math.round(Math.max(b.ratio, 0) * 1000);
    this.#tokens = this.#burst;
  }
  /** credits the budget for one call */
  call() {
    this.#tokens = Math.min(this.#burst, this.#tokens + this.#ratio);
  }
  /** takes one token for a retry; false when there is none */
  retry() {
    if (this.#tokens < 1000) return false;
    this.#tokens -= 1000;
    return true;
  }
}

/**
 * The full-jitter delay before retry n (n >= 1), with r uniform in [0, 1).
 * @param {RetryPolicy} p @param {number} n @param {number} r
 */
export function backoffMs(p, n, r) {
  let ceiling = p.baseDelayMs;
  for (let i = 1; i < n && ceiling < p.maxDelayMs; i++) ceiling *= 2;
  return r * Math.min(ceiling, p.maxDelayMs);
}

/**
 * Reads Retry-After in either form (RFC 9110): seconds, or an HTTP date
 * measured from now. 0 when absent or unreadable.
 * @param {string | null} v @param {number} nowMs
 */
export function parseRetryAfterMs(v, nowMs) {
  v = (v ?? '').trim();
  if (v === '') return 0;
  if (/^[0-9]+$/.test(v)) return Number(v) * 1000;
  const t = Date.parse(v);
  return Number.isNaN(t) || t <= nowMs ? 0 : t - nowMs;
}

/**
 * Whether an answer may be retried. The server's Payments-Should-Retry
 * decides when present; without it (an older server, a proxy's own
 * answer) the rule it states: 5xx, 429 and 409 IDEMPOTENCY_KEY_IN_USE,
 * never another 4xx. A 202 to a call under a key is not an error but an
 * outcome not known yet: asked again with the same key, the server answers
 * the resolved one.
 * @param {Response} res @param {boolean} keyed @param {() => Promise<string | undefined>} code
 */
export async function retryable(res, keyed, code) {
  if (res.status === 202) return keyed;
  if (res.status < 400) return false;
  const advice = res.headers.get(shouldRetryHeader);
  if (advice === 'true') return true;
  if (advice === 'false') return false;
  if (res.status >= 500 || res.status === 429) return true;
  return res.status === 409 && (await code()) === 'IDEMPOTENCY_KEY_IN_USE';
}

/** Thrown when a call ends because the client's retry budget is empty. */
export class RetryBudgetExhaustedError extends Error {
  /** @param {unknown} cause */
  constructor(cause) {
    super('the retry budget is exhausted', { cause });
    this.name = 'RetryBudgetExhaustedError';
  }
}

/**
 * @typedef {object} Attempts what a call's attempts did, for the caller
 * @property {number} count
 * @property {string[]} keys the Idempotency-Key of each attempt (all the same)
 */

/**
 * @typedef {object} RetryDeps
 * @property {RetryPolicy} policy
 * @property {RetryBudget} budget
 * @property {typeof fetch} fetch
 * @property {(ms: number, signal?: AbortSignal) => Promise<void>} sleep
 * @property {() => number} random uniform in [0, 1)
 * @property {() => number} now milliseconds
 */

/**
 * Returns the fetch of one call: it sends the request until an answer may
 * not be retried, the attempts or the budget run out, or the caller's
 * signal aborts; then it returns the last answer, or throws the last
 * network error.
 * @param {RetryDeps} d @param {Attempts} attempts @param {AbortSignal | undefined} signal
 * @returns {(req: Request) => Promise<Response>}
 */
export function retryingFetch(d, attempts, signal) {
  return async (request) => {
    d.budget.call();
    const keyed = request.headers.has('Idempotency-Key');
    const body = request.body === null ? undefined : await request.arrayBuffer();
    for (;;) {
      attempts.count++;
      attempts.keys.push(request.headers.get('Idempotency-Key') ?? '');
      const timeout = AbortSignal.timeout(d.policy.attemptTimeoutMs);
      const req = new Request(request.url, {
        method: request.method, headers: request.headers, body,
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      /** @type {Response | undefined} */ let res;
      /** @type {unknown} */ let failure;
      try {
        res = await d.fetch(req);
      } catch (err) {
        if (signal?.aborted) throw err;
        failure = err;
      }
      let advisedMs = 0;
      if (res) {
        const answer = res;
        const retry = await retryable(answer, keyed, async () => {
          try { return (await answer.clone().json()).code; } catch { return undefined; }
        });
        if (!retry) return answer;
        advisedMs = parseRetryAfterMs(answer.headers.get('Retry-After'), d.now());
      }
      const stop = () => {
        if (res) return res;
        throw failure;
      };
      if (attempts.count >= d.policy.maxAttempts || advisedMs > d.policy.maxRetryAfterMs) return stop();
      if (!d.budget.retry()) {
        if (res) return res;
        throw new RetryBudgetExhaustedError(failure);
      }
      await res?.arrayBuffer().catch(() => undefined); // free the connection
      await d.sleep(Math.max(backoffMs(d.policy, attempts.count, d.random()), advisedMs), signal);
    }
  };
}

/** @param {number} ms @param {AbortSignal} [signal] */
export function sleep(ms, signal) {
  return new Promise(/** @param {(v?: void) => void} resolve @param {(e: unknown) => void} reject */ (resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve(); }, ms);
    const onAbort = () => { clearTimeout(t); reject(signal?.reason); };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
