// Command walflow measures what one new payment writes to the WAL, on the
// schema of a given migration version. The service's own code makes the
// payments (internal/app, against the in-process provider simulator) and
// its own relay publishes their events (to a publisher that drops them),
// so every statement, trigger and index of the real flow is paid for. It
// reports, per payment, the WAL bytes (from the WAL position), records and
// full-page images (pg_stat_wal), and per table the rows inserted and
// updated and how many updates were HOT (pg_stat_user_tables);
// -waldump adds the WAL of each table and index (pg_waldump).
//
//	go run ./tools/bench/walflow                         # the latest schema
//	go run ./tools/bench/walflow -version 13             # the schema as of migration 13
//	go run ./tools/bench/walflow -wal-compression lz4    # full-page images compressed
//	go run ./tools/bench/walflow -reference              # make bench's plain-SQL flow instead
//	go run ./tools/bench/walflow -sql 'ALTER TABLE ...'  # try a schema change first
//
// Unlike `make bench` it measures no speed, and its counts do not depend
// on it: one cluster of its own, the payments made by a few workers, then
// the relay's backlog published (the relay lags behind new payments under
// load, so a payment's second event is written while its first is still
// unpublished, as in `make bench`; -relay-during runs it alongside). The
// measured phase starts with a CHECKPOINT on tables that already hold the
// warm-up's payments, so full-page images are paid as a running service
// pays them; the larger the warm-up, the more of them (a table's first
// change of each page after a checkpoint). The cluster is durable as in dev
// mode (full_page_writes on), except that commits do not wait for the disk
// (synchronous_commit=off), which changes no WAL record, only the time.
// Autovacuum is off by default so that two runs count the same work.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgembed"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
	"github.com/paymentsapi/paymentsapi/migrations"
	"github.com/paymentsapi/paymentsapi/tools/bench"
	"github.com/paymentsapi/paymentsapi/tools/bench/waldump"
)

// tables are the tables a new payment writes, reported one by one.
var tables = []string{"idempotency_keys", "payments", "payment_transitions", "outbox_events"}

