-- The whole schema of the payments database, as the numbered migrations in
-- migrations/ leave it. The contract steps waiting in migrations/pending/ are
-- NOT applied: this is the schema of the current release.
--
-- Generated: do not edit. Write a migration, then run `make schema`, which
-- applies the migrations to a fresh database and dumps it (pg_dump -s of
-- PostgreSQL 15, without owners, privileges, session settings or goose's own
-- table). A test in internal/database fails when this file differs from what
-- the migrations produce. docs/design.md, "Tables", names the package that
-- owns each table.

CREATE FUNCTION public.audit_events_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;


CREATE FUNCTION public.enforce_state_machine() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    prior text := '';
BEGIN
    IF TG_OP = 'UPDATE' THEN
        prior := OLD.state;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM state_machine_moves m
                   WHERE m.machine = TG_ARGV[0] AND m.from_state = prior AND m.to_state = NEW.state) THEN
        RAISE EXCEPTION 'illegal % move % -> %', TG_ARGV[0], COALESCE(NULLIF(prior, ''), '(new)'), NEW.state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'state_machine_moves';
    END IF;
    RETURN NEW;
END;
$$;


CREATE FUNCTION public.payments_holds_reference() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.holds_reference := NEW.state NOT IN ('DECLINED', 'CANCELED');
    RETURN NEW;
END
$$;


CREATE FUNCTION public.payments_keep_held_by_honest() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.held_by := NULL;
    RETURN NEW;
END
$$;


