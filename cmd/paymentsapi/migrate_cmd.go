package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/config"
	"github.com/paymentsapi/paymentsapi/internal/database"
)

const migrateUsage = `usage:
  paymentsapi migrate [flags]   apply the migrations the database lacks, then exit

Flags are those of paymentsapi serve (DATABASE_URL, ...). Run it as the
role that owns the schema, before starting servers of a new release with
MIGRATE=false: they refuse a database that lacks a migration they need. It
prints the database's migration version as JSON. Several may run at once:
one migrates, the others wait for it and find nothing left to apply.
`

// migrateCommand runs `paymentsapi migrate` (args after "migrate"). It
// needs no replication: only a server reads the outbox through the
// stream, so the stream's check is the server's (newApp), not this
// command's.
func migrateCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, log, err := operatorConfig(args, getenv, stderr, migrateUsage)
	if err != nil {
		return err
	}
	pool, err := database.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := database.Migrate(ctx, pool, log); err != nil {
		return err
	}
	version, err := database.CheckMigrated(ctx, pool)
	if err != nil {
		return err
	}
	log.InfoContext(ctx, "the database is migrated", "version", version)
	return json.NewEncoder(stdout).Encode(map[string]any{"version": version})
}

// prepareSchema migrates the database for a server, or with MIGRATE=false
// checks that an operator did.
func prepareSchema(ctx context.Context, pool *pgxpool.Pool, cfg config.Config, log *slog.Logger) error {
	if cfg.Migrate {
		return database.Migrate(ctx, pool, log)
	}
	version, err := database.CheckMigrated(ctx, pool)
	if err != nil {
		return err
	}
	log.InfoContext(ctx, "MIGRATE=false: no migration applied; the database has every one this release needs", "version", version)
	return nil
}
