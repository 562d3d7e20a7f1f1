package delivery_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/cleanup"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// versionBeforeTheLogWasTheOutbox is the last schema on which the relay
// copied each event into the table events, the event log of that release.
const versionBeforeTheLogWasTheOutbox = 34

// After the upgrade that made the outbox the event log, the events the
// earlier release's copy alone holds (older than the outbox kept them)
// are still listed, read, and delivered, until EVENT_RETENTION has passed
// over them: then clean-up deletes them with their messages and attempts.
// An event both hold is listed once, the copy's before its frontier and
// the outbox's after it, and the outbox's once the copy's is gone. A resend of one the copy alone holds
// is refused with its own code, and works for the others.
func TestTheCopyOfAnEarlierReleaseIsReadUntilItsRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnvOn(t, pgtest.NewPoolAtWithKeys(t, versionBeforeTheLogWasTheOutbox), devPolicy, nil)
	ep := e.legacyHook("tenant_a", "/old") // as that release registered it
	now := e.clk.Now()
	const (
		old  = "01900000-0000-7000-8000-000000000001" // in the copy only, its message pending
		both = "01900000-0000-7000-8000-000000000002" // in both, its message delivered
		kept = "01900000-0000-7000-8000-000000000003" // in both, older than old: the outbox kept it parked
	)
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO events (id, tenant_id, type, aggregate_id, occurred_at, data, recorded_at)
		  VALUES ($1, 'tenant_a', 'payment.succeeded', 'pay_old', $2, '{"paymentId":"pay_old","status":"SUCCEEDED"}', $2)`,
			[]any{old, now.Add(-25 * 24 * time.Hour)}},
		{`INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, published_at)
		  VALUES ($1, 'payment', 'pay_both', 'PaymentSucceeded', '{"paymentId":"pay_both","tenantId":"tenant_a","status":"SUCCEEDED"}', $2, $2, $2)`,
			[]any{both, now.Add(-time.Hour)}},
		{`INSERT INTO events (id, tenant_id, type, aggregate_id, occurred_at, data, recorded_at)
		  VALUES ($1, 'tenant_a', 'payment.succeeded', 'pay_both', $2, '{"paymentId":"pay_both","status":"SUCCEEDED"}', $2)`,
			[]any{both, now.Add(-time.Hour)}},
		{`INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
		  VALUES ($1, 'payment', 'pay_kept', 'PaymentSucceeded', '{"paymentId":"pay_kept","tenantId":"tenant_a","status":"SUCCEEDED"}', $2, $2)`,
			[]any{kept, now.Add(-26 * 24 * time.Hour)}},
		{`INSERT INTO outbox_parked (event_id, aggregate_type, aggregate_id, seq, attempts, last_error, parked_at)
		  SELECT id, aggregate_type, aggregate_id, seq, 10, 'refused', $2 FROM outbox_events WHERE id = $1`,
			[]any{kept, now.Add(-26 * 24 * time.Hour)}},
		{`INSERT INTO events (id, tenant_id, type, aggregate_id, occurred_at, data, recorded_at)
		  VALUES ($1, 'tenant_a', 'payment.succeeded', 'pay_kept', $2, '{"paymentId":"pay_kept","status":"SUCCEEDED"}', $2)`,
			[]any{kept, now.Add(-26 * 24 * time.Hour)}},
		{`INSERT INTO webhook_messages (event_id, endpoint_id, status, next_attempt_at, pending_since)
		  VALUES ($1, $2, 'pending', $3, $3)`, []any{old, ep.id, now}},
		{`INSERT INTO webhook_messages (event_id, endpoint_id, status, next_attempt_at, pending_since, finished_at)
		  VALUES ($1, $2, 'delivered', $3, $3, $3)`, []any{both, ep.id, now.Add(-time.Hour)}},
	} {
		if _, err := e.pool.Exec(ctx, stmt.sql, stmt.args...); err != nil {
			t.Fatal(err)
		}
	}
	pgtest.RetireKeys(t, e.pool)
	pgtest.MigrateTo(t, e.pool, pgtest.MigrationVersion(t, "webhook_secrets_contract")-1)
	e.sealTheClear()
	if err := database.Migrate(ctx, e.pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}

	listed := func() []string {
		t.Helper()
		r := e.do(tenantA, "GET", "/events?limit=100", "", "")
		if r.status != http.StatusOK {
			t.Fatalf("GET /events: %v", r)
		}
		var got []string
		for _, it := range r.json(t)["items"].([]any) {
			got = append(got, it.(map[string]any)["eventId"].(string))
		}
		return got
	}
	if got := listed(); !slices.Equal(got, []string{both, old, kept}) {
		t.Fatalf("listed %v, want %s, %s, %s (newest first), once each", got, both, old, kept)
	}
	if r := e.do(tenantA, "GET", "/events/"+old, "", ""); r.status != http.StatusOK || r.json(t)["type"] != "payment.succeeded" {
		t.Fatalf("GET /events/%s: %v", old, r)
	}

	// Its pending message is sent, as the copy holds it.
	if n := e.runOnce(e.worker(delivery.Config{})); n != 1 {
		t.Fatalf("claimed %d messages, want the old event's", n)
	}
	if got := e.recv.ids(ep.path); !slices.Equal(got, []string{old}) {
		t.Fatalf("the endpoint received %v, want %s", got, old)
	}
	if log := e.deliveries(tenantA, old); len(log) != 1 {
		t.Fatalf("the old event's deliveries: %v", log)
	}

	r := e.do(tenantA, "POST", "/events/"+old+"/resend", "resend-old", "")
	if r.status != http.StatusConflict || r.json(t)["code"] != "EVENT_NOT_RESENDABLE" {
		t.Fatalf("resend of an event only the copy holds: %v, want 409 EVENT_NOT_RESENDABLE", r)
	}
	if r := e.do(tenantA, "POST", "/events/"+both+"/resend", "resend-both", ""); r.status != http.StatusAccepted {
		t.Fatalf("resend of an event the outbox holds: %v", r)
	}

	// Past EVENT_RETENTION for the old event only: it goes, with its
	// message and attempt; the other stays, with its message.
	e.clk.Advance(6 * 24 * time.Hour)
	e.relayed(e.clk.Now())
	j := cleanup.New(e.pool, e.clk, cleanup.Policy{ReplayTTL: time.Hour, MetadataTTL: time.Hour, OutboxRetention: time.Hour,
		EventRetention: 720 * time.Hour}, slog.New(slog.DiscardHandler))
	st, err := j.RunOnce(ctx)
	if err != nil || st.LogEventsDeleted != 2 || st.EventsDeleted != 0 {
		t.Fatalf("clean-up: %+v, %v; want the two old events deleted from the copy, nothing from the outbox", st, err)
	}
	// The parked event stays in the outbox: listed from there now.
	if got := listed(); !slices.Equal(got, []string{both, kept}) {
		t.Fatalf("listed %v after the clean-up, want %s, %s", got, both, kept)
	}
	var messages, attempts int
	if err := e.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_messages WHERE event_id = $1),
		(SELECT count(*) FROM webhook_attempts a JOIN webhook_messages m ON m.id = a.message_id WHERE m.event_id = $1)`, old).
		Scan(&messages, &attempts); err != nil || messages != 0 || attempts != 0 {
		t.Fatalf("the old event left %d messages and %d attempts (%v), want none", messages, attempts, err)
	}
	if got := e.messages(ep.id); got["pending"]+got["delivered"] != 1 {
		t.Fatalf("the endpoint's messages after the clean-up: %v, want the other event's", got)
	}
}
