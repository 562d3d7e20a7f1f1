package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/pgembed"
)

// statsFlushWait is how long to wait after a phase before its counters can
// be read. Since PostgreSQL 15 a backend keeps its statistics (commits, rows,
// WAL) to itself and flushes them at most once a second while busy; once
// idle it flushes after PGSTAT_IDLE_INTERVAL, 10 s (pgstat.h). The API's
// pooled connections stay open, so their last counts arrive only then.
const statsFlushWait = 11 * time.Second

// monitor is the bench's own connection to the cluster: it reads the
// counters and settings, and sets up the databases. It is connected to the
// "postgres" database, so that its own queries count in neither the API's
// database nor the reference's.
type monitor struct {
	conn    *pgx.Conn
	cluster *pgembed.Cluster
}

func newMonitor(ctx context.Context, c *pgembed.Cluster) (*monitor, error) {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	return &monitor{conn: conn, cluster: c}, nil
}

func (m *monitor) close(ctx context.Context) { _ = m.conn.Close(ctx) }

// recreateDatabase drops database name, if it exists, and creates it empty:
// every run starts from empty tables.
func (m *monitor) recreateDatabase(ctx context.Context, name string) error {
	id := pgx.Identifier{name}.Sanitize()
	// A database with a replication slot (its outbox relay's, left by an
	// earlier run) cannot be dropped: the slots go first.
	if _, err := m.conn.Exec(ctx, `
		SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name); err != nil {
		return fmt.Errorf("drop the replication slots of database %s: %w", name, err)
	}
	if _, err := m.conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	if _, err := m.conn.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// migrate applies the service's migrations to database name.
func (m *monitor) migrate(ctx context.Context, name string, log *slog.Logger) error {
	pool, err := database.Open(ctx, m.cluster.URL(name))
	if err != nil {
		return err
	}
	defer pool.Close()
	return database.Migrate(ctx, pool, log)
}

// counters reads the cluster's WAL counters and database db's transaction
// and row counters.
func (m *monitor) counters(ctx context.Context, db string) (counters, error) {
	var c counters
	err := m.conn.QueryRow(ctx, `
		SELECT w.wal_records, w.wal_fpi, w.wal_bytes::bigint, w.wal_sync,
		       d.xact_commit, d.xact_rollback, d.tup_inserted, d.tup_updated, d.tup_deleted
		FROM pg_stat_wal w, pg_stat_database d
		WHERE d.datname = $1`, db).Scan(
		&c.WALRecords, &c.WALFPI, &c.WALBytes, &c.WALSyncs,
		&c.Commits, &c.Rollbacks, &c.Inserted, &c.Updated, &c.Deleted)
	if err != nil {
		return c, fmt.Errorf("read statistics: %w", err)
	}
	return c, nil
}

// checkpoint makes every phase start from the same place: nothing dirty in
// shared buffers, and each page's first change after it writes a full-page
// image, as after any checkpoint.
func (m *monitor) checkpoint(ctx context.Context) error {
	if _, err := m.conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// cpu is the CPU time the whole cluster has used.
func (m *monitor) cpu() (time.Duration, error) { return treeCPU(m.cluster.Pid()) }

// waitBackendsGone waits until no connection of application appName is
// left: a backend flushes its statistics when it exits.
func (m *monitor) waitBackendsGone(ctx context.Context, appName string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var n int
		if err := m.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`,
			appName).Scan(&n); err != nil {
			return fmt.Errorf("wait for %s's connections to close: %w", appName, err)
		}
		if n == 0 {
			// The exiting backend leaves pg_stat_activity just before it
			// flushes its statistics.
			return clock.Sleep(ctx, 500*time.Millisecond)
		}
		if err := clock.Sleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("wait for %s's connections to close: %w", appName, err)
		}
	}
}

// Bounds of the wait for the relay: after a measured phase (its counters
// need the relay's work), and after the soak (only reported).
const (
	drainTimeout     = 2 * time.Minute
	soakDrainTimeout = 30 * time.Second
)

// waitOutboxDrained waits, at most limit, until the database's outbox
// relay has published what was committed before it was called: its slot
// confirmed past a WAL position marked now (the stream), or no event left
// after its position (the poller, which the position's row names). It
// returns how long it waited and, if limit ran out, what was left (bytes of
// WAL, or events; -1: no slot yet).
func waitOutboxDrained(ctx context.Context, conn *pgx.Conn, limit time.Duration) (time.Duration, int64, error) {
	start := time.Now()
	// The end of a record written now: everything committed before ends
	// before it. (pg_current_wal_insert_lsn may point past a page's
	// header, where no record ends; the relay's RunOnce does the same.)
	var target string
	if err := conn.QueryRow(ctx, `SELECT pg_logical_emit_message(false, 'paymentsbench.drain', '')::text`).Scan(&target); err != nil {
		return 0, 0, fmt.Errorf("mark the server's WAL position: %w", err)
	}
	for {
		var behind *int64 // null: no slot, and no poller's position, yet
		err := conn.QueryRow(ctx, `
			SELECT CASE WHEN EXISTS (SELECT FROM outbox_poll_position) THEN
			           (SELECT count(*) FROM outbox_events e, outbox_poll_position p
			            WHERE e.order_xid >= p.order_xid AND (e.order_xid, e.seq) > (p.order_xid, p.seq))
			       ELSE (SELECT pg_wal_lsn_diff($1::pg_lsn, confirmed_flush_lsn)::bigint
			             FROM pg_replication_slots WHERE slot_name = $2 AND database = current_database()) END`,
			target, stream.SlotFor(conn.Config().Database)).Scan(&behind)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return time.Since(start), 0, fmt.Errorf("read the outbox relay's position: %w", err)
		}
		if behind != nil && *behind <= 0 {
			return time.Since(start), 0, nil
		}
		if time.Since(start) > limit {
			left := int64(-1)
			if behind != nil {
				left = *behind
			}
			return time.Since(start), left, nil
		}
		if err := clock.Sleep(ctx, 100*time.Millisecond); err != nil {
			return time.Since(start), 0, err
		}
	}
}

// settings describes the server: its version, and the durability settings
// as the server reports them (nothing weakened: fsync, synchronous_commit and
// full_page_writes on, as in dev mode).
func (m *monitor) settings(ctx context.Context) (version string, major int, durability string, err error) {
	var num int
	if err := m.conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int`).
		Scan(&version, &num); err != nil {
		return "", 0, "", fmt.Errorf("server version: %w", err)
	}
	var parts []string
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes", "wal_compression", "wal_level", "shared_buffers", "max_wal_size", "checkpoint_timeout"} {
		var v string
		if err := m.conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return "", 0, "", fmt.Errorf("setting %s: %w", name, err)
		}
		parts = append(parts, name+"="+v)
	}
	return "PostgreSQL " + version, num / 10000, strings.Join(parts, " "), nil
}