CREATE FUNCTION public.refuse(code text, message text, detail text DEFAULT ''::text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET log_min_messages TO 'fatal'
    AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail;
END
$$;


CREATE TABLE public.audit_events (
    id uuid NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    actor text NOT NULL,
    request_id text,
    action text NOT NULL,
    tenant_id text,
    target_id text,
    details jsonb DEFAULT '{}'::jsonb NOT NULL
);


CREATE TABLE public.dashboard_sessions (
    token_hash bytea NOT NULL,
    sealed_secret bytea NOT NULL,
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL
);


CREATE TABLE public.events (
    id uuid NOT NULL,
    tenant_id text NOT NULL,
    type text NOT NULL,
    aggregate_id text NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    data jsonb NOT NULL,
    recorded_at timestamp with time zone NOT NULL,
    traceparent text
);


CREATE TABLE public.events_copy_frontier (
    at timestamp with time zone NOT NULL
);


CREATE TABLE public.idempotency_keys (
    tenant_id text NOT NULL,
    operation text NOT NULL,
    idempotency_key text NOT NULL,
    fingerprint bytea NOT NULL,
    fencing_token bigint DEFAULT 1 NOT NULL,
    lease_expires_at timestamp with time zone,
    response_status integer,
    response_headers jsonb,
    response_body bytea,
    created_at timestamp with time zone NOT NULL,
    completed_at timestamp with time zone,
    id bigint NOT NULL,
    resource_type text NOT NULL,
    resource_id text NOT NULL,
    recovery_next_at timestamp with time zone,
    recovery_attempts integer DEFAULT 0 NOT NULL,
    recovery_last_error text,
    manual_review_at timestamp with time zone,
    waiters integer DEFAULT 0 NOT NULL
)
WITH (fillfactor='90');


ALTER TABLE public.idempotency_keys ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.idempotency_keys_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


CREATE TABLE public.inbox (
    consumer text NOT NULL,
    event_id uuid NOT NULL,
    event_type text NOT NULL,
    aggregate_id text NOT NULL,
    outcome text NOT NULL,
    error text,
    received_at timestamp with time zone NOT NULL,
    CONSTRAINT inbox_outcome_check CHECK ((outcome = ANY (ARRAY['applied'::text, 'duplicate_entry'::text, 'ignored'::text, 'rejected'::text])))
);


CREATE TABLE public.ledger_entries (
    id bigint NOT NULL,
    payment_id text NOT NULL,
    entry_type text NOT NULL,
    tenant_id text,
    account_id text NOT NULL,
    amount_minor bigint NOT NULL,
    currency text NOT NULL,
    provider_reference text,
    event_id uuid NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    created_at timestamp with time zone NOT NULL,
    refund_id text DEFAULT ''::text NOT NULL,
    CONSTRAINT ledger_entries_amount_minor_check CHECK ((amount_minor > 0)),
    CONSTRAINT ledger_entries_currency_check CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT ledger_entries_entry_type_check CHECK ((entry_type = ANY (ARRAY['PAYMENT_SUCCEEDED'::text, 'REFUND_SUCCEEDED'::text, 'PAYOUT_SUCCEEDED'::text])))
);


ALTER TABLE public.ledger_entries ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.ledger_entries_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


CREATE TABLE public.outbox_events (
    id uuid NOT NULL,
    aggregate_type text NOT NULL,
    aggregate_id text NOT NULL,
    event_type text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamp with time zone NOT NULL,
    published_at timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone NOT NULL,
    last_error text,
    parked_at timestamp with time zone,
    seq bigint NOT NULL,
    claimed_until timestamp with time zone,
    claim_token uuid,
    head boolean DEFAULT false NOT NULL,
    traceparent text,
    order_xid xid8 DEFAULT GREATEST(pg_current_xact_id(), pg_snapshot_xmax(pg_current_snapshot()))
);


ALTER TABLE public.outbox_events ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.outbox_events_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


CREATE TABLE public.outbox_parked (
    event_id uuid NOT NULL,
    aggregate_type text NOT NULL,
    aggregate_id text NOT NULL,
    seq bigint NOT NULL,
    attempts integer NOT NULL,
    last_error text,
    waits_for uuid,
    parked_at timestamp with time zone NOT NULL,
    released_at timestamp with time zone,
    CONSTRAINT outbox_parked_check CHECK (((last_error IS NULL) <> (waits_for IS NULL)))
);


CREATE TABLE public.outbox_poll_position (
    one boolean DEFAULT true NOT NULL,
    order_xid xid8 NOT NULL,
    seq bigint NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT outbox_poll_position_one_check CHECK (one)
);


CREATE TABLE public.outbox_stream_positions (
    slot text NOT NULL,
    committed_at timestamp with time zone,
    updated_at timestamp with time zone NOT NULL,
    catching_up boolean DEFAULT false NOT NULL
);


CREATE TABLE public.payment_action_transitions (
    id bigint NOT NULL,
    payment_action_id text NOT NULL,
    from_state text,
    to_state text NOT NULL,
    reason text NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    actor text,
    request_id text
);


ALTER TABLE public.payment_action_transitions ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.payment_action_transitions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


CREATE TABLE public.payment_actions (
    id text NOT NULL,
    tenant_id text NOT NULL,
    payment_id text NOT NULL,
    kind text NOT NULL,
    amount_minor bigint NOT NULL,
    currency text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    state text NOT NULL,
    provider_reference text,
    decline_code text,
    first_sent_at timestamp with time zone,
    last_sent_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT payment_actions_amount_minor_check CHECK ((amount_minor >= 0)),
    CONSTRAINT payment_actions_currency_check CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT payment_actions_kind_check CHECK ((kind = ANY (ARRAY['capture'::text, 'void'::text]))),
    CONSTRAINT payment_actions_state_check CHECK ((state = ANY (ARRAY['RECEIVED'::text, 'PROVIDER_REQUEST_SENT'::text, 'SUCCEEDED'::text, 'DECLINED'::text, 'FAILED_RETRYABLE'::text, 'UNKNOWN_REQUIRES_RECOVERY'::text, 'CANCELED'::text])))
);


CREATE TABLE public.payment_transitions (
    id bigint NOT NULL,
    payment_id text NOT NULL,
    from_state text,
    to_state text NOT NULL,
    reason text NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    payment_created_at timestamp with time zone,
    actor text,
    request_id text,
    CONSTRAINT payment_transitions_payment_created_at_check CHECK ((payment_created_at IS NOT NULL))
);


ALTER TABLE public.payment_transitions ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.payment_transitions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


CREATE TABLE public.payments (
    id text NOT NULL,
    tenant_id text NOT NULL,
    account_id text NOT NULL,
    amount_minor bigint NOT NULL,
    currency text NOT NULL,
    merchant_reference text NOT NULL,
    payment_method text NOT NULL,
    channel text NOT NULL,
    description text DEFAULT ''::text NOT NULL,
    state text NOT NULL,
    provider_reference text,
    decline_code text,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    refunded_minor bigint DEFAULT 0 NOT NULL,
    holds_reference boolean DEFAULT true NOT NULL,
    first_sent_at timestamp with time zone,
    last_sent_at timestamp with time zone,
    capture_method text DEFAULT 'automatic'::text NOT NULL,
    captured_minor bigint,
    authorization_expires_at timestamp with time zone,
    held_by text,
    return_url text,
    next_action_url text,
    CONSTRAINT payments_amount_minor_check CHECK ((amount_minor > 0)),
    CONSTRAINT payments_capture_method_check CHECK ((capture_method = ANY (ARRAY['automatic'::text, 'manual'::text]))),
    CONSTRAINT payments_captured_minor_check CHECK (((captured_minor IS NULL) OR ((captured_minor > 0) AND (captured_minor <= amount_minor)))),
    CONSTRAINT payments_currency_check CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT payments_manual_captured_check CHECK (((capture_method <> 'manual'::text) OR (state <> 'COMPLETED'::text) OR (captured_minor IS NOT NULL))),
    CONSTRAINT payments_refunded_minor_check CHECK (((refunded_minor >= 0) AND (refunded_minor <= amount_minor))),
    CONSTRAINT payments_state_check_v49 CHECK ((state = ANY (ARRAY['RECEIVED'::text, 'PROVIDER_REQUEST_SENT'::text, 'COMPLETED'::text, 'DECLINED'::text, 'FAILED_RETRYABLE'::text, 'UNKNOWN_REQUIRES_RECOVERY'::text, 'CANCELED'::text, 'AUTHORIZED'::text, 'CAPTURE_REQUESTED'::text, 'VOID_REQUESTED'::text, 'CANCEL_REQUESTED'::text, 'REQUIRES_ACTION'::text])))
)
WITH (fillfactor='80');


CREATE TABLE public.payout_transitions (
    id bigint NOT NULL,
    payout_id text NOT NULL,
    from_state text,
    to_state text NOT NULL,
    reason text NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    actor text,
    request_id text
);


ALTER TABLE public.payout_transitions ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.payout_transitions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


CREATE TABLE public.payouts (
    id text NOT NULL,
    tenant_id text NOT NULL,
    account_id text NOT NULL,
    amount_minor bigint NOT NULL,
    currency text NOT NULL,
    destination text NOT NULL,
    state text NOT NULL,
    provider_reference text,
    decline_code text,
    first_sent_at timestamp with time zone,
    last_sent_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT payouts_amount_minor_check CHECK ((amount_minor > 0)),
    CONSTRAINT payouts_currency_check CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT payouts_state_check CHECK ((state = ANY (ARRAY['RECEIVED'::text, 'PROVIDER_REQUEST_SENT'::text, 'SUCCEEDED'::text, 'DECLINED'::text, 'FAILED_RETRYABLE'::text, 'UNKNOWN_REQUIRES_RECOVERY'::text])))
);


CREATE TABLE public.refund_transitions (
    id bigint NOT NULL,
    refund_id text NOT NULL,
    from_state text,
    to_state text NOT NULL,
    reason text NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    actor text,
    request_id text
);


ALTER TABLE public.refund_transitions ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.refund_transitions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


CREATE TABLE public.refunds (
    id text NOT NULL,
    tenant_id text NOT NULL,
    payment_id text NOT NULL,
    amount_minor bigint NOT NULL,
    currency text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    state text NOT NULL,
    provider_reference text,
    decline_code text,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    first_sent_at timestamp with time zone,
    last_sent_at timestamp with time zone,
    CONSTRAINT refunds_amount_minor_check CHECK ((amount_minor > 0)),
    CONSTRAINT refunds_currency_check CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT refunds_state_check CHECK ((state = ANY (ARRAY['RECEIVED'::text, 'PROVIDER_REQUEST_SENT'::text, 'SUCCEEDED'::text, 'DECLINED'::text, 'FAILED_RETRYABLE'::text, 'UNKNOWN_REQUIRES_RECOVERY'::text])))
)
WITH (fillfactor='90');


CREATE TABLE public.state_machine_moves (
    machine text NOT NULL,
    from_state text NOT NULL,
    to_state text NOT NULL
);


CREATE TABLE public.tenant_api_keys (
    id text NOT NULL,
    tenant_id text NOT NULL,
    secret_hash bytea NOT NULL,
    created_at timestamp with time zone NOT NULL,
    last_used_at timestamp with time zone,
    revoked_at timestamp with time zone
);


CREATE TABLE public.webhook_attempts (
    message_id bigint NOT NULL,
    token bigint NOT NULL,
    attempted_at timestamp with time zone NOT NULL,
    status_code integer,
    duration_ms integer NOT NULL,
    error text,
    next_attempt_at timestamp with time zone
);


CREATE TABLE public.webhook_endpoints (
    id text NOT NULL,
    tenant_id text NOT NULL,
    url text NOT NULL,
    event_types text[],
    description text DEFAULT ''::text NOT NULL,
    status text NOT NULL,
    secret_id text NOT NULL,
    previous_secret_id text,
    previous_secret_expires_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    disabled_at timestamp with time zone,
    disabled_reason text,
    last_success_at timestamp with time zone,
    failing_since timestamp with time zone,
    deleted_at timestamp with time zone,
    secret_sealed text,
    previous_secret_sealed text,
    CONSTRAINT webhook_endpoints_check CHECK (((status = 'disabled'::text) = (disabled_at IS NOT NULL))),
    CONSTRAINT webhook_endpoints_status_check CHECK ((status = ANY (ARRAY['enabled'::text, 'disabled'::text])))
);


CREATE TABLE public.webhook_messages (
    id bigint NOT NULL,
    event_id uuid NOT NULL,
    endpoint_id text NOT NULL,
    status text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    token bigint DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone NOT NULL,
    claimed_until timestamp with time zone,
    pending_since timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    CONSTRAINT webhook_messages_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'delivered'::text, 'failed'::text, 'abandoned'::text])))
);