type options struct {
	url            string
	version        int64
	warmup, count  int
	workers        int
	walCompression string
	autovacuum     bool
	vacuum         bool
	waldump        bool
	relayDuring    bool
	extraSQL       string
	reference      bool
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "", "a PostgreSQL server to use (superuser URL; its settings are changed with ALTER SYSTEM); empty: start a cluster of its own in a temporary directory")
	flag.Int64Var(&o.version, "version", 0, "migrate up to this version only (0: every migration; the relay reads the outbox's publication, which needs 30 or later)")
	flag.IntVar(&o.warmup, "warmup", 2000, "payments made before the measurement")
	flag.IntVar(&o.count, "payments", 2000, "payments measured")
	flag.IntVar(&o.workers, "workers", 4, "payments made at once")
	flag.StringVar(&o.walCompression, "wal-compression", "off", "wal_compression for the run: off, pglz, lz4 or zstd")
	flag.BoolVar(&o.autovacuum, "autovacuum", false, "leave autovacuum on during the run")
	flag.BoolVar(&o.vacuum, "vacuum", false, "VACUUM the database after the warm-up, before the checkpoint, as autovacuum does in a running service: "+
		"the measured payments then reuse the space it freed on old pages, and pay a full-page image for each such page")
	flag.BoolVar(&o.waldump, "waldump", false, "also print pg_waldump --stats=record of the measured WAL (own cluster only)")
	flag.BoolVar(&o.relayDuring, "relay-during", false, "run the relay while the payments are made (default: after them, so that it lags behind, as under load)")
	flag.BoolVar(&o.reference, "reference", false, "measure the reference flow of make bench (tools/bench/pgbench/flow.sql, run by pgbench) instead of the service's")
	flag.StringVar(&o.extraSQL, "sql", "", "SQL run after the migrations, to try a schema change before writing its migration")
	flag.Parse()
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "walflow:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	serverURL, dataDir := o.url, ""
	if serverURL == "" {
		dir, err := os.MkdirTemp("", "walflow-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		// As root, the cluster runs as the postgres OS user, which must be
		// able to enter the temporary directory (0700).
		if err := os.Chmod(dir, 0o711); err != nil {
			return err
		}
		cluster, err := pgembed.Start(ctx, pgembed.Options{DataDir: filepath.Join(dir, "postgres")})
		if err != nil {
			return err
		}
		defer func() { _ = cluster.Stop(context.WithoutCancel(ctx)) }()
		serverURL, dataDir = cluster.URL("postgres"), cluster.DataDir()
	}
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	autovacuum := "off"
	if o.autovacuum {
		autovacuum = "on"
	}
	for _, s := range []string{
		"ALTER SYSTEM SET wal_compression = " + pgx.Identifier{o.walCompression}.Sanitize(),
		"ALTER SYSTEM SET autovacuum = " + autovacuum,
		"ALTER SYSTEM SET synchronous_commit = off",
		"SELECT pg_reload_conf()",
		// The relay's slot, left by an earlier run, would keep the database.
		"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = 'walflow'",
		"DROP DATABASE IF EXISTS walflow WITH (FORCE)",
		"CREATE DATABASE walflow",
	} {
		if _, err := admin.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	defer func() {
		for _, s := range []string{"ALTER SYSTEM RESET wal_compression", "ALTER SYSTEM RESET autovacuum",
			"ALTER SYSTEM RESET synchronous_commit", "SELECT pg_reload_conf()"} {
			_, _ = admin.Exec(context.WithoutCancel(ctx), s)
		}
	}()

	dbURL, err := databaseURL(serverURL, "walflow", "walflow")
	if err != nil {
		return err
	}
	pgbenchURL, err := databaseURL(serverURL, "walflow", pgbenchApp)
	if err != nil {
		return err
	}
	if o.reference && (o.warmup%o.workers != 0 || o.count%o.workers != 0) {
		return errors.New("-reference: -warmup and -payments must be multiples of -workers (each pgbench client runs as many flows)")
	}
	// The service's own pool: its isolation level and its size (pgxpool's
	// default, 4 here, would cap -workers).
	pool, err := database.Open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	version, err := migrate(ctx, pool, o.version)
	if err != nil {
		return err
	}
	if o.extraSQL != "" {
		if _, err := pool.Exec(ctx, o.extraSQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("-sql: %w", err)
		}
	}

	simSrv, err := sim.Start(ctx, "127.0.0.1:0", sim.Options{})
	if err != nil {
		return err
	}
	defer simSrv.Close()
	quiet := slog.New(slog.DiscardHandler)
	core := app.New(app.Deps{
		DB: pool, Provider: simclient.New(simSrv.URL(), nil), Clock: clock.System{},
		Log: quiet, Metrics: metrics.New(prometheus.NewRegistry()),
	}, app.Config{ReplayTTL: 24 * time.Hour, Lease: 30 * time.Second, ProviderTimeout: 5 * time.Second, ProviderKeyWindow: 24 * time.Hour})
	relay := stream.NewRelay(stream.RelayDeps{
		ConnString: dbURL, DB: pool, Clock: clock.System{}, Log: quiet,
		Publisher: outbox.PublisherFunc(func(context.Context, outbox.Event) error { return nil }),
	}, stream.RelayConfig{})
	defer relay.Close(context.WithoutCancel(ctx))

	var seq atomic.Int64
	pay := func(n int) error {
		if o.reference {
			return runPGBench(ctx, admin, pgbenchURL, n, o.workers)
		}
		rctx, stop := context.WithCancel(ctx)
		var running sync.WaitGroup
		if o.relayDuring {
			running.Go(func() { relay.Run(rctx) })
		}
		err := createPayments(ctx, core, &seq, n, o.workers)
		stop()
		running.Wait()
		if err != nil {
			return err
		}
		return drain(ctx, relay)
	}
	if err := pay(o.warmup); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if o.vacuum {
		if _, err := pool.Exec(ctx, "VACUUM"); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
	}
	if _, err := admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	before, err := readCounters(ctx, pool, admin)
	if err != nil {
		return err
	}
	if err := pay(o.count); err != nil {
		return err
	}
	after, err := readCounters(ctx, pool, admin)
	if err != nil {
		return err
	}
	report(out, o, version, before, after)
	if o.waldump && dataDir != "" {
		if err := walByRelation(ctx, admin, pool, dataDir, before.lsn, after.lsn, out); err != nil {
			return err
		}
	}
	return nil
}

// databaseURL is serverURL with its database replaced by name, for the
// application app.
func databaseURL(serverURL, name, app string) (string, error) {
	cfg, err := pgx.ParseConfig(serverURL)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable&application_name=%s",
		cfg.User, cfg.Host, cfg.Port, name, app), nil
}

