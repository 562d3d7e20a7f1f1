package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
)

// The growth mode (`make bench ARGS=-growth`): new payments
// through the API, on the API's database, in three states of its tables:
//
//  1. empty (only the warm-up's payments);
//  2. after -growth-rows finished payments were loaded, each with its key
//     and stored answer, its three transitions and its two published
//     events, copied in shape from a payment the API itself made (the
//     template), by set-based SQL in chunks, then VACUUM (ANALYZE);
//  3. while the API's own clean-up (internal/cleanup) erases the loaded
//     keys' answers: the API is restarted with a replay window
//     (IDEMPOTENCY_TTL) shorter than the age of every loaded key, so that
//     its janitor finds all of them expired, and erases them in batches
//     during the phase.
//
// The loaded payments were created, evenly spread, over growthWindow
// ending growthGap before the load began: inside the default replay window
// (24h) that the API of phases 1 and 2 runs with, so nothing is erased
// before phase 3, and inside the outbox retention (168h), so no event is
// deleted.
const (
	growthWindow = 20 * time.Hour
	growthGap    = time.Hour
	// growthTTL is the replay window of phase 3's API: shorter than
	// growthGap, so every loaded answer is expired.
	growthTTL = 50 * time.Minute
	// growthCleanupInterval is phase 3's CLEANUP_INTERVAL. A pass erases
	// until nothing expired is left, so with a backlog the interval hardly
	// matters; it makes the next pass start soon after one ends.
	growthCleanupInterval = 5 * time.Second
	// growthChunk is the number of payments loaded per transaction.
	growthChunk = 50_000
	// growthTemplateKey is the key of the payment whose rows the load copies.
	growthTemplateKey = "growth-template-0"
)

// growthTables are the tables the load fills, in the order it fills them.
var growthTables = []string{"payments", "idempotency_keys", "payment_transitions", "outbox_events"}

