-- api-pipelined.sql with each transaction written as one statement (the
-- claim's four and the settle's three as data-modifying CTEs of one): what
-- "one statement per commit" would save PostgreSQL. Measured: nothing beyond
-- the noise.
\set r random(1, 4611686018427387903)
WITH claimed AS (
    INSERT INTO idempotency_keys
        (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
         fencing_token, lease_expires_at, created_at, recovery_next_at)
    VALUES ('demo', 'create_payment', 'k-' || (:r)::text, sha256(convert_to((:r)::text, 'UTF8')), 'payment', 'pay_' || lpad((:r)::text, 26, '0'), 1, now() + interval '30 seconds', now(), now())
    ON CONFLICT DO NOTHING
    RETURNING id
), ins AS (
    INSERT INTO payments
        (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
         payment_method, channel, description, state, created_at, updated_at, capture_method,
         first_sent_at, last_sent_at)
    SELECT 'pay_' || lpad((:r)::text, 26, '0'), 'demo', 'acc_1', 1000, 'EUR', 'inv-' || (:r)::text, 'pm_card_visa', 'web', '', 'PROVIDER_REQUEST_SENT', now(), now(), 'automatic', now(), now()
    FROM claimed
    ON CONFLICT DO NOTHING
    RETURNING id
), ev AS (
INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, traceparent)
SELECT (lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
         || '7' || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid, 'payment', 'pay_' || lpad((:r)::text, 26, '0'), 'PaymentCreated',
 jsonb_build_object('amount', '10.00', 'status', 'PROCESSING', 'channel', 'web', 'currency', 'EUR', 'tenantId', 'demo', 'accountId', 'acc_1', 'createdAt', now(), 'paymentId', 'pay_' || lpad((:r)::text, 26, '0'), 'updatedAt', now(), 'description', '', 'captureMethod', 'automatic', 'paymentMethod', 'pm_card_visa', 'refundedAmount', '0.00', 'merchantReference', 'inv-' || (:r)::text), now(), now(), NULL
FROM claimed
), au AS (
INSERT INTO payment_transitions (payment_id, from_state, to_state, reason, occurred_at, payment_created_at)
SELECT 'pay_' || lpad((:r)::text, 26, '0'), r.from_state, r.to_state, r.reason, now(), now()
FROM claimed, (VALUES (1, NULL, 'RECEIVED', 'request accepted'), (2, 'RECEIVED', 'PROVIDER_REQUEST_SENT', 'sending to provider')) AS r (n, from_state, to_state, reason)
ORDER BY r.n
)
SELECT COALESCE((SELECT id FROM claimed), 0), CASE WHEN NOT EXISTS (SELECT FROM claimed) OR (EXISTS (SELECT FROM ins)) THEN 0 ELSE refuse('PA101', 'merchant reference held by another payment', COALESCE((SELECT id FROM payments
    WHERE tenant_id = 'demo' AND account_id = 'acc_1' AND merchant_reference = 'inv-' || (:r)::text AND holds_reference), '')) END;
WITH changed AS (
UPDATE idempotency_keys
SET response_status = 201, response_headers = jsonb_build_object('Location', '/payments/pay_' || lpad((:r)::text, 26, '0'), 'Content-Type', 'application/json'),
    response_body = convert_to(repeat('x', 430) || (:r)::text, 'UTF8'),
    completed_at = now(), lease_expires_at = NULL, recovery_next_at = NULL
WHERE id = (SELECT id FROM idempotency_keys WHERE tenant_id = 'demo' AND operation = 'create_payment' AND idempotency_key = 'k-' || (:r)::text) AND fencing_token = 1 AND response_status IS NULL
RETURNING id, waiters),
woken AS (SELECT pg_notify('paymentsapi_idempotency_keys', id::text) FROM changed WHERE waiters > 0),
moved AS (
    UPDATE payments SET state = 'COMPLETED', updated_at = now(), provider_reference = 'ch_' || substr(md5((:r)::text), 1, 24)
    WHERE id = 'pay_' || lpad((:r)::text, 26, '0') AND state = 'PROVIDER_REQUEST_SENT'
    RETURNING id, created_at
), audit AS (
    INSERT INTO payment_transitions (payment_id, from_state, to_state, reason, occurred_at, payment_created_at)
SELECT id, 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'provider confirmed', now(), created_at FROM moved
), ev AS (
INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, traceparent)
SELECT (lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
         || '7' || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid, 'payment', 'pay_' || lpad((:r)::text, 26, '0'), 'PaymentSucceeded',
 jsonb_build_object('amount', '10.00', 'status', 'SUCCEEDED', 'channel', 'web', 'currency', 'EUR', 'tenantId', 'demo', 'accountId', 'acc_1', 'createdAt', now(), 'paymentId', 'pay_' || lpad((:r)::text, 26, '0'), 'updatedAt', now(), 'description', '', 'captureMethod', 'automatic', 'paymentMethod', 'pm_card_visa', 'refundedAmount', '0.00', 'capturedAmount', '10.00', 'merchantReference', 'inv-' || (:r)::text, 'providerReference', 'ch_' || substr(md5((:r)::text), 1, 24)), now(), now(), NULL
)
SELECT (SELECT count(*) FROM changed)::int, (SELECT count(*) FROM woken)::int, CASE WHEN EXISTS (SELECT FROM changed) AND EXISTS (SELECT FROM moved) THEN 0 ELSE refuse('PA001', 'taken over', '') END;
