// A proxy between the client and the API that loses answers and injects
// 503s, as a network and a load balancer would: each request is handed to
// `plan`, which says what happens to it.
import http from 'node:http';

/**
 * @typedef {'pass' | 'drop' | '503' | '503-no-retry'} Fault
 * pass: forward and answer; drop: forward, let the API finish, then close the
 * connection without an answer; 503: answer a load balancer's 503 without
 * forwarding (Payments-Should-Retry: true); 503-no-retry: the same with
 * Payments-Should-Retry: false.
 */

/**
 * @param {string} upstream the API's base URL
 * @returns {Promise<{url: string, seen: {method: string, path: string, key: string | undefined, fault: Fault}[],
 *   plan: (f: (req: http.IncomingMessage, n: number) => Fault) => void, close: () => Promise<void>}>}
 */
export async function startFaultProxy(upstream) {
  /** @type {(req: http.IncomingMessage, n: number) => Fault} */
  let plan = () => 'pass';
  /** @type {{method: string, path: string, key: string | undefined, fault: Fault}[]} */
  const seen = [];
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const fault = plan(req, seen.length);
    const key = /** @type {string | undefined} */ (req.headers['idempotency-key']);
    seen.push({ method: req.method ?? '', path: req.url ?? '', key, fault });
    if (fault === '503' || fault === '503-no-retry') {
      res.writeHead(503, {
        'Content-Type': 'application/problem+json', 'Retry-After': '0',
        'Payments-Should-Retry': fault === '503' ? 'true' : 'false',
      });
      res.end(JSON.stringify({ type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'injected by the test proxy', code: 'SERVICE_UNAVAILABLE' }));
      return;
    }
    /** @type {Record<string, string>} */
    const headers = {};
    for (const [k, v] of Object.entries(req.headers)) {
      if (typeof v === 'string' && !['host', 'connection', 'content-length'].includes(k)) headers[k] = v;
    }
    const body = chunks.length ? Buffer.concat(chunks) : undefined;
    const answer = await fetch(upstream + req.url, { method: req.method, headers, body });
    const data = Buffer.from(await answer.arrayBuffer());
    if (fault === 'drop') {
      res.socket?.destroy(); // the API answered; the client never hears it
      return;
    }
    /** @type {Record<string, string>} */
    const out = {};
    answer.headers.forEach((v, k) => { if (k !== 'content-length' && k !== 'transfer-encoding' && k !== 'connection') out[k] = v; });
    res.writeHead(answer.status, out);
    res.end(data);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(undefined)));
  const addr = /** @type {import('node:net').AddressInfo} */ (server.address());
  return {
    url: `http://127.0.0.1:${addr.port}`,
    seen,
    plan: (f) => { plan = f; },
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}
