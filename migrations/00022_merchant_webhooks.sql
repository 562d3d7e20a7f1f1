-- +goose Up

-- Webhooks to merchants (issue 19): a tenant's endpoints, and one message
-- per (event of the log, endpoint) that the delivery workers send until it
-- is delivered, fails or is abandoned, with every attempt kept for
-- GET /events/{eventId}/deliveries.
--
-- Who writes what: internal/endpoints creates, rotates and deletes
-- endpoints (and abandons the pending messages of one it deletes);
-- internal/delivery fans events out into messages (in the event log's own
-- recording statement, internal/eventlog), claims and books messages and
-- their attempts, and keeps an endpoint's delivery health (last success,
-- failing since, disabled).
--
-- Expand only: new tables the previous release never touches. Messages,
-- attempts and resends go with their event (ON DELETE CASCADE), so the
-- event log's clean-up (EVENT_RETENTION) is theirs too.
CREATE TABLE IF NOT EXISTS webhook_endpoints (
    id                         text        PRIMARY KEY, -- we_...
    tenant_id                  text        NOT NULL,
    url                        text        NOT NULL,
    event_types                text[],                  -- NULL: every type
    description                text        NOT NULL DEFAULT '',
    status                     text        NOT NULL CHECK (status IN ('enabled', 'disabled')),
    -- The secret that signs, and the resource that set it (the endpoint's
    -- own id at creation, a rotation's id after), so that a rotation's key
    -- finds its secret again.
    secret                     text        NOT NULL,
    secret_id                  text        NOT NULL,
    -- The secret a rotation replaced, which signs too until it expires.
    previous_secret            text,
    previous_secret_id         text,
    previous_secret_expires_at timestamptz,
    created_at                 timestamptz NOT NULL,
    disabled_at                timestamptz,
    disabled_reason            text,
    last_success_at            timestamptz,
    -- The first failed attempt since the last success (NULL: the last
    -- attempt succeeded, or none was made): five days of it disable.
    failing_since              timestamptz,
    deleted_at                 timestamptz,
    CHECK ((status = 'disabled') = (disabled_at IS NOT NULL))
);
-- A tenant's endpoints (the listing); deleted ones are never read again.
CREATE INDEX IF NOT EXISTS webhook_endpoints_tenant_idx ON webhook_endpoints (tenant_id, created_at, id)
    WHERE deleted_at IS NULL;
-- The fan-out's: the endpoints an event of a tenant goes to.
CREATE INDEX IF NOT EXISTS webhook_endpoints_fanout_idx ON webhook_endpoints (tenant_id)
    WHERE status = 'enabled' AND deleted_at IS NULL;
-- The disabled endpoints (a gauge): few, whatever the table's size.
CREATE INDEX IF NOT EXISTS webhook_endpoints_disabled_idx ON webhook_endpoints (id)
    WHERE status = 'disabled' AND deleted_at IS NULL;

CREATE TABLE IF NOT EXISTS webhook_messages (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        uuid        NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    endpoint_id     text        NOT NULL REFERENCES webhook_endpoints (id),
    status          text        NOT NULL CHECK (status IN ('pending', 'delivered', 'failed', 'abandoned')),
    -- Attempts of the current round: the position in the retry schedule
    -- (a resend starts a new round).
    attempts        int         NOT NULL DEFAULT 0,
    -- The fencing token: one more on every claim, never reset, so that
    -- only the holder of the latest claim books an attempt.
    token           bigint      NOT NULL DEFAULT 0,
    -- When the message is due; while it is claimed, the end of the claim's
    -- lease, so that it is due again, to anyone, once the lease ran out.
    next_attempt_at timestamptz NOT NULL,
    claimed_until   timestamptz,                -- set while a claim holds it
    pending_since   timestamptz NOT NULL,       -- when it last became pending (the oldest-undelivered gauge)
    finished_at     timestamptz,
    UNIQUE (event_id, endpoint_id)
);
-- The claim's: the endpoints with pending messages (read one entry per
-- endpoint by a skip scan), then each one's due messages in order.
CREATE INDEX IF NOT EXISTS webhook_messages_due_idx ON webhook_messages (endpoint_id, next_attempt_at)
    WHERE status = 'pending';
-- The claim's count of an endpoint's messages in flight: only claimed ones.
CREATE INDEX IF NOT EXISTS webhook_messages_claimed_idx ON webhook_messages (endpoint_id)
    WHERE status = 'pending' AND claimed_until IS NOT NULL;
-- The oldest undelivered message (a gauge).
CREATE INDEX IF NOT EXISTS webhook_messages_pending_idx ON webhook_messages (pending_since)
    WHERE status = 'pending';

CREATE TABLE IF NOT EXISTS webhook_attempts (
    message_id      bigint      NOT NULL REFERENCES webhook_messages (id) ON DELETE CASCADE,
    token           bigint      NOT NULL,       -- the claim that made it: one attempt per claim
    attempted_at    timestamptz NOT NULL,
    status_code     int,                        -- NULL: no HTTP answer
    duration_ms     int         NOT NULL,
    error           text,                       -- NULL when delivered
    next_attempt_at timestamptz,                -- NULL when no attempt follows
    PRIMARY KEY (message_id, token)
);

-- POST /events/{eventId}/resend: what each key of resend_event did, so that
-- a key taken over answers as its first request would have.
CREATE TABLE IF NOT EXISTS webhook_resends (
    id           text        PRIMARY KEY, -- evr_...
    tenant_id    text        NOT NULL,
    event_id     uuid        NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    endpoint_ids text[]      NOT NULL,
    created_at   timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_resends_event_idx ON webhook_resends (event_id);

-- +goose Down
DROP TABLE IF EXISTS webhook_resends;
DROP TABLE IF EXISTS webhook_attempts;
DROP TABLE IF EXISTS webhook_messages;
DROP TABLE IF EXISTS webhook_endpoints;
