package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// With OUTBOX_RELAY=stream, a server the stream cannot read (here: a role
// that may not replicate) is refused at start-up, naming the fix, and
// before the service migrates anything: the previous release, still
// running, keeps its relay.
func TestServeRefusesAServerTheStreamCannotReadBeforeMigrating(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewEmptyURL(t)
	asRole := pgtest.URLAsNewRole(t, dbURL, "NOREPLICATION") // with the rights to migrate: only the check can stop it

	env := map[string]string{"DATABASE_URL": asRole, "HTTP_ADDR": "127.0.0.1:0", "LOG_LEVEL": "error", "OUTBOX_RELAY": "stream",
		"PROVIDER": "sim", "PROVIDER_SIM_IN_PROCESS": "true"}
	err := run(ctx, nil, getenv(env), nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "REPLICATION") {
		t.Fatalf("serve on a role that may not replicate: %v, want a refusal naming REPLICATION", err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var migrated bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&migrated); err != nil {
		t.Fatal(err)
	}
	if migrated {
		t.Error("the database was migrated before the refusal")
	}
}