// growth runs the growth mode's phases.
func (b *benchRun) growth(ctx context.Context) (growthResult, error) {
	g := growthResult{Rows: b.cfg.GrowthRows, TTL: growthTTL}
	b.progress("warming up (%s of API load, and the template payment)", b.cfg.Warmup)
	if b.cfg.Warmup > 0 {
		if p := newPayments("warm-up", "warmup", b.cfg.Connections, b.cfg.Warmup).run(ctx, b.api.Client); p.Ops == 0 {
			return g, fmt.Errorf("warm-up: no payment was created: %s", fmtCounts(p.Unexpected))
		}
	}
	if err := seed(ctx, b.api.Client, "growth-template", 1, 1); err != nil {
		return g, err
	}
	if _, _, err := waitOutboxDrained(ctx, b.api.DB, drainTimeout); err != nil {
		return g, err
	}
	if err := clock.Sleep(ctx, statsFlushWait); err != nil {
		return g, err
	}

	var empty, grown, cleanup []phase
	for r := 1; r <= b.cfg.Rounds; r++ {
		p, err := b.growthPhase(ctx, &g.IO[0], newPayments(fmt.Sprintf("growth: empty tables, round %d", r), fmt.Sprintf("empty-r%d", r),
			b.cfg.Connections, b.cfg.Duration))
		if err != nil {
			return g, err
		}
		b.progress("empty tables, round %d/%d: new payments %.0f/s", r, b.cfg.Rounds, p.rate())
		empty = append(empty, p)
	}

	var err error
	if g.Load, err = b.loadPast(ctx, b.cfg.GrowthRows); err != nil {
		return g, err
	}
	b.progress("loaded %d payments in %s, vacuumed and analyzed in %s", g.Rows, fmtDuration(g.Load.Insert), fmtDuration(g.Load.Vacuum))

	for r := 1; r <= b.cfg.Rounds; r++ {
		p, err := b.growthPhase(ctx, &g.IO[1], newPayments(fmt.Sprintf("growth: %s rows, round %d", fmtCount(g.Rows), r), fmt.Sprintf("grown-r%d", r),
			b.cfg.Connections, b.cfg.Duration))
		if err != nil {
			return g, err
		}
		b.progress("%d rows loaded, round %d/%d: new payments %.0f/s", g.Rows, r, b.cfg.Rounds, p.rate())
		grown = append(grown, p)
	}

	// Phase 3: the API again, with a replay window every loaded key is past.
	if g.Erase.Stored0, err = storedAnswers(ctx, b.api.DB); err != nil {
		return g, err
	}
	if err := b.restartAPI(ctx, "IDEMPOTENCY_TTL="+growthTTL.String(), "CLEANUP_INTERVAL="+growthCleanupInterval.String()); err != nil {
		return g, err
	}
	b.progress("restarted the API with IDEMPOTENCY_TTL=%s CLEANUP_INTERVAL=%s; warming up %s", growthTTL, growthCleanupInterval, b.cfg.Warmup)
	warm := 0
	if b.cfg.Warmup > 0 {
		p := newPayments("clean-up warm-up", "cleanup-warmup", b.cfg.Connections, b.cfg.Warmup).run(ctx, b.api.Client)
		warm = p.Ops
	}
	for r := 1; r <= b.cfg.Rounds; r++ {
		before, err := storedAnswers(ctx, b.api.DB)
		if err != nil {
			return g, err
		}
		if r == 1 {
			g.Erase.BeforePhase = max(g.Erase.Stored0+int64(warm)-before, 0)
			g.Erase.Expired, err = expiredAnswers(ctx, b.api.DB, growthTTL)
			if err != nil {
				return g, err
			}
		}
		windowStart := time.Now()
		p, err := b.growthPhase(ctx, &g.IO[2], newPayments(fmt.Sprintf("growth: during clean-up, round %d", r), fmt.Sprintf("cleanup-r%d", r),
			b.cfg.Connections, b.cfg.Duration))
		if err != nil {
			return g, err
		}
		window := time.Since(windowStart)
		after, err := storedAnswers(ctx, b.api.DB)
		if err != nil {
			return g, err
		}
		// Every payment of the phase stored its answer (inside the window).
		erased := max(before+int64(p.Ops)-after, 0)
		g.Erase.During += erased
		g.Erase.PerRound = append(g.Erase.PerRound, erasedRound{Erased: erased, Window: window})
		b.progress("during clean-up, round %d/%d: new payments %.0f/s, %d answers erased", r, b.cfg.Rounds, p.rate(), erased)
		cleanup = append(cleanup, p)
	}
	if g.Erase.ExpiredLeft, err = expiredAnswers(ctx, b.api.DB, growthTTL); err != nil {
		return g, err
	}
	if err := b.api.DB.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE response_status IS NOT NULL AND response_body IS NULL`).
		Scan(&g.Erase.ErasedTotal); err != nil {
		return g, fmt.Errorf("count erased answers: %w", err)
	}
	g.Phases = append(append(append(g.Phases, empty...), grown...), cleanup...)
	g.Empty = combine("growth: empty tables, all rounds", empty)
	g.Grown = combine(fmt.Sprintf("growth: %s rows, all rounds", fmtCount(g.Rows)), grown)
	g.Cleanup = combine("growth: during clean-up, all rounds", cleanup)
	return g, nil
}

// growthPhase runs w through the API and adds the block reads of the API's
// database's relations over the phase's counters' span to io.
func (b *benchRun) growthPhase(ctx context.Context, io *relIO, w workload) (phase, error) {
	io0, err := readRelIO(ctx, b.api.DB)
	if err != nil {
		return phase{}, err
	}
	m0, err := readMaintenance(ctx, b.api.DB)
	if err != nil {
		return phase{}, err
	}
	p, err := b.apiPhase(ctx, w)
	if err != nil {
		return p, err
	}
	io1, err := readRelIO(ctx, b.api.DB)
	if err != nil {
		return p, err
	}
	*io = io.add(io1.sub(io0))
	m1, err := readMaintenance(ctx, b.api.DB)
	if err != nil {
		return p, err
	}
	p.Maintenance = m1.sub(m0)
	return p, nil
}

// readMaintenance reads how many times autovacuum vacuumed (Read) and
// analyzed (Hit) each table of the database db is connected to.
func readMaintenance(ctx context.Context, db *pgx.Conn) (relIO, error) {
	return readPairs(ctx, db, "autovacuum statistics",
		`SELECT relname, autovacuum_count, autoanalyze_count FROM pg_stat_user_tables`)
}

// readRelIO reads the block reads and hits of every table and index of
// the database db is connected to.
func readRelIO(ctx context.Context, db *pgx.Conn) (relIO, error) {
	return readPairs(ctx, db, "block statistics", `
		SELECT relname, coalesce(heap_blks_read, 0), coalesce(heap_blks_hit, 0) FROM pg_statio_user_tables
		UNION ALL
		SELECT indexrelname, coalesce(idx_blks_read, 0), coalesce(idx_blks_hit, 0) FROM pg_statio_user_indexes`)
}

// readPairs reads sql's rows (a relation's name and two counters) by name.
func readPairs(ctx context.Context, db *pgx.Conn, what, sql string) (relIO, error) {
	rows, err := db.Query(ctx, sql)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	m := relIO{}
	var name string
	var first, second int64
	_, err = pgx.ForEachRow(rows, []any{&name, &first, &second}, func() error {
		m[name] = blocks{Read: first, Hit: second}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return m, nil
}

// storedAnswers counts the finished keys whose answer is still stored, by
// the clean-up's own index (idempotency_keys_erasable_idx).
func storedAnswers(ctx context.Context, db *pgx.Conn) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE completed_at IS NOT NULL AND response_body IS NOT NULL`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count stored answers: %w", err)
	}
	return n, nil
}