// migrate applies the migrations up to version (0: all) and returns the
// version reached.
func migrate(ctx context.Context, pool *pgxpool.Pool, version int64) (int64, error) {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		return 0, err
	}
	if version == 0 {
		_, err = p.Up(ctx)
	} else {
		_, err = p.UpTo(ctx, version)
	}
	if err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	return p.GetDBVersion(ctx)
}

// createPayments makes n new payments, workers at a time, each with a key
// and merchant reference of its own, as `make bench` does.
func createPayments(ctx context.Context, core *app.Core, seq *atomic.Int64, n, workers int) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		left     atomic.Int64
	)
	left.Store(int64(n))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				i := seq.Add(1)
				ref := fmt.Sprintf("walflow-%d-%d", time.Now().UnixNano(), i)
				reply, err := core.Payments.Create(ctx, "walflow", ref, payments.Command{
					AccountID: "acc_1", AmountMinor: 1000, Currency: "EUR", MerchantReference: ref,
					PaymentMethod: "pm_card_visa", Channel: "web",
				}, 0)
				if err == nil && reply.Response.Status != 201 {
					err = fmt.Errorf("payment %s answered %d: %s", ref, reply.Response.Status, reply.Response.Body)
				}
				if err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// drain publishes every event committed so far.
func drain(ctx context.Context, relay *stream.Relay) error {
	if _, err := relay.RunOnce(ctx); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	return nil
}

type tableCounters struct{ ins, upd, hot int64 }

type counters struct {
	lsn          string
	walBytes     int64 // since the cluster's start, from the WAL position
	records, fpi int64
	tables       map[string]tableCounters
}

// readCounters makes every connection of pool publish its statistics, then
// reads them. Since PostgreSQL 15 a backend keeps its counters to itself
// and publishes them when it goes idle, at most once a second, unless
// pg_stat_force_next_flush() asked for the next idle moment; that moment
// comes before the backend answers ReadyForQuery, so once the statement
// returned, its counters are in.
func readCounters(ctx context.Context, pool *pgxpool.Pool, admin *pgx.Conn) (counters, error) {
	conns := pool.AcquireAllIdle(ctx)
	for _, c := range conns {
		_, err := c.Exec(ctx, "SELECT pg_stat_force_next_flush()")
		c.Release()
		if err != nil {
			return counters{}, err
		}
	}
	c := counters{tables: map[string]tableCounters{}}
	err := admin.QueryRow(ctx, `
		SELECT pg_current_wal_insert_lsn()::text, (pg_current_wal_insert_lsn() - '0/0')::bigint,
		       wal_records, wal_fpi
		FROM pg_stat_wal`).Scan(&c.lsn, &c.walBytes, &c.records, &c.fpi)
	if err != nil {
		return c, err
	}
	rows, err := pool.Query(ctx, `
		SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
		WHERE relname = ANY($1)`, tables)
	if err != nil {
		return c, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			name string
			t    tableCounters
		)
		if err := rows.Scan(&name, &t.ins, &t.upd, &t.hot); err != nil {
			return c, err
		}
		c.tables[name] = t
	}
	return c, rows.Err()
}

func report(out io.Writer, o options, version int64, before, after counters) {
	n := float64(o.count)
	relay := "after the payments"
	if o.relayDuring {
		relay = "during the payments"
	}
	if o.reference {
		relay = "none: the reference flow (tools/bench/pgbench/flow.sql, pgbench -M prepared)"
	}
	fmt.Fprintf(out, "walflow: schema version %d, wal_compression=%s, autovacuum=%v, %d warm-up payments, %d measured, %d workers, relay %s\n",
		version, o.walCompression, o.autovacuum, o.warmup, o.count, o.workers, relay)
	if o.extraSQL != "" {
		fmt.Fprintf(out, "extra SQL: %s\n", o.extraSQL)
	}
	fmt.Fprintf(out, "per payment: WAL %.0f bytes, %.1f records, %.2f full-page images (WAL %s to %s)\n",
		float64(after.walBytes-before.walBytes)/n, float64(after.records-before.records)/n,
		float64(after.fpi-before.fpi)/n, before.lsn, after.lsn)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "table\tins/payment\tupd/payment\tHOT upd/payment\tHOT %\t")
	for _, name := range tables {
		b, a := before.tables[name], after.tables[name]
		upd, hot := a.upd-b.upd, a.hot-b.hot
		pct := "-"
		if upd > 0 {
			pct = fmt.Sprintf("%.0f%%", 100*float64(hot)/float64(upd))
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%s\t\n", name, float64(a.ins-b.ins)/n, float64(upd)/n, float64(hot)/n, pct)
	}
	_ = tw.Flush()
}

