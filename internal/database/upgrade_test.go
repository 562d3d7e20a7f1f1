package database_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// keyRow is what a key must keep across an upgrade.
type keyRow struct {
	Fingerprint  []byte
	Token        int64
	Lease        *time.Time
	Status       *int32
	Headers      []byte
	Body         []byte
	CompletedAt  *time.Time
	ResourceType string
	ResourceID   string
}

// A database created and used by the migrations before the idempotency
// engine (version 5) upgrades in place: every key keeps its fingerprint,
// fencing token, lease and stored answer; the reconciler's bookkeeping moves
// from the payment to its key; and the upgraded service replays an old
// answer byte for byte, refuses a key still in flight, and resolves an old
// unknown payment, but not one a person was asked to review.
func TestUpgradeFromBeforeTheEngineKeepsKeysAnswersAndLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolAt(t, 5)

	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	cmd := func(ref string) payments.Command {
		return payments.Command{AccountID: "acc_1", AmountMinor: 1000, Currency: "EUR", MerchantReference: ref,
			PaymentMethod: "pm_card_visa", Channel: "web"}
	}
	oldBody := []byte(`{"paymentId":"pay_done","status":"SUCCEEDED","written":"by an older version"}`)
	// The payments and keys as version 5 wrote them.
	seed := []struct {
		id, key, state string
		token          int64
		lease          *time.Time
		attempts       int
		nextAt         pgtype.Timestamptz
		review         *time.Time
		answered       bool
	}{
		{id: "pay_done", key: "k-done", state: "COMPLETED", token: 1, answered: true, nextAt: neverDue},
		{id: "pay_flight", key: "k-flight", state: "PROVIDER_REQUEST_SENT", token: 3, lease: ptr(now.Add(time.Hour)), nextAt: neverDue},
		{id: "pay_unknown", key: "k-unknown", state: "UNKNOWN_REQUIRES_RECOVERY", token: 2, attempts: 2, nextAt: pgtype.Timestamptz{Time: now.Add(-time.Minute), Valid: true}},
		{id: "pay_review", key: "k-review", state: "UNKNOWN_REQUIRES_RECOVERY", token: 4, attempts: 20, nextAt: pgtype.Timestamptz{Time: now.Add(-time.Minute), Valid: true}, review: ptr(now.Add(-time.Hour))},
	}
	for _, s := range seed {
		c := cmd("inv-" + s.id)
		_, err := pool.Exec(ctx, `
			INSERT INTO payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
			    payment_method, channel, state, created_at, updated_at,
			    recovery_attempts, recovery_next_at, manual_review_at)
			VALUES ($1, 'tenant_a', $2, $3, $4, $5, $6, $7, $8, $9, $9, $10, $11, $12)`,
			s.id, c.AccountID, c.AmountMinor, c.Currency, c.MerchantReference, c.PaymentMethod, c.Channel,
			s.state, now.Add(-time.Hour), s.attempts, s.nextAt, s.review)
		if err != nil {
			t.Fatal(err)
		}
		var status *int
		var headers, body []byte
		var completed *time.Time
		if s.answered {
			status, headers, body, completed = ptr(201), []byte(`{"Content-Type":"application/json","Location":"/payments/pay_done"}`), oldBody, ptr(now.Add(-time.Hour))
		}
		_, err = pool.Exec(ctx, `
			INSERT INTO idempotency_keys (tenant_id, operation, idempotency_key, fingerprint, payment_id,
			    fencing_token, lease_expires_at, response_status, response_headers, response_body, created_at, completed_at)
			VALUES ('tenant_a', $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			payments.OperationCreate, s.key, c.Fingerprint(), s.id, s.token, s.lease, status, headers, body,
			now.Add(-time.Hour), completed)
		if err != nil {
			t.Fatal(err)
		}
	}
	before := readKeys(t, pool)

	if err := database.Migrate(ctx, pool, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}

	after := readKeys(t, pool)
	for key, b := range before {
		a := after[key]
		b.ResourceType, b.ResourceID = payments.ResourceType, a.ResourceID
		if a.ResourceID != "pay_"+key[2:] || !equalKeys(a, b) {
			t.Errorf("key %s changed in the upgrade:\n before %+v\n  after %+v", key, b, a)
		}
	}
	var attempts int
	var nextAt *time.Time
	if err := pool.QueryRow(ctx, `SELECT recovery_attempts, recovery_next_at FROM idempotency_keys WHERE idempotency_key = 'k-unknown'`).Scan(&attempts, &nextAt); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 || nextAt == nil || !nextAt.Equal(now.Add(-time.Minute)) {
		t.Errorf("recovery bookkeeping not moved to the key: attempts %d, next %v", attempts, nextAt)
	}

	// The upgraded service.
	simSrv, err := sim.Start(ctx, "127.0.0.1:0", sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = simSrv.Close() })
	clk := clock.NewFake(now)
	core := app.New(app.Deps{
		DB: pool, Provider: simclient.New(simSrv.URL(), nil), Clock: clk,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.New(prometheus.NewRegistry()),
	}, app.Config{ReplayTTL: 24 * time.Hour, Lease: 30 * time.Second, ProviderTimeout: 5 * time.Second, ProviderKeyWindow: 24 * time.Hour})

	reply, err := core.Payments.Create(ctx, "tenant_a", "k-done", cmd("inv-pay_done"), 0)
	if err != nil || !reply.Replayed || string(reply.Response.Body) != string(oldBody) || reply.Response.Status != 201 {
		t.Errorf("old answer not replayed byte for byte: %+v %v", reply, err)
	}
	var inUse *idempotency.KeyInUseError
	if _, err := core.Payments.Create(ctx, "tenant_a", "k-flight", cmd("inv-pay_flight"), 0); !errors.As(err, &inUse) {
		t.Errorf("a key leased before the upgrade: %v, want in use", err)
	}
	stats, err := core.Reconciler.RunOnce(ctx, 10)
	if err != nil || stats[payments.OutcomeSucceeded] != 1 || len(stats) != 1 {
		t.Errorf("reconciler after the upgrade: %v %v, want the unknown payment resolved and nothing else", stats, err)
	}
	for id, want := range map[string]payments.State{"pay_unknown": payments.StateCompleted, "pay_review": payments.StateUnknown} {
		p, err := core.Payments.Get(ctx, "tenant_a", id)
		if err != nil || p.State != want {
			t.Errorf("%s: %s %v, want %s", id, p.State, err, want)
		}
	}
}

func readKeys(t *testing.T, pool *pgxpool.Pool) map[string]keyRow {
	t.Helper()
	var hasResource bool
	if err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM information_schema.columns
		WHERE table_name = 'idempotency_keys' AND column_name = 'resource_type')`).Scan(&hasResource); err != nil {
		t.Fatal(err)
	}
	cols := `idempotency_key, fingerprint, fencing_token, lease_expires_at, response_status, response_headers, response_body, completed_at`
	if hasResource {
		cols += `, resource_type, resource_id`
	} else {
		cols += `, '', payment_id`
	}
	rows, err := pool.Query(context.Background(), `SELECT `+cols+` FROM idempotency_keys`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]keyRow{}
	for rows.Next() {
		var key string
		var r keyRow
		if err := rows.Scan(&key, &r.Fingerprint, &r.Token, &r.Lease, &r.Status, &r.Headers, &r.Body, &r.CompletedAt, &r.ResourceType, &r.ResourceID); err != nil {
			t.Fatal(err)
		}
		out[key] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func equalKeys(a, b keyRow) bool {
	eqTime := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
	eqInt := func(x, y *int32) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return string(a.Fingerprint) == string(b.Fingerprint) && a.Token == b.Token && eqTime(a.Lease, b.Lease) &&
		eqInt(a.Status, b.Status) && string(a.Headers) == string(b.Headers) && string(a.Body) == string(b.Body) &&
		eqTime(a.CompletedAt, b.CompletedAt) && a.ResourceType == b.ResourceType
}

func ptr[T any](v T) *T { return &v }

// neverDue is the old default of payments.recovery_next_at.
var neverDue = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}

// The release before 00015 ran beside the releases up to 00017's during a
// rolling upgrade, on the schema they migrated: its insert of a payment
// (insertPayment at the parent of the commit that added 00015, verbatim)
// had to find the unique index its ON CONFLICT names. 00015 dropped it when
// first released, and every POST /payments of that release failed with
// 42P10; 00015 was mended to keep it, and the contract step
// 00019 drops it in the release after 00017's, when the release before
// 00015 can no longer run beside the current one. So: the statement works
// on every schema up to 00018, and 00019 is the drop.
func TestTheReleaseBefore00015InsertsPaymentsUntilTheContractStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolAt(t, 18)
	const holdsReference = "state NOT IN ('DECLINED', 'CANCELED')"
	insert := func(id, ref string) (inserted bool, holder string, err error) {
		err = pool.QueryRow(ctx, `
		WITH ins AS (
		    INSERT INTO payments
		        (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
		         payment_method, channel, description, state, created_at, updated_at)
		    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)
		    ON CONFLICT (tenant_id, account_id, merchant_reference) WHERE `+holdsReference+` DO NOTHING
		    RETURNING id
		)
		SELECT true, id FROM ins
		UNION ALL
		SELECT false, COALESCE((SELECT id FROM payments
		    WHERE tenant_id = $2 AND account_id = $3 AND merchant_reference = $6 AND `+holdsReference+`), '')
		WHERE NOT EXISTS (SELECT FROM ins)`,
			id, "tenant_a", "acc_1", 1000, "EUR", ref, "pm_card_visa", "web", "", "RECEIVED", time.Now()).Scan(&inserted, &holder)
		return inserted, holder, err
	}
	if inserted, _, err := insert("pay_old_1", "inv-1"); err != nil || !inserted {
		t.Fatalf("the previous release's insert of a payment: inserted %v, %v", inserted, err)
	}
	if inserted, holder, err := insert("pay_old_2", "inv-1"); err != nil || inserted || holder != "pay_old_1" {
		t.Errorf("the previous release's insert of a held reference: inserted %v, holder %q, %v; want the holder", inserted, holder, err)
	}
}
