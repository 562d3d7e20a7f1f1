-- The API's own statements for one new payment (as its log shows them, with
-- pgbench's values), run by pgbench: the claim's batch and the settle's, each
-- one pipeline, so one round trip and one implicit transaction, as pgx sends
-- them. Against tools/bench/pgbench/flow.sql it measures the design's
-- database work alone, without HTTP, Go, the provider or the relay:
--
--   pgbench -n -M prepared -c 8 -j 2 -T 20 -f tools/bench/pgbench/designs/api-pipelined.sql URL
--
-- on a database migrated like the service's. The settle finds its key by its
-- scope (the service has its id from the claim; pgbench cannot \gset inside
-- a pipeline).
\set r random(1, 4611686018427387903)
\startpipeline
WITH claimed AS (
    INSERT INTO idempotency_keys
        (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
         fencing_token, lease_expires_at, created_at, recovery_next_at)
    VALUES ('demo', 'create_payment', 'k-' || (:r)::text, sha256(convert_to((:r)::text, 'UTF8')), 'payment', 'pay_' || lpad((:r)::text, 26, '0'), 1, now() + interval '30 seconds', now(), now())
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT COALESCE((SELECT id FROM claimed), 0),
       set_config('paymentsapi.claimed', CASE WHEN EXISTS (SELECT FROM claimed) THEN 'on' ELSE '' END, true);
WITH ins AS (
    INSERT INTO payments
        (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
         payment_method, channel, description, state, created_at, updated_at, capture_method,
         first_sent_at, last_sent_at)
    SELECT 'pay_' || lpad((:r)::text, 26, '0'), 'demo', 'acc_1', 1000, 'EUR', 'inv-' || (:r)::text, 'pm_card_visa', 'web', '', 'PROVIDER_REQUEST_SENT', now(), now(), 'automatic', now(), now()
    WHERE coalesce(current_setting('paymentsapi.claimed', true), '') = 'on'
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT CASE WHEN NOT (coalesce(current_setting('paymentsapi.claimed', true), '') = 'on') OR (EXISTS (SELECT FROM ins)) THEN 0 ELSE refuse('PA101', 'merchant reference held by another payment', COALESCE((SELECT id FROM payments
    WHERE tenant_id = 'demo' AND account_id = 'acc_1' AND merchant_reference = 'inv-' || (:r)::text AND holds_reference), '')) END;
INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, traceparent)
SELECT (lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
         || '7' || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid, 'payment', 'pay_' || lpad((:r)::text, 26, '0'), 'PaymentCreated',
 jsonb_build_object('amount', '10.00', 'status', 'PROCESSING', 'channel', 'web', 'currency', 'EUR', 'tenantId', 'demo', 'accountId', 'acc_1', 'createdAt', now(), 'paymentId', 'pay_' || lpad((:r)::text, 26, '0'), 'updatedAt', now(), 'description', '', 'captureMethod', 'automatic', 'paymentMethod', 'pm_card_visa', 'refundedAmount', '0.00', 'merchantReference', 'inv-' || (:r)::text), now(), now(), NULL
WHERE coalesce(current_setting('paymentsapi.claimed', true), '') = 'on';
INSERT INTO payment_transitions (payment_id, from_state, to_state, reason, occurred_at, payment_created_at)
SELECT 'pay_' || lpad((:r)::text, 26, '0'), r.from_state, r.to_state, r.reason, now(), now()
FROM (VALUES (1, NULL, 'RECEIVED', 'request accepted'), (2, 'RECEIVED', 'PROVIDER_REQUEST_SENT', 'sending to provider')) AS r (n, from_state, to_state, reason)
WHERE coalesce(current_setting('paymentsapi.claimed', true), '') = 'on'
ORDER BY r.n;
\endpipeline
\startpipeline
WITH changed AS (
UPDATE idempotency_keys
SET response_status = 201, response_headers = jsonb_build_object('Location', '/payments/pay_' || lpad((:r)::text, 26, '0'), 'Content-Type', 'application/json'),
    response_body = convert_to(repeat('x', 430) || (:r)::text, 'UTF8'),
    completed_at = now(), lease_expires_at = NULL, recovery_next_at = NULL
WHERE id = (SELECT id FROM idempotency_keys WHERE tenant_id = 'demo' AND operation = 'create_payment' AND idempotency_key = 'k-' || (:r)::text) AND fencing_token = 1 AND response_status IS NULL
RETURNING id, waiters),
woken AS (SELECT pg_notify('paymentsapi_idempotency_keys', id::text) FROM changed WHERE waiters > 0)
SELECT (SELECT count(*) FROM changed)::int, (SELECT count(*) FROM woken)::int, CASE WHEN EXISTS (SELECT FROM changed) THEN 0 ELSE refuse('PA001', 'idempotency key taken over by another owner', '') END;
WITH moved AS (
    UPDATE payments SET state = 'COMPLETED', updated_at = now(), provider_reference = 'ch_' || substr(md5((:r)::text), 1, 24)
    WHERE id = 'pay_' || lpad((:r)::text, 26, '0') AND state = 'PROVIDER_REQUEST_SENT'
    RETURNING id, created_at
), audit AS (
    INSERT INTO payment_transitions (payment_id, from_state, to_state, reason, occurred_at, payment_created_at)
SELECT id, 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'provider confirmed', now(), created_at FROM moved
)
SELECT CASE WHEN EXISTS (SELECT FROM moved) THEN 0 ELSE refuse('PA003', 'changed', '') END;
INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, traceparent)
SELECT (lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
         || '7' || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid, 'payment', 'pay_' || lpad((:r)::text, 26, '0'), 'PaymentSucceeded',
 jsonb_build_object('amount', '10.00', 'status', 'SUCCEEDED', 'channel', 'web', 'currency', 'EUR', 'tenantId', 'demo', 'accountId', 'acc_1', 'createdAt', now(), 'paymentId', 'pay_' || lpad((:r)::text, 26, '0'), 'updatedAt', now(), 'description', '', 'captureMethod', 'automatic', 'paymentMethod', 'pm_card_visa', 'refundedAmount', '0.00', 'capturedAmount', '10.00', 'merchantReference', 'inv-' || (:r)::text, 'providerReference', 'ch_' || substr(md5((:r)::text), 1, 24)), now(), now(), NULL
WHERE true;
\endpipeline
