package delivery_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// planSecret signs the seeded endpoints' messages.
const planSecret = "whsec_c2VjcmV0c2VjcmV0c2VjcmV0"

// A claim over a backlog of 100,000 due messages (and more backing off, and
// more delivered), spread over 1,000 endpoints, reads what it claims, plus
// one index entry per endpoint it visits, as a custom and as a generic plan
// (what a cached prepared statement may get); the gauges read a handful of
// rows. Then a worker's pass sends exactly what one claim takes.
func TestClaimReadsOnlyWhatItClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	ctx := context.Background()
	now := e.clk.Now()
	const (
		endpointCount = 1000
		due           = 100_000
		waiting       = 20_000
		delivered     = 20_000
	)
	// Each endpoint's secret is sealed for its own row, as the API seals it.
	sealed := make([]string, endpointCount)
	for i := range sealed {
		var err error
		if sealed[i], err = e.secrets.Seal(planSecret, fmt.Sprintf("we_%05d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	seed := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO webhook_endpoints (id, tenant_id, url, status, secret_sealed, secret_id, created_at)
		  SELECT 'we_' || lpad(i::text, 5, '0'), 'tenant_a', $1::text || '/ep' || i, 'enabled', ($2::text[])[i], 'we_' || i, $3
		  FROM generate_series(1, $4::int) i`, []any{e.recv.srv.URL, sealed, now, endpointCount}},
		{`INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
		  SELECT gen_random_uuid(), 'payment', 'pay_' || i, 'PaymentSucceeded',
		         jsonb_build_object('paymentId', 'pay_' || i, 'tenantId', 'tenant_a'), $1, $1
		  FROM generate_series(1, $2::int) i`, []any{now, due + waiting + delivered}},
		// The copy of the log an earlier release kept, which the claim's
		// events read too: as large again.
		{`INSERT INTO events (id, tenant_id, type, aggregate_id, occurred_at, data, recorded_at)
		  SELECT gen_random_uuid(), 'tenant_a', 'payment.succeeded', 'old_' || i, $1, '{}', $1
		  FROM generate_series(1, $2::int) i`, []any{now, due + waiting + delivered}},
		// The first due messages are due, the next waiting back off, the
		// rest were delivered; endpoint by endpoint in turn.
		{`INSERT INTO webhook_messages (event_id, endpoint_id, status, next_attempt_at, pending_since)
		  SELECT id, 'we_' || lpad((n % $2::int + 1)::text, 5, '0'),
		         CASE WHEN n > $3::int + $4::int THEN 'delivered' ELSE 'pending' END,
		         CASE WHEN n <= $3::int THEN $1::timestamptz - interval '1 minute' ELSE $1::timestamptz + interval '1 hour' END, $1
		  FROM (SELECT id, row_number() OVER () AS n FROM outbox_events) x`, []any{now, endpointCount, due, waiting}},
	}
	for _, s := range seed {
		if _, err := e.pool.Exec(ctx, s.sql, s.args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, stmt := range []string{`VACUUM ANALYZE webhook_messages`, `ANALYZE events`, `ANALYZE outbox_events`, `ANALYZE webhook_endpoints`} {
		if _, err := e.pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	at, lease := now.Format(time.RFC3339Nano), now.Add(time.Minute).Format(time.RFC3339Nano)
	const types = "timestamptz, int, int, text, timestamptz"
	claim := delivery.ClaimSQL(e.core.EventLog.Relation())
	// 100 messages, 4 of each of 25 endpoints: the claimed rows (read
	// twice: once for their events' ids, which reach into the log's
	// relation as an array), and each one's event and endpoint, and 25
	// endpoints' index entries.
	t.Run("four per endpoint", func(t *testing.T) {
		pgtest.ReadsAtMost(t, e.pool, 750, types, claim, at, "100", "4", "", lease)
	})
	// 100 messages of one endpoint.
	t.Run("one endpoint", func(t *testing.T) {
		pgtest.ReadsAtMost(t, e.pool, 750, types, claim, at, "100", "100", "", lease)
	})
	// From the middle of the endpoints, as the pass after a full one does.
	t.Run("after a cursor", func(t *testing.T) {
		pgtest.ReadsAtMost(t, e.pool, 750, types, claim, at, "100", "4", "we_00500", lease)
	})
	t.Run("gauges", func(t *testing.T) {
		pgtest.ReadsAtMost(t, e.pool, 10, "int", delivery.GaugesSQL, "0") // Explain needs a parameter; the query has none
	})

	// A pass of a worker with room for 100 sends exactly 100.
	for i := 1; i <= endpointCount; i++ {
		e.recv.expect("/ep"+strconv.Itoa(i), planSecret)
	}
	w := e.worker(delivery.Config{Concurrency: 100})
	if n := e.runOnce(w); n != 100 {
		t.Fatalf("a pass claimed %d, want 100", n)
	}
	var sent int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_messages WHERE status = 'delivered'`).Scan(&sent); err != nil {
		t.Fatal(err)
	}
	e.recv.mu.Lock()
	received := len(e.recv.got)
	e.recv.mu.Unlock()
	if sent != delivered+100 || received != 100 {
		t.Errorf("delivered %d (want %d), received %d (want 100)", sent-delivered, 100, received)
	}
}
