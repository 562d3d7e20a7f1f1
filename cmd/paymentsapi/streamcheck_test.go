package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// A server the outbox relay cannot read (here: a role that may not
// replicate) is refused at start-up, naming the fix, and before the
// service migrates anything: the previous release, still running, keeps
// its relay.
func TestServeRefusesAServerItsRelayCannotReadBeforeMigrating(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewEmptyURL(t)
	admin, err := pgx.Connect(ctx, os.Getenv(pgtest.EnvURL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) }) // after the role's clean-up below
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role := "norepl_" + hex.EncodeToString(b)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	for _, q := range []string{
		`CREATE ROLE ` + role + ` LOGIN PASSWORD 'norepl' NOREPLICATION`,
		`GRANT ALL ON DATABASE ` + pgx.Identifier{dbName}.Sanitize() + ` TO ` + role,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// ... and on its schema, so that only the check can stop the
	// migrations.
	au, err := url.Parse(os.Getenv(pgtest.EnvURL))
	if err != nil {
		t.Fatal(err)
	}
	au.Path = "/" + dbName
	adminDB, err := pgx.Connect(ctx, au.String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adminDB.Exec(ctx, `GRANT ALL ON SCHEMA public TO `+role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = adminDB.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = admin.Exec(context.Background(), `REVOKE ALL ON DATABASE `+pgx.Identifier{dbName}.Sanitize()+` FROM `+role)
		_, _ = admin.Exec(context.Background(), `DROP ROLE `+role)
		adminDB.Close(context.Background())
	})
	u.User = url.UserPassword(role, "norepl")

	env := map[string]string{"DATABASE_URL": u.String(), "HTTP_ADDR": "127.0.0.1:0", "LOG_LEVEL": "error"}
	err = run(ctx, nil, func(k string) string { return env[k] }, nil, io.Discard, io.Discard)
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
