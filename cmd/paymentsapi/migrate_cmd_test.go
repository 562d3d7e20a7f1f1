package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// `paymentsapi migrate` applies every migration to a new database and
// exits, printing the version; run again, it applies nothing. It runs as a
// role that may not replicate: the migrations need no replication, only a
// server reading the stream does.
func TestMigrateAppliesWhatIsMissingAndExits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewEmptyURL(t)
	owner := pgtest.URLAsNewRole(t, dbURL, "NOREPLICATION")
	newest := pgtest.NewestMigration(t)
	db := recPool(t, owner)

	migrate := func() (version int64, applied int) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		env := map[string]string{"DATABASE_URL": owner}
		if err := run(ctx, []string{"migrate"}, func(k string) string { return env[k] }, nil, &stdout, &stderr); err != nil {
			t.Fatalf("paymentsapi migrate: %v\n%s", err, stderr.String())
		}
		var out struct{ Version int64 }
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
			t.Fatalf("paymentsapi migrate printed %q: %v", stdout.String(), err)
		}
		return out.Version, strings.Count(stderr.String(), `"msg":"migration applied"`)
	}
	if version, applied := migrate(); version != newest || applied != int(newest) {
		t.Errorf("a new database: version %d after %d migrations applied, want %d and %d", version, applied, newest, newest)
	}
	if at, err := database.CheckMigrated(ctx, db); err != nil || at != newest {
		t.Errorf("after paymentsapi migrate the database is at %d: %v", at, err)
	}
	rows := recCount(t, db, "goose_db_version")
	if version, applied := migrate(); version != newest || applied != 0 {
		t.Errorf("an up-to-date database: version %d after %d migrations applied, want %d and none", version, applied, newest)
	}
	if again := recCount(t, db, "goose_db_version"); again != rows {
		t.Errorf("paymentsapi migrate on an up-to-date database recorded %d more versions", again-rows)
	}
}

// With MIGRATE=false a server applies no migration: on a database that
// lacks some it refuses to start, naming the version the database is at,
// the one it needs and the command to run, and leaves the database as it
// was.
func TestServeWithoutMigratingRefusesADatabaseThatLacksAMigration(t *testing.T) {
	t.Parallel()
	newest := pgtest.NewestMigration(t)
	behind := pgtest.NewPoolAt(t, newest-1)
	env := map[string]string{
		"DATABASE_URL": behind.Config().ConnString(), "MIGRATE": "false", "HTTP_ADDR": "127.0.0.1:0", "PROVIDER": "sim", "PROVIDER_SIM_IN_PROCESS": "true",
		"API_KEYS": "grants:sk_grants_test", "LOG_LEVEL": "error",
	}
	// A server that does start is stopped after a while, so that the test
	// fails instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := run(ctx, nil, func(k string) string { return env[k] }, nil, io.Discard, io.Discard)
	want := fmt.Sprintf("the database is at migration %05d; this release needs %05d (not applied: %05d): run `paymentsapi migrate`",
		newest-1, newest, newest)
	var missing *database.MissingMigrationsError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), want) {
		t.Fatalf("serve with MIGRATE=false on a database one migration behind: %v, want a refusal saying %q", err, want)
	}
	if at, _ := database.CheckMigrated(context.Background(), behind); at != newest-1 {
		t.Errorf("the refused server migrated the database to %d", at)
	}
	if n := recCount(t, behind, "tenant_api_keys"); n != 0 {
		t.Errorf("the refused server stored %d API keys", n)
	}
}
