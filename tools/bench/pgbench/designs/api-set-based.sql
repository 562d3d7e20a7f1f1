-- api-one-statement.sql for :k payments at once (pgbench -D k=8): each
-- statement writes the rows of k payments, set-based, in one transaction per
-- step. What grouping requests could save if a group's statements were merged
-- by the operations themselves; the service groups whole batches instead
-- (internal/groupcommit).
\set r random(1, 4611686018427387903)
WITH input AS (SELECT ((:r)::bigint + g)::text AS r FROM generate_series(1, :k) g),
claimed AS (
    INSERT INTO idempotency_keys
        (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
         fencing_token, lease_expires_at, created_at, recovery_next_at)
    SELECT 'demo', 'create_payment', 'k-' || r, sha256(convert_to(r, 'UTF8')), 'payment', 'pay_' || lpad(r, 26, '0'), 1, now() + interval '30 seconds', now(), now()
    FROM input
    ON CONFLICT DO NOTHING
    RETURNING id, resource_id, substr(idempotency_key, 3) AS r
), ins AS (
    INSERT INTO payments
        (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
         payment_method, channel, description, state, created_at, updated_at, capture_method,
         first_sent_at, last_sent_at)
    SELECT resource_id, 'demo', 'acc_1', 1000, 'EUR', 'inv-' || r, 'pm_card_visa', 'web', '', 'PROVIDER_REQUEST_SENT', now(), now(), 'automatic', now(), now()
    FROM claimed
    ON CONFLICT DO NOTHING
    RETURNING id
), ev AS (
INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, traceparent)
SELECT (lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
         || '7' || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid, 'payment', resource_id, 'PaymentCreated',
 jsonb_build_object('amount', '10.00', 'status', 'PROCESSING', 'channel', 'web', 'currency', 'EUR', 'tenantId', 'demo', 'accountId', 'acc_1', 'createdAt', now(), 'paymentId', resource_id, 'updatedAt', now(), 'description', '', 'captureMethod', 'automatic', 'paymentMethod', 'pm_card_visa', 'refundedAmount', '0.00', 'merchantReference', 'inv-' || r), now(), now(), NULL
FROM claimed
), au AS (
INSERT INTO payment_transitions (payment_id, from_state, to_state, reason, occurred_at, payment_created_at)
SELECT resource_id, t.from_state, t.to_state, t.reason, now(), now()
FROM claimed, (VALUES (1, NULL, 'RECEIVED', 'request accepted'), (2, 'RECEIVED', 'PROVIDER_REQUEST_SENT', 'sending to provider')) AS t (n, from_state, to_state, reason)
ORDER BY resource_id, t.n
)
SELECT count(*) FROM claimed;
WITH input AS (SELECT ((:r)::bigint + g)::text AS r FROM generate_series(1, :k) g),
changed AS (
UPDATE idempotency_keys k
SET response_status = 201, response_headers = jsonb_build_object('Location', '/payments/pay_' || lpad(i.r, 26, '0'), 'Content-Type', 'application/json'),
    response_body = convert_to(repeat('x', 430) || i.r, 'UTF8'),
    completed_at = now(), lease_expires_at = NULL, recovery_next_at = NULL
FROM input i
WHERE k.tenant_id = 'demo' AND k.operation = 'create_payment' AND k.idempotency_key = 'k-' || i.r AND fencing_token = 1 AND response_status IS NULL
RETURNING k.id, k.waiters),
woken AS (SELECT pg_notify('paymentsapi_idempotency_keys', id::text) FROM changed WHERE waiters > 0),
moved AS (
    UPDATE payments p SET state = 'COMPLETED', updated_at = now(), provider_reference = 'ch_' || substr(md5(i.r), 1, 24)
    FROM input i
    WHERE p.id = 'pay_' || lpad(i.r, 26, '0') AND state = 'PROVIDER_REQUEST_SENT'
    RETURNING p.id, p.created_at, i.r
), audit AS (
    INSERT INTO payment_transitions (payment_id, from_state, to_state, reason, occurred_at, payment_created_at)
SELECT id, 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'provider confirmed', now(), created_at FROM moved
), ev AS (
INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, traceparent)
SELECT (lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
         || '7' || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid, 'payment', id, 'PaymentSucceeded',
 jsonb_build_object('amount', '10.00', 'status', 'SUCCEEDED', 'channel', 'web', 'currency', 'EUR', 'tenantId', 'demo', 'accountId', 'acc_1', 'createdAt', now(), 'paymentId', id, 'updatedAt', now(), 'description', '', 'captureMethod', 'automatic', 'paymentMethod', 'pm_card_visa', 'refundedAmount', '0.00', 'capturedAmount', '10.00', 'merchantReference', 'inv-' || r, 'providerReference', 'ch_' || substr(md5(r), 1, 24)), now(), now(), NULL
FROM moved
)
SELECT (SELECT count(*) FROM changed)::int, (SELECT count(*) FROM moved)::int;
