package database

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/paymentsapi/paymentsapi/migrations"
)

// MissingMigrationsError is CheckMigrated's error for a database that
// lacks a migration this release needs.
type MissingMigrationsError struct {
	At      int64   // the newest migration the database holds; 0: none
	Needs   int64   // this release's newest migration
	Missing []int64 // this release's migrations the database lacks, oldest first
}

func (e *MissingMigrationsError) Error() string {
	const howTo = "run `paymentsapi migrate` as the role that owns the schema"
	if e.At == 0 {
		return fmt.Sprintf("the database has no migration applied; this release needs %05d: %s", e.Needs, howTo)
	}
	missing := make([]string, len(e.Missing))
	for i, v := range e.Missing {
		missing[i] = fmt.Sprintf("%05d", v)
	}
	return fmt.Sprintf("the database is at migration %05d; this release needs %05d (not applied: %s): %s",
		e.At, e.Needs, strings.Join(missing, ", "), howTo)
}

// CheckMigrated returns the newest migration the database holds (0: none),
// and a *MissingMigrationsError if it lacks any of this release's. A
// database newer than this release passes: during a rolling upgrade the
// previous release serves on the schema the next one migrated. It only
// reads, so a role that may not change the schema can run it.
func CheckMigrated(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	needed, err := releaseVersions()
	if err != nil {
		return 0, err
	}
	applied, err := appliedVersions(ctx, pool)
	if err != nil {
		return 0, err
	}
	e := &MissingMigrationsError{Needs: needed[len(needed)-1]}
	if len(applied) > 0 {
		e.At = slices.Max(applied)
	}
	for _, v := range needed {
		if !slices.Contains(applied, v) {
			e.Missing = append(e.Missing, v)
		}
	}
	if len(e.Missing) > 0 {
		return e.At, e
	}
	return e.At, nil
}

// releaseVersions lists the versions of this release's migrations, oldest
// first.
func releaseVersions() ([]int64, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, err
	}
	versions := make([]int64, 0, len(names))
	for _, name := range names {
		v, err := goose.NumericComponent(name)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		versions = append(versions, v)
	}
	slices.Sort(versions)
	return versions, nil
}

// appliedVersions lists the migrations goose recorded as applied. A
// database goose never saw has none: the check writes nothing, not even
// goose's table.
func appliedVersions(ctx context.Context, pool *pgxpool.Pool) ([]int64, error) {
	var versioned bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&versioned); err != nil {
		return nil, fmt.Errorf("check migrations: %w", err)
	}
	if !versioned {
		return nil, nil
	}
	rows, err := pool.Query(ctx, `SELECT DISTINCT version_id FROM goose_db_version WHERE is_applied AND version_id > 0`)
	if err != nil {
		return nil, fmt.Errorf("check migrations: %w", err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("check migrations: %w", err)
	}
	return applied, nil
}