ALTER TABLE public.webhook_messages ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.webhook_messages_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


CREATE TABLE public.webhook_resends (
    id text NOT NULL,
    tenant_id text NOT NULL,
    event_id uuid NOT NULL,
    endpoint_ids text[] NOT NULL,
    created_at timestamp with time zone NOT NULL
);


ALTER TABLE ONLY public.audit_events
    ADD CONSTRAINT audit_events_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.dashboard_sessions
    ADD CONSTRAINT dashboard_sessions_pkey PRIMARY KEY (token_hash);


ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.idempotency_keys
    ADD CONSTRAINT idempotency_keys_resource_key UNIQUE (resource_type, resource_id);


ALTER TABLE ONLY public.idempotency_keys
    ADD CONSTRAINT idempotency_keys_scope_key UNIQUE (tenant_id, operation, idempotency_key);


ALTER TABLE ONLY public.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (consumer, event_id);


ALTER TABLE ONLY public.ledger_entries
    ADD CONSTRAINT ledger_entries_payment_entry_key UNIQUE (payment_id, entry_type, refund_id);


ALTER TABLE ONLY public.ledger_entries
    ADD CONSTRAINT ledger_entries_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.outbox_events
    ADD CONSTRAINT outbox_events_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.outbox_parked
    ADD CONSTRAINT outbox_parked_pkey PRIMARY KEY (event_id);


