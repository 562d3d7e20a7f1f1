package pgtest

import (
	"errors"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestDatabasesAreMigratedAndIsolated checks that every NewPool database has
// the schema, and that what one test writes is not seen by another.
func TestDatabasesAreMigratedAndIsolated(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b := NewPool(t), NewPool(t)

	var nameA, nameB string
	if err := a.QueryRow(ctx, "SELECT current_database()").Scan(&nameA); err != nil {
		t.Fatal(err)
	}
	if err := b.QueryRow(ctx, "SELECT current_database()").Scan(&nameB); err != nil {
		t.Fatal(err)
	}
	if nameA == nameB {
		t.Fatalf("both pools on database %q", nameA)
	}

	for _, pool := range []*pgxpool.Pool{a, b} {
		rows, err := pool.Query(ctx, `SELECT table_name FROM information_schema.tables
			WHERE table_schema = 'public' AND table_name IN
			('payments', 'tenant_api_keys', 'idempotency_keys', 'outbox_events', 'payment_transitions')
			ORDER BY table_name`)
		if err != nil {
			t.Fatal(err)
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if len(tables) != 5 {
			t.Errorf("migrated tables = %v, want all 5", tables)
		}
		var version int64
		if err := pool.QueryRow(ctx, "SELECT max(version_id) FROM goose_db_version").Scan(&version); err != nil {
			t.Fatal(err)
		}
		if version < 1 {
			t.Errorf("goose version = %d", version)
		}
	}

	const insert = `INSERT INTO payments (id, tenant_id, account_id, amount_minor, currency,
		merchant_reference, payment_method, channel, state, created_at, updated_at)
		VALUES ('pay_1', 'tenant', 'acct', 100, 'EUR', 'ref', 'card', 'web', 'RECEIVED', now(), now())`
	if _, err := a.Exec(ctx, insert); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM payments").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database B sees %d payments written in database A", n)
	}
	// The same id is free in B: the databases share nothing.
	if _, err := b.Exec(ctx, insert); err != nil {
		t.Fatalf("insert in B: %v", err)
	}
}

// TestRoleIsNotSuperuser checks that tests run with the rights of an
// application, not of the server's superuser.
func TestRoleIsNotSuperuser(t *testing.T) {
	t.Parallel()
	pool := NewPool(t)
	var super bool
	if err := pool.QueryRow(t.Context(), "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").
		Scan(&super); err != nil {
		t.Fatal(err)
	}
	if super {
		t.Error("test role is a superuser")
	}
	_, err := pool.Exec(t.Context(), "CREATE DATABASE should_fail")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("CREATE DATABASE as the test role = %v, want insufficient_privilege", err)
	}
}

func TestPgtestdbConfig(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{
			"postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable",
			"postgres://postgres:@127.0.0.1:5433/postgres?sslmode=disable",
		},
		{
			"postgres://u%40x:p%2Fw%3A@db.example:5432/app?application_name=t",
			"postgres://u%40x:p%2Fw%3A@db.example:5432/app?application_name=t&sslmode=prefer",
		},
		{
			"host=/var/run/postgresql user=me dbname=x sslmode=disable",
			"postgres://me:@:5432/x?host=%2Fvar%2Frun%2Fpostgresql&sslmode=disable",
		},
	} {
		conf, err := pgtestdbConfig(tc.in)
		if err != nil {
			t.Fatalf("pgtestdbConfig(%q): %v", tc.in, err)
		}
		if got := conf.URL(); got != tc.want {
			t.Errorf("pgtestdbConfig(%q).URL() = %q, want %q", tc.in, got, tc.want)
		}
		if _, err := pgconn.ParseConfig(conf.URL()); err != nil {
			t.Errorf("pgx cannot parse %q: %v", conf.URL(), err)
		}
	}
}

func TestNewURLWithoutServerFails(t *testing.T) {
	t.Setenv(EnvURL, "")
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		NewURL(ft)
	}()
	if !ft.failed {
		t.Fatal("NewURL did not fail without a server")
	}
}

// fatalRecorder records Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Fatalf(string, ...any) {
	f.failed = true
	panic("fatal")
}

// TestTheSuiteRunsQuietRefusals: on the throwaway cluster, the test role may
// set log_min_messages (createTestRole), so the migrations make refuse quiet
// (migration 00016) as they do for make run's superuser, and every test runs
// that refuse rather than the fallback.
func TestTheSuiteRunsQuietRefusals(t *testing.T) {
	t.Parallel()
	if ServerLog() == "" {
		t.Skip("not the throwaway cluster: a server named by " + EnvURL + " or DATABASE_URL")
	}
	var quiet bool
	if err := NewPool(t).QueryRow(t.Context(),
		`SELECT prosecdef AND 'log_min_messages=fatal' = ANY(proconfig) FROM pg_proc WHERE proname = 'refuse'`).Scan(&quiet); err != nil {
		t.Fatal(err)
	}
	if !quiet {
		t.Error("refuse is not quiet in the tests' databases: the test role may not set log_min_messages")
	}
}
