-- The reference payment flow of `make bench` (tools/paymentsbench): what one
-- new payment must make durable, written as plain SQL, run by pgbench
-- (-M prepared) on a database migrated exactly like the service's, so that
-- it pays for the same rows, indexes and triggers.
--
--   1. one transaction: the idempotency key (claimed, leased), the payment in
--      RECEIVED (through the state-machine trigger) and its PaymentCreated
--      event in the outbox;
--   2. one statement: the key's lease renewed and marked due for recovery,
--      and the payment moved to PROVIDER_REQUEST_SENT, before the provider
--      call;
--   3. one transaction: the stored answer on the key, the payment moved to
--      COMPLETED, and its PaymentSucceeded event.
--
-- Three commits per payment. No audit rows (payment_transitions), no
-- NOTIFY, no API-key lookup, no relay: the API's extra work shows as the
-- gap between the two. Row contents have the sizes of the service's own
-- (ids of 30 characters, a 32-byte fingerprint, the JSON of a payment).
-- Event ids are time-ordered like ids.NewEventID's UUIDv7, so the outbox's
-- primary key grows at its right edge as it does under the service.
--
-- :r is a random 62-bit number per payment: unique across clients and runs.

\set r random(1, 4611686018427387903)

BEGIN;
INSERT INTO idempotency_keys
    (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
     fencing_token, lease_expires_at, created_at)
VALUES ('pgbench', 'create_payment', 'pgbench-' || (:r)::text, sha256(convert_to((:r)::text, 'UTF8')),
        'payment', 'pay_' || lpad((:r)::text, 26, '0'),
        1, now() + interval '30 seconds', now())
RETURNING id AS key_id, resource_id AS payment_id \gset
INSERT INTO payments
    (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
     payment_method, channel, description, state, created_at, updated_at)
VALUES (:payment_id, 'pgbench', 'acc_1', 1000, 'EUR', 'pgbench-' || (:r)::text,
        'pm_card_visa', 'web', '', 'RECEIVED', now(), now());
INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
VALUES ((lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
         || '7' || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid,
        'payment', :payment_id, 'PaymentCreated',
        jsonb_build_object('paymentId', (:payment_id)::text, 'status', 'PROCESSING', 'accountId', 'acc_1',
            'amount', '10.00', 'currency', 'EUR', 'merchantReference', 'pgbench-' || (:r)::text,
            'paymentMethod', 'pm_card_visa', 'channel', 'web', 'description', '',
            'refundedAmount', '0.00', 'createdAt', now(), 'updatedAt', now(), 'tenantId', 'pgbench'),
        now(), now());
COMMIT;

WITH held AS (
    UPDATE idempotency_keys
    SET lease_expires_at = now() + interval '30 seconds',
        recovery_next_at = COALESCE(recovery_next_at, now())
    WHERE id = :key_id AND fencing_token = 1 AND response_status IS NULL
    RETURNING resource_id
)
UPDATE payments p SET state = 'PROVIDER_REQUEST_SENT', updated_at = now()
FROM held WHERE p.id = held.resource_id AND p.state = 'RECEIVED';

BEGIN;
UPDATE idempotency_keys
SET response_status = 201,
    response_headers = jsonb_build_object('Location', '/payments/' || :payment_id,
                                          'Content-Type', 'application/json'),
    response_body = convert_to(json_build_object('paymentId', (:payment_id)::text, 'status', 'SUCCEEDED',
            'accountId', 'acc_1', 'amount', '10.00', 'currency', 'EUR',
            'merchantReference', 'pgbench-' || (:r)::text, 'paymentMethod', 'pm_card_visa',
            'channel', 'web', 'description', '', 'refundedAmount', '0.00',
            'createdAt', now(), 'updatedAt', now(),
            'providerReference', 'ch_' || substr(md5((:r)::text), 1, 24))::text, 'UTF8'),
    completed_at = now(), lease_expires_at = NULL, recovery_next_at = NULL
WHERE id = :key_id AND fencing_token = 1 AND response_status IS NULL;
UPDATE payments
SET state = 'COMPLETED', provider_reference = 'ch_' || substr(md5((:r)::text), 1, 24), updated_at = now()
WHERE id = :payment_id AND state = 'PROVIDER_REQUEST_SENT';
INSERT INTO outbox_events
    (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
VALUES ((lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
         || '7' || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid,
        'payment', :payment_id, 'PaymentSucceeded',
        jsonb_build_object('paymentId', (:payment_id)::text, 'status', 'SUCCEEDED', 'accountId', 'acc_1',
            'amount', '10.00', 'currency', 'EUR', 'merchantReference', 'pgbench-' || (:r)::text,
            'paymentMethod', 'pm_card_visa', 'channel', 'web', 'description', '',
            'refundedAmount', '0.00', 'createdAt', now(), 'updatedAt', now(), 'tenantId', 'pgbench',
            'providerReference', 'ch_' || substr(md5((:r)::text), 1, 24)),
        now(), now());
COMMIT;