// expiredAnswers counts the stored answers past a replay window of ttl.
func expiredAnswers(ctx context.Context, db *pgx.Conn, ttl time.Duration) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys
		WHERE completed_at IS NOT NULL AND completed_at <= now() - $1::interval AND response_body IS NOT NULL`,
		fmt.Sprintf("%d seconds", int64(ttl.Seconds()))).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count expired answers: %w", err)
	}
	return n, nil
}

// loadPast loads n payments (loadGrowth) as a past the outbox relay has
// published: the API stops, its relay's slot goes (else the relay would
// read and publish the 2n loaded events), and its position is recorded as
// now, so that the slot the restarted API creates catches up only the
// events written since CatchupMargin before now, which the loaded ones,
// at least growthGap old, are not.
func (b *benchRun) loadPast(ctx context.Context, n int) (loadResult, error) {
	if err := b.api.Proc.stop(); err != nil {
		return loadResult{}, fmt.Errorf("stop the API: %w", err)
	}
	slot := stream.SlotFor(apiDatabase)
	// The stopped API's sender lets go of the slot a moment after it
	// exits.
	for start := time.Now(); ; {
		_, err := b.api.DB.Exec(ctx, `
			SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			break
		}
		if time.Since(start) > 30*time.Second {
			return loadResult{}, fmt.Errorf("drop the relay's slot: %w", err)
		}
		if err := clock.Sleep(ctx, 100*time.Millisecond); err != nil {
			return loadResult{}, err
		}
	}
	lr, err := b.loadGrowth(ctx, n)
	if err != nil {
		return lr, err
	}
	if _, err := b.api.DB.Exec(ctx, `
		INSERT INTO outbox_stream_positions (slot, committed_at, updated_at) VALUES ($1, now(), now())
		ON CONFLICT (slot) DO UPDATE SET committed_at = now(), updated_at = now(), catching_up = false`, slot); err != nil {
		return lr, fmt.Errorf("record the relay's position: %w", err)
	}
	return lr, b.restartAPI(ctx, b.apiSet.Env...)
}

// restartAPI stops the API and starts it again on the same database, with
// env added to its environment.
func (b *benchRun) restartAPI(ctx context.Context, env ...string) error {
	if err := b.api.Proc.stop(); err != nil {
		return fmt.Errorf("stop the API: %w", err)
	}
	dataDir, err := filepath.Abs(b.cfg.DataDir)
	if err != nil {
		return err
	}
	s := b.apiSet
	if s.Bin, err = filepath.Abs(b.cfg.APIBin); err != nil {
		return err
	}
	s.DatabaseURL = b.cluster.URL(apiDatabase)
	s.LogPath = filepath.Join(dataDir, filepath.Base(s.Bin)+".log")
	s.Env, s.AppendLog = env, true
	proc, err := startAPI(ctx, s)
	if err != nil {
		return err
	}
	b.api.Proc = proc // the closer stops whichever process is current
	b.api.Client.close()
	b.api.Client = newAPIClient(proc.URL, benchSecret, b.cfg.Connections)
	c := b.api.Client
	b.closers = append(b.closers, c.close)
	return nil
}

// template is the payment the load copies: its ids and its creation time,
// which the copies' are derived from.
type template struct {
	PaymentID, Reference, Key string
	CreatedAt                 time.Time
}

// column is one column of a table, as the load copies it.
type column struct {
	Name, Type string
}

