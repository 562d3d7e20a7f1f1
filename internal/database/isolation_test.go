package database_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// TestTheServiceRunsUnderReadCommitted: a database whose default is
// REPEATABLE READ still gets READ COMMITTED transactions from the pool the
// service opens. The refund check depends on it (see database.Open).
func TestTheServiceRunsUnderReadCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := pgtest.NewPool(t)
	if _, err := setup.Exec(ctx, `DO $$ BEGIN
		EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = %L', current_database(), 'repeatable read');
	END $$`); err != nil {
		t.Fatal(err)
	}
	pool, err := database.Open(ctx, setup.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var level string
	if err := pool.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "read committed" {
		t.Fatalf("transaction_isolation = %q, want read committed", level)
	}
	// The database's default did change: a connection opened otherwise
	// gets it, so the pool's level is Open's doing.
	conn, err := pgx.Connect(ctx, setup.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "repeatable read" {
		t.Fatalf("the database's default is %q, want repeatable read", level)
	}
}