ALTER TABLE ONLY public.outbox_poll_position
    ADD CONSTRAINT outbox_poll_position_pkey PRIMARY KEY (one);


ALTER TABLE ONLY public.outbox_stream_positions
    ADD CONSTRAINT outbox_stream_positions_pkey PRIMARY KEY (slot);


ALTER TABLE ONLY public.payment_action_transitions
    ADD CONSTRAINT payment_action_transitions_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.payment_actions
    ADD CONSTRAINT payment_actions_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.payments
    ADD CONSTRAINT payments_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.payout_transitions
    ADD CONSTRAINT payout_transitions_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.payouts
    ADD CONSTRAINT payouts_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.refund_transitions
    ADD CONSTRAINT refund_transitions_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.refunds
    ADD CONSTRAINT refunds_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.state_machine_moves
    ADD CONSTRAINT state_machine_moves_pkey PRIMARY KEY (machine, from_state, to_state);


ALTER TABLE ONLY public.tenant_api_keys
    ADD CONSTRAINT tenant_api_keys_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.tenant_api_keys
    ADD CONSTRAINT tenant_api_keys_secret_hash_key UNIQUE (secret_hash);


ALTER TABLE ONLY public.webhook_attempts
    ADD CONSTRAINT webhook_attempts_pkey PRIMARY KEY (message_id, token);


