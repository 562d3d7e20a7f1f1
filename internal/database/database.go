// Package database opens the PostgreSQL pool, applies the embedded
// migrations, and tells errors that mean "the database is unavailable" from
// the others.
package database

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/paymentsapi/paymentsapi/migrations"
)

// Open connects a pool to url and checks that the server answers. url may
// name several hosts (postgres://h1:5432,h2:5432/db?target_session_attrs=read-write):
// pgx tries them in order, each within the connect timeout, and each new
// connection goes to whichever is the primary now, so the pool follows a
// failover by itself (see dial.go).
//
// Each non-nil option adjusts the pool's configuration before it connects
// (tracing.Pool installs the query tracer that way).
func Open(ctx context.Context, url string, options ...func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	// Every transaction of the service runs under READ COMMITTED, whatever
	// the server's or the role's default: the refund check relies on each
	// statement of its batch taking a fresh snapshot, so that the sum of a
	// payment's refunds sees the refund whose lock it waited for
	// (internal/refunds, queueInsert). Under REPEATABLE READ a batch (one
	// implicit transaction, no BEGIN to set the level on) would reuse its
	// first snapshot and could refund more than the payment.
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
	ConfigureConn(&cfg.ConnConfig.Config)
	if !strings.Contains(url, "pool_ping_timeout") {
		cfg.PingTimeout = DefaultPingTimeout
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgxpool's default (the number of CPUs, at least 4) is too small for
		// a service whose requests each run two or three short transactions.
		cfg.MaxConns = 20
	}
	for _, o := range options {
		if o != nil {
			o(cfg)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}

func newMigrator(pool *pgxpool.Pool) (*goose.Provider, *sql.DB, error) {
	db := stdlib.OpenDBFromPool(pool)
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, nil, errors.Join(err, db.Close())
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("load migrations: %w", err), db.Close())
	}
	return p, db, nil
}

// Migrate applies every pending migration. Several instances may start at
// once: a PostgreSQL advisory lock lets one migrate while the others wait.
func Migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	p, db, err := newMigrator(pool)
	if err != nil {
		return err
	}
	defer db.Close()
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	for _, r := range results {
		log.InfoContext(ctx, "migration applied", "version", r.Source.Version, "file", r.Source.Path)
	}
	return nil
}

// Pending reports whether migrations remain to be applied (for /readyz).
// It writes nothing (CheckMigrated).
func Pending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	_, err := CheckMigrated(ctx, pool)
	var missing *MissingMigrationsError
	if errors.As(err, &missing) {
		return true, nil
	}
	return false, err
}

// Ready reports whether the database answers and every migration is
// applied (for /readyz).
func Ready(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("database unreachable: %w", err)
	}
	pending, err := Pending(ctx, pool)
	if err != nil {
		return fmt.Errorf("check migrations: %w", err)
	}
	if pending {
		return errors.New("migrations pending")
	}
	return nil
}

// Unavailable reports whether err means the database could not be reached or
// could not serve the request right now (connection refused or lost, server
// shutting down or starting, too many connections): a 503, not a 500.
//
// A connection the server closed in the middle of a statement (a crash, an
// immediate shutdown, a restart) shows as io.ErrUnexpectedEOF, unwrapped by
// any pgx type: pgx reads the server's messages with io.ReadFull and turns
// a bare EOF into it. It counts as lost, like a reset connection does.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var (
		connectErr *pgconn.ConnectError
		netErr     net.Error
		pgErr      *pgconn.PgError
	)
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr):
		return true
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P01-57P03: admin shutdown, crash
		// shutdown, cannot connect now; 53300: too many connections; 25006:
		// read-only transaction, which is what a connection opened before a
		// failover gets from a demoted primary, or one that reached a
		// standby: the next connection finds the new primary.
		return pgErr.Code[:2] == "08" || pgErr.Code == "57P01" || pgErr.Code == "57P02" ||
			pgErr.Code == "57P03" || pgErr.Code == "53300" || pgErr.Code == "25006"
	}
	return pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err)
}
