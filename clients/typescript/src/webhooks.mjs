// Verifies the service's webhook deliveries (Standard Webhooks): the
// signature is `v1,<base64 HMAC-SHA256>` over "{webhook-id}.{webhook-timestamp}.{body}"
// under the bytes of the secret's base64 after "whsec_"; while a secret is
// rotated two signatures travel, space-separated, and either one verifies.
import { createHmac, timingSafeEqual } from 'node:crypto';

export class WebhookVerificationError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'WebhookVerificationError';
  }
}

/**
 * @param {Headers | Record<string, string | string[] | undefined>} headers
 * @param {string} name
 */
function header(headers, name) {
  if (typeof Headers !== 'undefined' && headers instanceof Headers) return headers.get(name) ?? undefined;
  const h = /** @type {Record<string, string | string[] | undefined>} */ (headers);
  const v = h[name] ?? Object.entries(h).find(([k]) => k.toLowerCase() === name)?.[1];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Checks a delivery and returns its message, parsed. The body must be the
 * bytes received, before any JSON parsing.
 * @param {object} o
 * @param {string} o.secret the endpoint's `whsec_…` secret
 * @param {Headers | Record<string, string | string[] | undefined>} o.headers
 * @param {string | Uint8Array} o.body
 * @param {number} [o.toleranceSeconds] how far webhook-timestamp may be from now (default 300)
 * @param {number} [o.nowSeconds]
 * @returns {import('./schema.js').components['schemas']['WebhookMessage'] & {id: string}}
 */
export function verifyWebhook({ secret, headers, body, toleranceSeconds = 300, nowSeconds = Date.now() / 1000 }) {
  if (!secret.startsWith('whsec_') || secret.length === 'whsec_'.length) {
    throw new WebhookVerificationError('the secret does not start with "whsec_" or is empty');
  }
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  const id = header(headers, 'webhook-id');
  const timestamp = header(headers, 'webhook-timestamp');
  const signatures = header(headers, 'webhook-signature');
  if (!id || !timestamp || !signatures) throw new WebhookVerificationError('a webhook-id, webhook-timestamp or webhook-signature header is missing');
  if (!/^[0-9]+$/.test(timestamp) || Math.abs(nowSeconds - Number(timestamp)) > toleranceSeconds) {
    throw new WebhookVerificationError('webhook-timestamp is not within the tolerance of now');
  }
  const raw = typeof body === 'string' ? Buffer.from(body, 'utf8') : Buffer.from(body);
  const expected = createHmac('sha256', key).update(`${id}.${timestamp}.`).update(raw).digest();
  const ok = signatures.split(' ').some((s) => {
    const [version, sig] = s.split(',', 2);
    if (version !== 'v1' || !sig) return false;
    const got = Buffer.from(sig, 'base64');
    return got.length === expected.length && timingSafeEqual(got, expected);
  });
  if (!ok) throw new WebhookVerificationError('no signature matches');
  return { id, ...JSON.parse(raw.toString('utf8')) };
}