ALTER TABLE ONLY public.webhook_endpoints
    ADD CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.webhook_messages
    ADD CONSTRAINT webhook_messages_event_id_endpoint_id_key UNIQUE (event_id, endpoint_id);


ALTER TABLE ONLY public.webhook_messages
    ADD CONSTRAINT webhook_messages_pkey PRIMARY KEY (id);


ALTER TABLE ONLY public.webhook_resends
    ADD CONSTRAINT webhook_resends_pkey PRIMARY KEY (id);


CREATE INDEX audit_events_occurred_idx ON public.audit_events USING btree (occurred_at DESC, id DESC);


CREATE INDEX dashboard_sessions_expiry_idx ON public.dashboard_sessions USING btree (expires_at);


CREATE UNIQUE INDEX events_copy_frontier_one_row ON public.events_copy_frontier USING btree ((true));


CREATE INDEX events_recorded_idx ON public.events USING btree (recorded_at);


CREATE INDEX events_tenant_idx ON public.events USING btree (tenant_id, occurred_at, id);


CREATE INDEX idempotency_keys_completed_idx ON public.idempotency_keys USING btree (completed_at) WHERE (completed_at IS NOT NULL);


CREATE INDEX idempotency_keys_erasable_idx ON public.idempotency_keys USING btree (completed_at) WHERE (response_body IS NOT NULL);


CREATE INDEX idempotency_keys_manual_review_idx ON public.idempotency_keys USING btree (manual_review_at) WHERE (manual_review_at IS NOT NULL);


CREATE INDEX idempotency_keys_recovery_due_idx ON public.idempotency_keys USING btree (recovery_next_at) WHERE ((recovery_next_at IS NOT NULL) AND (manual_review_at IS NULL));


CREATE INDEX idempotency_keys_unfinished_idx ON public.idempotency_keys USING btree (created_at) WHERE (response_status IS NULL);


CREATE INDEX inbox_received_idx ON public.inbox USING btree (received_at) WHERE (outcome <> 'rejected'::text);


CREATE INDEX ledger_entries_account_idx ON public.ledger_entries USING btree (account_id, created_at);


CREATE INDEX outbox_events_order_xid_idx ON public.outbox_events USING btree (order_xid) WHERE (order_xid IS NOT NULL);


CREATE INDEX outbox_events_parked_idx ON public.outbox_events USING btree (parked_at, seq) WHERE ((parked_at IS NOT NULL) AND (published_at IS NULL));


CREATE INDEX outbox_events_published_idx ON public.outbox_events USING btree (published_at) WHERE (published_at IS NOT NULL);


CREATE INDEX outbox_events_tenant_idx ON public.outbox_events USING btree (((payload ->> 'tenantId'::text)), created_at, id);


CREATE INDEX outbox_parked_aggregate_idx ON public.outbox_parked USING btree (aggregate_type, aggregate_id, seq);


CREATE INDEX payment_action_transitions_action_idx ON public.payment_action_transitions USING btree (payment_action_id, id);


CREATE UNIQUE INDEX payment_actions_one_capture_key ON public.payment_actions USING btree (payment_id) WHERE ((kind = 'capture'::text) AND (state = 'SUCCEEDED'::text));


