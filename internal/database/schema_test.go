package database_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// A database that lacks this release's newest migrations is refused with
// the version it is at, the one this release needs, each one missing, and
// the command that applies them; a migrated one passes, and so does one a
// later release migrated further (a rolling upgrade's previous release
// serves on it). The check writes nothing: an empty database stays empty.
func TestCheckMigratedNamesTheMissingVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	newest := pgtest.NewestMigration(t)

	behind := pgtest.NewPoolAt(t, newest-2)
	var missing *database.MissingMigrationsError
	at, err := database.CheckMigrated(ctx, behind)
	want := fmt.Sprintf("the database is at migration %05d; this release needs %05d (not applied: %05d, %05d)",
		newest-2, newest, newest-1, newest)
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), "paymentsapi migrate") || at != newest-2 {
		t.Errorf("a database two migrations behind: %d, %v; want %d and an error saying %q and naming paymentsapi migrate", at, err, newest-2, want)
	}

	empty := pgtest.NewEmptyPool(t)
	_, err = database.CheckMigrated(ctx, empty)
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), fmt.Sprintf("no migration applied; this release needs %05d", newest)) {
		t.Errorf("an empty database: %v", err)
	}
	if n := count(t, empty, `pg_class WHERE relnamespace = 'public'::regnamespace`); n != 0 {
		t.Errorf("the check created %d relations in an empty database", n)
	}

	current := pgtest.NewPool(t)
	if at, err := database.CheckMigrated(ctx, current); err != nil || at != newest {
		t.Errorf("a migrated database: %d, %v; want %d and no error", at, err, newest)
	}
	if _, err := current.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, newest+1); err != nil {
		t.Fatal(err)
	}
	if at, err := database.CheckMigrated(ctx, current); err != nil || at != newest+1 {
		t.Errorf("a database a later release migrated: %d, %v; want %d and no error", at, err, newest+1)
	}
}