// loadGrowth loads n finished payments, shaped like the template, into the
// API's database, then vacuums and analyzes the tables.
func (b *benchRun) loadGrowth(ctx context.Context, n int) (loadResult, error) {
	var lr loadResult
	conn, err := pgx.Connect(ctx, b.cluster.URL(apiDatabase))
	if err != nil {
		return lr, fmt.Errorf("connect for the load: %w", err)
	}
	defer conn.Close(context.Background())
	var t template
	var state string
	var transitions, events int
	err = conn.QueryRow(ctx, `
		SELECT p.id, p.merchant_reference, k.idempotency_key, p.created_at, p.state,
		       (SELECT count(*) FROM payment_transitions WHERE payment_id = p.id),
		       (SELECT count(*) FROM outbox_events WHERE aggregate_id = p.id)
		FROM idempotency_keys k JOIN payments p ON p.id = k.resource_id
		WHERE k.tenant_id = $1 AND k.idempotency_key = $2 AND k.response_body IS NOT NULL`,
		benchTenant, growthTemplateKey).Scan(&t.PaymentID, &t.Reference, &t.Key, &t.CreatedAt, &state, &transitions, &events)
	if err != nil {
		return lr, fmt.Errorf("read the template payment %s: %w", growthTemplateKey, err)
	}
	if state != "COMPLETED" || transitions != 3 || events != 2 {
		return lr, fmt.Errorf("the template payment %s is %s with %d transitions and %d events: want COMPLETED, 3 and 2",
			t.PaymentID, state, transitions, events)
	}
	cols := map[string][]column{}
	for _, table := range growthTables {
		if cols[table], err = tableColumns(ctx, conn, table); err != nil {
			return lr, err
		}
	}
	stmts, err := growthStatements(cols, t)
	if err != nil {
		return lr, err
	}
	if err := b.mon.checkpoint(ctx); err != nil {
		return lr, err
	}
	c0, err := b.mon.counters(ctx, apiDatabase)
	if err != nil {
		return lr, err
	}
	start := time.Now()
	// The payments are inserted in their final state, as the service leaves
	// them: the state machine's trigger (which allows only a new RECEIVED
	// payment) and the foreign keys' triggers are off for this session
	// only; the rows are consistent by construction.
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		return lr, fmt.Errorf("load: %w", err)
	}
	first := start.Add(-growthGap - growthWindow)
	step := growthWindow / time.Duration(n)
	for _, ch := range chunks(n, growthChunk) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return lr, err
		}
		for i, sql := range stmts {
			if _, err := tx.Exec(ctx, sql, ch[0], ch[1], first, step.Microseconds(), t.CreatedAt); err != nil {
				_ = tx.Rollback(ctx)
				return lr, fmt.Errorf("load %s, payments %d to %d: %w", growthTables[i], ch[0], ch[1], err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return lr, err
		}
		b.progress("loaded payments %d to %d of %d (%s)", ch[0], ch[1], n, fmtDuration(time.Since(start)))
	}
	if _, err := conn.Exec(ctx, `RESET session_replication_role`); err != nil {
		return lr, err
	}
	lr.Insert = time.Since(start)
	c1, err := b.mon.counters(ctx, apiDatabase)
	if err != nil {
		return lr, err
	}
	lr.WALBytes = c1.WALBytes - c0.WALBytes
	vacuumStart := time.Now()
	// What autovacuum would have done to tables that grew this way, done
	// now rather than during the measured phase; ANALYZE gives the planner
	// the tables' new sizes.
	if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) `+strings.Join(growthTables, ", ")); err != nil {
		return lr, fmt.Errorf("vacuum and analyze after the load: %w", err)
	}
	lr.Vacuum = time.Since(vacuumStart)
	lr.Sizes = map[string]int64{}
	rows, err := conn.Query(ctx, `SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i')`)
	if err != nil {
		return lr, fmt.Errorf("relation sizes: %w", err)
	}
	var rel string
	var size int64
	if _, err := pgx.ForEachRow(rows, []any{&rel, &size}, func() error { lr.Sizes[rel] = size; return nil }); err != nil {
		return lr, fmt.Errorf("relation sizes: %w", err)
	}
	for _, table := range growthTables {
		ts := tableSize{Name: table}
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()+`),
			pg_table_size($1::regclass), pg_indexes_size($1::regclass)`, table).Scan(&ts.Rows, &ts.Table, &ts.Indexes); err != nil {
			return lr, fmt.Errorf("size of %s: %w", table, err)
		}
		lr.Tables = append(lr.Tables, ts)
	}
	return lr, nil
}

// tableColumns lists table's columns, but those the database fills itself
// (GENERATED ALWAYS AS IDENTITY, generated columns).
func tableColumns(ctx context.Context, conn *pgx.Conn, table string) ([]column, error) {
	rows, err := conn.Query(ctx, `
		SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attidentity <> 'a' AND attgenerated = ''
		ORDER BY attnum`, table)
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.Name, &c.Type)
	})
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	return cols, nil
}