CREATE INDEX payment_actions_payment_idx ON public.payment_actions USING btree (payment_id, created_at, id);


CREATE INDEX payment_transitions_by_creation_idx ON public.payment_transitions USING btree (payment_created_at) WHERE (payment_created_at IS NOT NULL);


CREATE INDEX payment_transitions_earlier_idx ON public.payment_transitions USING btree (payment_id, id) WHERE (payment_created_at IS NULL);


CREATE INDEX payments_account_listing_idx ON public.payments USING btree (tenant_id, account_id, created_at, id);


CREATE INDEX payments_freed_listing_idx ON public.payments USING btree (tenant_id, created_at, id) WHERE (NOT holds_reference);


CREATE INDEX payments_freed_reference_idx ON public.payments USING btree (tenant_id, merchant_reference) WHERE (NOT holds_reference);


CREATE UNIQUE INDEX payments_reference_holder_key ON public.payments USING btree (tenant_id, merchant_reference, account_id) WHERE holds_reference;


CREATE INDEX payments_tenant_listing_idx ON public.payments USING btree (tenant_id, created_at, id);


CREATE INDEX payout_transitions_payout_idx ON public.payout_transitions USING btree (payout_id, id);


CREATE INDEX refund_transitions_refund_idx ON public.refund_transitions USING btree (refund_id, id);


CREATE INDEX refunds_payment_idx ON public.refunds USING btree (payment_id, created_at, id);


CREATE INDEX tenant_api_keys_tenant ON public.tenant_api_keys USING btree (tenant_id, created_at);


CREATE INDEX webhook_endpoints_disabled_idx ON public.webhook_endpoints USING btree (id) WHERE ((status = 'disabled'::text) AND (deleted_at IS NULL));


CREATE INDEX webhook_endpoints_fanout_idx ON public.webhook_endpoints USING btree (tenant_id) WHERE ((status = 'enabled'::text) AND (deleted_at IS NULL));


CREATE INDEX webhook_endpoints_tenant_idx ON public.webhook_endpoints USING btree (tenant_id, created_at, id) WHERE (deleted_at IS NULL);


CREATE INDEX webhook_messages_claimed_idx ON public.webhook_messages USING btree (endpoint_id) WHERE ((status = 'pending'::text) AND (claimed_until IS NOT NULL));


CREATE INDEX webhook_messages_due_idx ON public.webhook_messages USING btree (endpoint_id, next_attempt_at) WHERE (status = 'pending'::text);


CREATE INDEX webhook_messages_pending_idx ON public.webhook_messages USING btree (pending_since) WHERE (status = 'pending'::text);


CREATE INDEX webhook_resends_event_idx ON public.webhook_resends USING btree (event_id);


CREATE STATISTICS public.payments_holds_reference_by_state (dependencies) ON state, holds_reference FROM public.payments;


CREATE TRIGGER audit_events_append_only BEFORE DELETE OR UPDATE ON public.audit_events FOR EACH ROW EXECUTE FUNCTION public.audit_events_append_only();


CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON public.audit_events FOR EACH STATEMENT EXECUTE FUNCTION public.audit_events_append_only();


CREATE TRIGGER payment_actions_state_machine_insert BEFORE INSERT ON public.payment_actions FOR EACH ROW EXECUTE FUNCTION public.enforce_state_machine('payment_action');


CREATE TRIGGER payment_actions_state_machine_update BEFORE UPDATE OF state ON public.payment_actions FOR EACH ROW WHEN ((old.state IS DISTINCT FROM new.state)) EXECUTE FUNCTION public.enforce_state_machine('payment_action');


CREATE TRIGGER payments_holds_reference BEFORE INSERT OR UPDATE OF state, holds_reference ON public.payments FOR EACH ROW WHEN ((new.holds_reference IS DISTINCT FROM (new.state <> ALL (ARRAY['DECLINED'::text, 'CANCELED'::text])))) EXECUTE FUNCTION public.payments_holds_reference();


