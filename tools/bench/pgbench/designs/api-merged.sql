-- api-pipelined.sql for :k payments at once (pgbench -D k=4), as
-- internal/groupcommit sends a group of like batches when it merges them
-- (Options.Merge, package rowset): each of a batch's statements once over
-- the k payments' input rows, so 4 statements in the claims' transaction
-- and 3 in the settles', whatever k. The claim's condition is per row: the
-- claim sets paymentsapi.claimed to the list of the ordinals whose key it
-- took, and each statement after it tests its row's (package claim).
-- Against grouped.sh K (the same batches one after another) and
-- api-set-based.sql (one statement per transaction), it measures what the
-- merge buys:
--
--   pgbench -n -M prepared -c 4 -j 2 -T 15 -D k=4 -f tools/bench/pgbench/designs/api-merged.sql URL   # tps x k = payments/s
\set r random(1, 4611686018427387903)
\startpipeline
WITH input (ord, r) AS (SELECT g::bigint, ((:r)::bigint + g)::text FROM generate_series(1, :k) g),
claimed AS (
    INSERT INTO idempotency_keys
        (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
         fencing_token, lease_expires_at, created_at, recovery_next_at)
    SELECT 'demo', 'create_payment', 'k-' || r, sha256(convert_to(r, 'UTF8')), 'payment', 'pay_' || lpad(r, 26, '0'), 1, now() + interval '30 seconds', now(), now()
    FROM input ORDER BY ord
    ON CONFLICT DO NOTHING
    RETURNING id, tenant_id, operation, idempotency_key
), took AS (
    SELECT input.ord, claimed.id FROM input JOIN claimed ON claimed.tenant_id = 'demo' AND claimed.operation = 'create_payment' AND claimed.idempotency_key = 'k-' || input.r
), flag AS (
    SELECT set_config('paymentsapi.claimed', COALESCE(',' || string_agg(ord::text, ',') || ',', ''), true) AS s FROM took
)
SELECT input.ord, COALESCE(took.id, 0), flag.s FROM input LEFT JOIN took USING (ord) CROSS JOIN flag ORDER BY input.ord;
WITH input (ord, r) AS (SELECT g::bigint, ((:r)::bigint + g)::text FROM generate_series(1, :k) g),
ins AS (
    INSERT INTO payments
        (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
         payment_method, channel, description, state, created_at, updated_at, capture_method,
         first_sent_at, last_sent_at)
    SELECT 'pay_' || lpad(r, 26, '0'), 'demo', 'acc_1', 1000, 'EUR', 'inv-' || r, 'pm_card_visa', 'web', '', 'PROVIDER_REQUEST_SENT', now(), now(), 'automatic', now(), now()
    FROM input
    WHERE strpos(coalesce(current_setting('paymentsapi.claimed', true), ''), ',' || input.ord || ',') > 0
    ORDER BY ord
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT input.ord, CASE WHEN NOT (strpos(coalesce(current_setting('paymentsapi.claimed', true), ''), ',' || input.ord || ',') > 0) OR EXISTS (SELECT FROM ins WHERE ins.id = 'pay_' || lpad(input.r, 26, '0')) THEN 0 ELSE refuse('PA101', 'merchant reference held by another payment', COALESCE((SELECT id FROM payments
    WHERE tenant_id = 'demo' AND account_id = 'acc_1' AND merchant_reference = 'inv-' || input.r AND holds_reference), '')) END
FROM input ORDER BY input.ord;
WITH input (ord, r) AS (SELECT g::bigint, ((:r)::bigint + g)::text FROM generate_series(1, :k) g)
INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, traceparent)
SELECT (lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
         || '7' || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid, 'payment', 'pay_' || lpad(r, 26, '0'), 'PaymentCreated',
 jsonb_build_object('amount', '10.00', 'status', 'PROCESSING', 'channel', 'web', 'currency', 'EUR', 'tenantId', 'demo', 'accountId', 'acc_1', 'createdAt', now(), 'paymentId', 'pay_' || lpad(r, 26, '0'), 'updatedAt', now(), 'description', '', 'captureMethod', 'automatic', 'paymentMethod', 'pm_card_visa', 'refundedAmount', '0.00', 'merchantReference', 'inv-' || r), now(), now(), NULL
FROM input
WHERE strpos(coalesce(current_setting('paymentsapi.claimed', true), ''), ',' || input.ord || ',') > 0
ORDER BY ord;
WITH input (ord, r) AS (SELECT g::bigint, ((:r)::bigint + g)::text FROM generate_series(1, :k) g)
INSERT INTO payment_transitions (payment_id, from_state, to_state, reason, occurred_at, payment_created_at)
SELECT 'pay_' || lpad(input.r, 26, '0'), t.from_state, t.to_state, t.reason, now(), now()
FROM input, (VALUES (1, NULL, 'RECEIVED', 'request accepted'), (2, 'RECEIVED', 'PROVIDER_REQUEST_SENT', 'sending to provider')) AS t (n, from_state, to_state, reason)
WHERE strpos(coalesce(current_setting('paymentsapi.claimed', true), ''), ',' || input.ord || ',') > 0
ORDER BY input.ord, t.n;
\endpipeline
\startpipeline
WITH input (ord, r) AS (SELECT g::bigint, ((:r)::bigint + g)::text FROM generate_series(1, :k) g),
changed AS (
UPDATE idempotency_keys k
SET response_status = 201, response_headers = jsonb_build_object('Location', '/payments/pay_' || lpad(i.r, 26, '0'), 'Content-Type', 'application/json'),
    response_body = convert_to(repeat('x', 430) || i.r, 'UTF8'),
    completed_at = now(), lease_expires_at = NULL, recovery_next_at = NULL
FROM input i
WHERE k.id = (SELECT id FROM idempotency_keys WHERE tenant_id = 'demo' AND operation = 'create_payment' AND idempotency_key = 'k-' || i.r) AND fencing_token = 1 AND response_status IS NULL
RETURNING i.ord, k.id, k.waiters),
woken AS (SELECT pg_notify('paymentsapi_idempotency_keys', id::text) FROM changed WHERE waiters > 0)
SELECT input.ord, (SELECT count(*) FROM woken)::int, CASE WHEN EXISTS (SELECT FROM changed WHERE changed.ord = input.ord) THEN 0 ELSE refuse('PA001', 'idempotency key taken over by another owner', '') END
FROM input ORDER BY input.ord;
WITH input (ord, r) AS (SELECT g::bigint, ((:r)::bigint + g)::text FROM generate_series(1, :k) g),
moved AS (
    UPDATE payments p SET state = 'COMPLETED', updated_at = now(), provider_reference = 'ch_' || substr(md5(i.r), 1, 24)
    FROM input i
    WHERE p.id = 'pay_' || lpad(i.r, 26, '0') AND state = 'PROVIDER_REQUEST_SENT'
    RETURNING i.ord, p.id, p.created_at
), audit AS (
    INSERT INTO payment_transitions (payment_id, from_state, to_state, reason, occurred_at, payment_created_at)
    SELECT id, 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'provider confirmed', now(), created_at FROM moved ORDER BY ord
)
SELECT input.ord, CASE WHEN EXISTS (SELECT FROM moved WHERE moved.ord = input.ord) THEN 0 ELSE refuse('PA003', 'changed', '') END
FROM input ORDER BY input.ord;
WITH input (ord, r) AS (SELECT g::bigint, ((:r)::bigint + g)::text FROM generate_series(1, :k) g)
INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, traceparent)
SELECT (lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
         || '7' || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid, 'payment', 'pay_' || lpad(r, 26, '0'), 'PaymentSucceeded',
 jsonb_build_object('amount', '10.00', 'status', 'SUCCEEDED', 'channel', 'web', 'currency', 'EUR', 'tenantId', 'demo', 'accountId', 'acc_1', 'createdAt', now(), 'paymentId', 'pay_' || lpad(r, 26, '0'), 'updatedAt', now(), 'description', '', 'captureMethod', 'automatic', 'paymentMethod', 'pm_card_visa', 'refundedAmount', '0.00', 'capturedAmount', '10.00', 'merchantReference', 'inv-' || r, 'providerReference', 'ch_' || substr(md5(r), 1, 24)), now(), now(), NULL
FROM input ORDER BY ord;
\endpipeline