// growthStatements builds one INSERT ... SELECT per table of growthTables.
// Each copies the template's rows for payments $1 to $2: every column as
// the template has it, but
//
//   - the payment id (pay_ and 26 characters, as ids.New), the merchant
//     reference and the idempotency key (a UUID's 36 characters) are the
//     copy's own, wherever the template's appear (in the stored answer, the
//     events' payloads, the transitions' payment_id);
//   - the fingerprint is another SHA-256;
//   - an event's id is a UUIDv7 of its creation time, as ids.NewEventID;
//   - every timestamp keeps its distance from the template's creation time,
//     moved to the copy's: payment i created at $3 + i × $4 µs.
func growthStatements(cols map[string][]column, t template) ([]string, error) {
	idLen := len(t.PaymentID) - len("pay_")
	if !strings.HasPrefix(t.PaymentID, "pay_") || idLen < 1 || idLen > 64 {
		return nil, fmt.Errorf("the template's payment id %q is not pay_ and up to 64 characters", t.PaymentID)
	}
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	swap := func(expr string) string {
		return fmt.Sprintf("replace(replace(%s, %s, n.pid), %s, n.ref)", expr, lit(t.PaymentID), lit(t.Reference))
	}
	value := func(table string, c column) string {
		col := "t." + pgx.Identifier{c.Name}.Sanitize()
		switch {
		case table == "idempotency_keys" && c.Name == "idempotency_key":
			return "n.ikey"
		case table == "idempotency_keys" && c.Name == "fingerprint":
			return "substring(sha256(convert_to('fp' || i, 'UTF8')) || sha256(convert_to('fp2' || i, 'UTF8')) from 1 for octet_length(" + col + "))"
		case table == "outbox_events" && c.Name == "id":
			return `(lpad(to_hex((extract(epoch FROM g.b + (t.created_at - $5::timestamptz)) * 1000)::bigint), 12, '0') || '7' ||
				substr(md5('ev' || i || '-' || t.seq), 1, 3) || '8' || substr(md5('ev' || i || '-' || t.seq), 4, 15))::uuid`
		case c.Type == "timestamp with time zone":
			return fmt.Sprintf("CASE WHEN isfinite(%[1]s) THEN g.b + (%[1]s - $5::timestamptz) ELSE %[1]s END", col)
		case c.Type == "text":
			return swap(col)
		case c.Type == "jsonb":
			return swap(col+"::text") + "::jsonb"
		case c.Type == "bytea":
			return "convert_to(" + swap("convert_from("+col+", 'UTF8')") + ", 'UTF8')"
		default:
			return col
		}
	}
	where := map[string]string{
		"payments":            "t.id = " + lit(t.PaymentID),
		"idempotency_keys":    "t.tenant_id = " + lit(benchTenant) + " AND t.idempotency_key = " + lit(t.Key),
		"payment_transitions": "t.payment_id = " + lit(t.PaymentID),
		"outbox_events":       "t.aggregate_id = " + lit(t.PaymentID),
	}
	order := map[string]string{"payments": "i", "idempotency_keys": "i", "payment_transitions": "i, t.id", "outbox_events": "i, t.seq"}
	var out []string
	for _, table := range growthTables {
		cs := cols[table]
		if len(cs) == 0 {
			return nil, fmt.Errorf("no columns for %s", table)
		}
		names := make([]string, len(cs))
		values := make([]string, len(cs))
		for i, c := range cs {
			names[i] = pgx.Identifier{c.Name}.Sanitize()
			values[i] = value(table, c)
		}
		out = append(out, fmt.Sprintf(`INSERT INTO %s (%s)
SELECT %s
FROM generate_series($1::bigint, $2::bigint) i
CROSS JOIN LATERAL (SELECT $3::timestamptz + i * $4::bigint * interval '1 microsecond' AS b) g
CROSS JOIN LATERAL (SELECT 'pay_' || substr(md5('pay' || i) || md5('pay2' || i), 1, %d) AS pid,
                           'order-' || lpad(i::text, 10, '0') AS ref,
                           md5('key' || i)::uuid::text AS ikey) n
CROSS JOIN %s t
WHERE %s
ORDER BY %s`, pgx.Identifier{table}.Sanitize(), strings.Join(names, ", "), strings.Join(values, ",\n       "), idLen,
			pgx.Identifier{table}.Sanitize(), where[table], order[table]))
	}
	return out, nil
}
