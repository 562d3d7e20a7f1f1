package stream_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// Each database gets a slot of its own, named after it, within
// PostgreSQL's rules for slot names, and two names that differ only in
// what the rules drop get two slots.
func TestEachDatabaseGetsASlotOfItsOwn(t *testing.T) {
	t.Parallel()
	for db, want := range map[string]string{
		"payments":                  "paymentsapi_outbox_payments",
		"testdb_tpl_0a1b_inst_2c3d": "paymentsapi_outbox_testdb_tpl_0a1b_inst_2c3d",
	} {
		if got := stream.SlotFor(db); got != want {
			t.Errorf("SlotFor(%q) = %q, want %q", db, got, want)
		}
	}
	seen := map[string]string{}
	for _, db := range []string{"Payments", "payments-eu", "payments.eu", strings.Repeat("x", 80), strings.Repeat("x", 81), "zahlungen-ö"} {
		got := stream.SlotFor(db)
		if len(got) > 63 || strings.Trim(got, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" || !strings.HasPrefix(got, stream.DefaultSlot+"_") {
			t.Errorf("SlotFor(%q) = %q: not a slot name (up to 63 lower-case letters, digits and _) under %s", db, got, stream.DefaultSlot)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("SlotFor(%q) = SlotFor(%q) = %q", db, other, got)
		}
		seen[got] = db
	}
}

// The relay's start-up check passes on a server that can stream to the
// role (the test cluster), and fails, naming the remedy, for a role that
// may not replicate. (The check of wal_level is the same query's other
// column: the test servers all run at logical.)
func TestTheServerCheckNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	if err := stream.CheckServer(context.Background(), pool); err != nil {
		t.Fatalf("CheckServer on the test cluster: %v", err)
	}

	// A role of the test's own, without REPLICATION.
	ctx := context.Background()
	other, err := pgxpool.New(ctx, pgtest.URLAsNewRole(t, pool.Config().ConnConfig.ConnString(), "NOREPLICATION"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	err = stream.CheckServer(ctx, other)
	if !errors.Is(err, stream.ErrServerCannotStream) || !strings.Contains(err.Error(), "REPLICATION") {
		t.Fatalf("CheckServer for a role that may not replicate: %v, want ErrServerCannotStream naming REPLICATION", err)
	}
}

// A DATABASE_URL may carry the pool's settings (pool_max_conns,
// pool_ping_timeout): the relay's replication connection leaves them out
// rather than send the server parameters it does not know.
func TestTheRelayConnectsWithAURLThatCarriesPoolSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.commit(t, e.event("pay_a", "PaymentCreated"))
	url := e.url + "&pool_max_conns=5&pool_ping_timeout=2s"
	if !strings.Contains(e.url, "?") {
		url = e.url + "?pool_max_conns=5&pool_ping_timeout=2s"
	}
	b := newBroker()
	r := stream.NewRelay(stream.RelayDeps{ConnString: url, DB: e.pool, Publisher: b, Clock: clock.System{}},
		stream.RelayConfig{Options: stream.Options{Slot: e.slot}})
	t.Cleanup(func() { r.Close(context.Background()) })
	if n, err := r.RunOnce(context.Background()); err != nil || n != 1 {
		t.Fatalf("RunOnce on a URL with pool settings: %d, %v; want 1", n, err)
	}
}