CREATE TRIGGER payments_keep_held_by_honest BEFORE UPDATE OF state ON public.payments FOR EACH ROW WHEN (((new.held_by IS NOT NULL) AND ((new.state <> ALL (ARRAY['CAPTURE_REQUESTED'::text, 'VOID_REQUESTED'::text])) OR ((old.state <> ALL (ARRAY['CAPTURE_REQUESTED'::text, 'VOID_REQUESTED'::text])) AND (NOT (new.held_by IS DISTINCT FROM old.held_by)))))) EXECUTE FUNCTION public.payments_keep_held_by_honest();


CREATE TRIGGER payments_state_machine_insert BEFORE INSERT ON public.payments FOR EACH ROW EXECUTE FUNCTION public.enforce_state_machine('payment');


CREATE TRIGGER payments_state_machine_update BEFORE UPDATE OF state ON public.payments FOR EACH ROW WHEN ((old.state IS DISTINCT FROM new.state)) EXECUTE FUNCTION public.enforce_state_machine('payment');


CREATE TRIGGER payouts_state_machine_insert BEFORE INSERT ON public.payouts FOR EACH ROW EXECUTE FUNCTION public.enforce_state_machine('payout');


CREATE TRIGGER payouts_state_machine_update BEFORE UPDATE OF state ON public.payouts FOR EACH ROW WHEN ((old.state IS DISTINCT FROM new.state)) EXECUTE FUNCTION public.enforce_state_machine('payout');


CREATE TRIGGER refunds_state_machine_insert BEFORE INSERT ON public.refunds FOR EACH ROW EXECUTE FUNCTION public.enforce_state_machine('refund');


CREATE TRIGGER refunds_state_machine_update BEFORE UPDATE OF state ON public.refunds FOR EACH ROW WHEN ((old.state IS DISTINCT FROM new.state)) EXECUTE FUNCTION public.enforce_state_machine('refund');


ALTER TABLE ONLY public.outbox_parked
    ADD CONSTRAINT outbox_parked_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.outbox_events(id);


ALTER TABLE ONLY public.payment_action_transitions
    ADD CONSTRAINT payment_action_transitions_payment_action_id_fkey FOREIGN KEY (payment_action_id) REFERENCES public.payment_actions(id);


ALTER TABLE ONLY public.payment_actions
    ADD CONSTRAINT payment_actions_payment_id_fkey FOREIGN KEY (payment_id) REFERENCES public.payments(id);


ALTER TABLE ONLY public.payment_transitions
    ADD CONSTRAINT payment_transitions_payment_id_fkey FOREIGN KEY (payment_id) REFERENCES public.payments(id);


ALTER TABLE ONLY public.payout_transitions
    ADD CONSTRAINT payout_transitions_payout_id_fkey FOREIGN KEY (payout_id) REFERENCES public.payouts(id);


ALTER TABLE ONLY public.refund_transitions
    ADD CONSTRAINT refund_transitions_refund_id_fkey FOREIGN KEY (refund_id) REFERENCES public.refunds(id);


ALTER TABLE ONLY public.refunds
    ADD CONSTRAINT refunds_payment_id_fkey FOREIGN KEY (payment_id) REFERENCES public.payments(id);


ALTER TABLE ONLY public.webhook_attempts
    ADD CONSTRAINT webhook_attempts_message_id_fkey FOREIGN KEY (message_id) REFERENCES public.webhook_messages(id) ON DELETE CASCADE;


ALTER TABLE ONLY public.webhook_messages
    ADD CONSTRAINT webhook_messages_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES public.webhook_endpoints(id);


ALTER TABLE ONLY public.webhook_messages
    ADD CONSTRAINT webhook_messages_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.outbox_events(id) ON DELETE CASCADE NOT VALID;


ALTER TABLE ONLY public.webhook_resends
    ADD CONSTRAINT webhook_resends_event_id_fkey FOREIGN KEY (event_id) REFERENCES public.outbox_events(id) ON DELETE CASCADE NOT VALID;


CREATE PUBLICATION paymentsapi_outbox WITH (publish = 'insert');


ALTER PUBLICATION paymentsapi_outbox ADD TABLE ONLY public.outbox_events;