// pgBin is the directory of the server's own binaries (pg_config --bindir
// of the running server is not reachable from SQL; the server's path is).
func pgBin(ctx context.Context, admin *pgx.Conn) (string, error) {
	var v string
	if err := admin.QueryRow(ctx, "SELECT current_setting('server_version_num')").Scan(&v); err != nil {
		return "", err
	}
	dir := filepath.Join("/usr/lib/postgresql", v[:len(v)-4], "bin")
	if _, err := os.Stat(filepath.Join(dir, "pg_waldump")); err != nil {
		return "", errors.New("pg_waldump not found in " + dir)
	}
	return dir, nil
}

// walByRelation prints, per relation, the records and bytes of the WAL
// between from and to (pg_waldump, reading the cluster's pg_wal), so that
// the cost of each table and index shows.
func walByRelation(ctx context.Context, admin *pgx.Conn, pool *pgxpool.Pool, dataDir, from, to string, out io.Writer) error {
	// With synchronous_commit off the end may not be on disk yet.
	for {
		var flushed bool
		if err := admin.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn", to).Scan(&flushed); err != nil {
			return err
		}
		if flushed {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	bin, err := pgBin(ctx, admin)
	if err != nil {
		return err
	}
	type sum struct {
		records, bytes, fpi int64
		kinds               map[string]int64
	}
	byRel := map[string]*sum{}
	err = waldump.Read(ctx, bin, filepath.Join(dataDir, "pg_wal"), from, to, func(r waldump.Record) {
		key := r.RMgr // records without a relation, by resource manager
		if r.Rel != "" {
			key = r.Rel
		}
		s := byRel[key]
		if s == nil {
			s = &sum{kinds: map[string]int64{}}
			byRel[key] = s
		}
		s.records++
		s.bytes += r.Len
		s.kinds[r.RMgr+"/"+r.Desc]++
		if r.FirstFPI {
			s.fpi++
		}
	})
	if err != nil {
		return err
	}
	names := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT relfilenode::text, relname FROM pg_class WHERE relfilenode <> 0`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var node, name string
		if err := rows.Scan(&node, &name); err != nil {
			return err
		}
		names[node] = name
	}
	if err := rows.Err(); err != nil {
		return err
	}
	keys := make([]string, 0, len(byRel))
	for k := range byRel {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(byRel[b].bytes, byRel[a].bytes) })
	fmt.Fprintf(out, "\nWAL by relation (pg_waldump %s to %s; records without one by resource manager)\n", from, to)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "relation\trecords\tbytes\tFPIs\trecord kinds")
	for _, k := range keys {
		s := byRel[k]
		name := names[k]
		if name == "" {
			name = k
		}
		kinds := make([]string, 0, len(s.kinds))
		for kind, n := range s.kinds {
			kinds = append(kinds, fmt.Sprintf("%s %d", kind, n))
		}
		slices.Sort(kinds)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", name, s.records, s.bytes, s.fpi, strings.Join(kinds, ", "))
	}
	return tw.Flush()
}

const pgbenchApp = "walflow-pgbench"

// runPGBench runs n flows of the reference script, workers clients at a
// time, and returns once their statistics are in: a backend publishes them
// when it exits, just after it leaves pg_stat_activity.
func runPGBench(ctx context.Context, admin *pgx.Conn, dbURL string, n, workers int) error {
	if n == 0 {
		return nil
	}
	script, err := bench.PGBench.ReadFile(bench.FlowScript)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp("", "walflow-*.sql")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(script); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	bin, err := pgBin(ctx, admin)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pgbench"), "-n", "-M", "prepared",
		"-c", strconv.Itoa(workers), "-j", strconv.Itoa(workers), "-t", strconv.Itoa(n/workers), "-f", f.Name(), dbURL)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	for {
		var left int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, pgbenchApp).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			time.Sleep(500 * time.Millisecond)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}
