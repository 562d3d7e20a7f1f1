// Command paymentsbench is `make bench`: it measures the payments API
// against what the database can do, on this machine, in one run.
//
// It starts its own PostgreSQL (internal/pgembed, the settings of dev mode:
// fsync, synchronous_commit and full_page_writes on) under .data/bench, the
// provider simulator, and the API built from cmd/paymentsapi as a child
// process; then, interleaved round by round, it runs the reference payment
// flow in pgbench (tools/bench/pgbench/flow.sql) on a second database of the same
// cluster, migrated like the API's, the same flow behind a bare Go HTTP
// handler (tools/bench/floorapi, "the floor": what any Go API doing this flow
// costs here) on a third, and new payments through the API, each driven by
// the same closed-loop load generator. Then replays, a same-key storm and a
// short soak. It prints one table, with the bench's targets (report.go) and
// whether each is met; a missed target is reported, not an error.
//
//	go run ./tools/paymentsbench [-connections 16] [-duration 15s] [-rounds 2] ...
//
// With -growth (growth.go) it runs only the API, on its own
// database: new payments on empty tables, after -growth-rows finished
// payments were loaded, and while the API's clean-up erases their expired
// answers; no pgbench, floor, replays, storm or soak.
//
// docs/BENCHMARKS.md explains what each number means.
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
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgembed"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/tools/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "paymentsbench:", err)
		os.Exit(1)
	}
}

// Names of what the run creates in its cluster.
const (
	apiDatabase       = "paymentsbench"
	referenceDatabase = "paymentsbench_ref"
	floorDatabase     = "paymentsbench_floor"
	apiBDatabase      = "paymentsbench_b"
	benchTenant       = "bench"
	benchSecret       = "sk_test_bench"
	pgbenchAppName    = "pgbench"
	replayKeys        = 256 // payments made before the replay phase, replayed in turn
)

// config is the run's settings, from flags.
type config struct {
	Connections    int
	Duration       time.Duration // of each measured phase of a round
	Rounds         int
	ReplayDuration time.Duration
	Warmup         time.Duration
	StormRequests  int
	Soak           time.Duration
	APIBin         string
	// APIBinB is a second build of the API, measured beside the first in
	// every round on a database of its own: an A/B comparison within one
	// run. Empty: none.
	APIBinB string
	// Plain measures, when there is no APIBinB, the API's plain
	// configuration (plainEnv) as API B: the same binary, beside the
	// default one in every round.
	Plain bool
	// RelayB is API B's OUTBOX_RELAY: with it and no APIBinB, API B is
	// the API's own binary, so that the rounds set one outbox reader
	// beside the other (the API's own: auto, the stream here).
	RelayB string
	// ReplayCache runs the API (A) with REPLAY_CACHE=memory: its replays
	// answered from its memory of answers (package answercache).
	ReplayCache bool
	FloorBin    string // tools/bench/floorapi; empty: no floor phases
	DataDir     string
	PGBench     string
	// Growth runs the growth mode instead of the default
	// phases: new payments on empty tables, with GrowthRows finished
	// payments loaded, and while clean-up erases their expired answers.
	Growth     bool
	GrowthRows int
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("paymentsbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.Connections, "connections", 16, "concurrent clients: API connections, and pgbench clients")
	fs.DurationVar(&c.Duration, "duration", 15*time.Second, "length of each measured phase of a round (pgbench, then new payments)")
	fs.IntVar(&c.Rounds, "rounds", 2, "rounds of pgbench and new payments, interleaved")
	fs.DurationVar(&c.ReplayDuration, "replay-duration", 10*time.Second, "length of the replay phase")
	fs.DurationVar(&c.Warmup, "warmup", 5*time.Second, "unmeasured load before the first round, for the API and for pgbench")
	fs.IntVar(&c.StormRequests, "storm", 1000, "requests of the same-key storm (0 skips it)")
	fs.DurationVar(&c.Soak, "soak", 30*time.Second, "length of the soak at the end (0 skips it)")
	fs.StringVar(&c.APIBin, "api-bin", filepath.Join("bin", "paymentsapi"), "the API binary (make build)")
	fs.StringVar(&c.APIBinB, "api-bin-b", "",
		"a second API binary (another build), measured after the first in every round on its own database, for an A/B comparison within one run; empty: none")
	fs.BoolVar(&c.Plain, "plain", true,
		"measure the plain configuration ("+strings.Join(plainEnv, " ")+") as API B, beside the default one; ignored with -api-bin-b, -relay-b or -growth")
	fs.StringVar(&c.RelayB, "relay-b", "",
		"OUTBOX_RELAY of API B (poll, stream or auto); without -api-bin-b, API B is -api-bin: the readers of the outbox compared, the API's own being auto (the stream on the bench's server)")
	fs.BoolVar(&c.ReplayCache, "replay-cache", false,
		"run the API with REPLAY_CACHE=memory (API B, if any, keeps the default): replays answered from memory")
	fs.StringVar(&c.FloorBin, "floor-bin", filepath.Join("bin", "floorapi"),
		"the floor (tools/bench/floorapi: the reference flow behind a bare Go handler), measured beside the API in every round; empty: none")
	fs.StringVar(&c.DataDir, "data-dir", filepath.Join(".data", "bench"),
		"where the bench's PostgreSQL cluster and logs live; its databases are recreated on every run")
	fs.StringVar(&c.PGBench, "pgbench", "", "pgbench binary; default: the server's version under /usr/lib/postgresql, or $PATH")
	fs.BoolVar(&c.Growth, "growth", false,
		"growth mode: new payments through the API on empty tables, with -growth-rows finished payments loaded, and while clean-up erases their answers; no pgbench, floor, replays, storm or soak")
	fs.IntVar(&c.GrowthRows, "growth-rows", 2_000_000, "finished keys, with their payments, transitions and events, loaded by -growth")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.Connections < 1:
		return c, errors.New("-connections must be at least 1")
	case c.Rounds < 1:
		return c, errors.New("-rounds must be at least 1")
	case c.Duration < time.Second || c.ReplayDuration < time.Second:
		return c, errors.New("-duration and -replay-duration must be at least 1s")
	case c.Warmup < 0 || c.Soak < 0 || c.StormRequests < 0:
		return c, errors.New("-warmup, -soak and -storm cannot be negative")
	case c.Growth && c.GrowthRows < 1:
		return c, errors.New("-growth-rows must be at least 1")
	case c.RelayB != "" && c.RelayB != "poll" && c.RelayB != "stream" && c.RelayB != "auto":
		return c, fmt.Errorf("-relay-b must be poll, stream or auto, not %q", c.RelayB)
	case c.Growth && (c.APIBinB != "" || c.RelayB != ""):
		return c, errors.New("-api-bin-b compares new payments; the growth mode does not run them")
	}
	if c.APIBinB != "" || c.RelayB != "" || c.Growth {
		c.Plain = false
	}
	return c, nil
}

// plainEnv is the API's plain configuration: each transaction committed on
// its own, as written, and the outbox read by polling. It has no target in
// the report, only its ratios.
var plainEnv = []string{"COMMIT_MODE=inline", "OUTBOX_RELAY=poll"}

// run is the whole program: everything it needs from the OS is a parameter.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	b := &benchRun{cfg: cfg, stderr: stderr, started: time.Now(), loadBefore: loadAverage()}
	defer b.close()
	if err := b.start(ctx, getenv); err != nil {
		return err
	}
	if cfg.Growth {
		g, err := b.growth(ctx)
		if err != nil {
			return err
		}
		return writeGrowthReport(stdout, b.header(), g)
	}
	phases, s, err := b.measure(ctx)
	if err != nil {
		return err
	}
	return writeReport(stdout, b.header(), phases, s)
}

// service is an HTTP service the bench drives: the API, or the floor.
type service struct {
	Name     string // in messages: "the API"
	Database string
	// NoRelay: the service publishes nothing (the floor), so a phase does
	// not wait for its outbox to drain.
	NoRelay bool
	Proc    *apiProcess
	DB      *pgx.Conn // to its database: the outbox's backlog
	Client  *apiClient
}

// benchRun is one run: what it started, and how to reach it.
type benchRun struct {
	cfg     config
	stderr  io.Writer
	started time.Time

	cluster    *pgembed.Cluster
	mon        *monitor
	sim        *sim.Server
	api        *service
	apiSet     apiSettings // what the API was started with (growth restarts it)
	floor      *service    // nil: -floor-bin ''
	apiB       *service    // nil: no -api-bin-b
	pgbench    pgbenchRun
	loadBefore string
	pgVersion  string
	pgSettings string
	closers    []func()
}

func (b *benchRun) progress(format string, args ...any) {
	fmt.Fprintf(b.stderr, "paymentsbench: "+format+"\n", args...)
}

// close stops what start started, in reverse order.
func (b *benchRun) close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
}

// start starts the cluster, recreates both databases, the simulator and the
// API, and prepares pgbench.
func (b *benchRun) start(ctx context.Context, getenv func(string) string) error {
	dataDir, err := filepath.Abs(b.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	quiet := slog.New(slog.NewTextHandler(b.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	b.progress("starting PostgreSQL under %s (the settings of dev mode)", dataDir)
	b.cluster, err = pgembed.Start(ctx, pgembed.Options{DataDir: filepath.Join(dataDir, "postgres"), Logger: quiet})
	if err != nil {
		return err
	}
	b.closers = append(b.closers, func() {
		if err := b.cluster.Stop(context.Background()); err != nil {
			b.progress("stop PostgreSQL: %v", err)
		}
	})
	if b.mon, err = newMonitor(ctx, b.cluster); err != nil {
		return err
	}
	b.closers = append(b.closers, func() { b.mon.close(context.Background()) })
	var major int
	if b.pgVersion, major, b.pgSettings, err = b.mon.settings(ctx); err != nil {
		return err
	}
	if err := b.mon.recreateDatabase(ctx, apiDatabase); err != nil {
		return err
	}
	if !b.cfg.Growth {
		if err := b.startReference(ctx, getenv, dataDir, major, quiet); err != nil {
			return err
		}
	}

	// The provider runs here, not in the API: it stands for a remote
	// service, so its CPU is not the API's; and its charges are at hand for
	// the storm.
	if b.sim, err = sim.Start(ctx, "127.0.0.1:0", sim.Options{}); err != nil {
		return fmt.Errorf("start the provider simulator: %w", err)
	}
	b.closers = append(b.closers, func() { _ = b.sim.Close() })

	settings := apiSettings{ProviderURL: b.sim.URL(), APIKeys: benchTenant + ":" + benchSecret, getenv: getenv}
	settingsA := settings
	if b.cfg.ReplayCache {
		settingsA.Env = append(slices.Clone(settings.Env), "REPLAY_CACHE=memory")
	}
	if b.api, err = b.startService(ctx, "the API", b.cfg.APIBin, apiDatabase, filepath.Base(b.cfg.APIBin), dataDir, settingsA); err != nil {
		return err
	}
	if b.cfg.APIBinB != "" || b.cfg.RelayB != "" || b.cfg.Plain {
		if err := b.mon.recreateDatabase(ctx, apiBDatabase); err != nil {
			return err
		}
		settingsB := settings
		switch {
		case b.cfg.Plain:
			settingsB.Env = append(slices.Clone(settings.Env), plainEnv...)
		case b.cfg.RelayB != "":
			settingsB.Env = append(slices.Clone(settings.Env), "OUTBOX_RELAY="+b.cfg.RelayB)
		}
		if b.apiB, err = b.startService(ctx, "API B", cmp.Or(b.cfg.APIBinB, b.cfg.APIBin), apiBDatabase, "paymentsapi-b", dataDir, settingsB); err != nil {
			return err
		}
	}
	b.apiSet = settingsA
	if b.cfg.FloorBin != "" && !b.cfg.Growth {
		if err := b.mon.recreateDatabase(ctx, floorDatabase); err != nil {
			return err
		}
		if b.floor, err = b.startService(ctx, "the floor", b.cfg.FloorBin, floorDatabase, filepath.Base(b.cfg.FloorBin), dataDir, settings); err != nil {
			return fmt.Errorf("%w (-floor-bin '' runs the bench without it)", err)
		}
		b.floor.NoRelay = true
	}
	return nil
}

// startReference recreates and migrates the reference database and
// prepares pgbench.
func (b *benchRun) startReference(ctx context.Context, getenv func(string) string, dataDir string, major int, quiet *slog.Logger) error {
	if err := b.mon.recreateDatabase(ctx, referenceDatabase); err != nil {
		return err
	}
	if err := b.mon.migrate(ctx, referenceDatabase, quiet); err != nil {
		return fmt.Errorf("migrate the reference database: %w", err)
	}

	pgbenchBin, err := pgbenchPath(b.cfg.PGBench, getenv, major)
	if err != nil {
		return err
	}
	script, err := bench.PGBench.ReadFile(bench.FlowScript)
	if err != nil {
		return fmt.Errorf("pgbench script: %w", err)
	}
	scriptPath := filepath.Join(dataDir, "pgbench-flow.sql")
	if err := os.WriteFile(scriptPath, script, 0o644); err != nil {
		return fmt.Errorf("pgbench script: %w", err)
	}
	b.pgbench = pgbenchRun{
		Bin: pgbenchBin, Script: scriptPath, Port: b.cluster.Port(), Database: referenceDatabase,
		Clients: b.cfg.Connections, Threads: min(b.cfg.Connections, runtime.NumCPU()),
		LogDir: filepath.Join(dataDir, "pgbench-logs"),
	}

	return nil
}

// startService starts the HTTP service bin (the API, or the floor) on
// database dbName, logging to logName.log under dataDir, and connects to
// both.
func (b *benchRun) startService(ctx context.Context, name, bin, dbName, logName, dataDir string, s apiSettings) (*service, error) {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return nil, fmt.Errorf("%s: binary: %w", name, err)
	}
	s.Bin, s.DatabaseURL = bin, b.cluster.URL(dbName)
	s.LogPath = filepath.Join(dataDir, logName+".log")
	b.progress("starting %s (%s; its log: %s)", name, bin, s.LogPath)
	svc := &service{Name: name, Database: dbName}
	if svc.Proc, err = startAPI(ctx, s); err != nil {
		return nil, err
	}
	b.closers = append(b.closers, func() {
		if err := svc.Proc.stop(); err != nil {
			b.progress("%s: %v", name, err)
		}
	})
	if svc.DB, err = pgx.Connect(ctx, s.DatabaseURL); err != nil {
		return nil, fmt.Errorf("connect to the database of %s: %w", name, err)
	}
	b.closers = append(b.closers, func() { _ = svc.DB.Close(context.Background()) })
	svc.Client = newAPIClient(svc.Proc.URL, benchSecret, b.cfg.Connections)
	b.closers = append(b.closers, svc.Client.close)
	return svc, nil
}

// measure runs every phase and returns them with their summary.
func (b *benchRun) measure(ctx context.Context) ([]phase, summary, error) {
	if err := b.warmUp(ctx); err != nil {
		return nil, summary{}, err
	}
	var phases []phase
	for r := 1; r <= b.cfg.Rounds; r++ {
		ref, err := b.referencePhase(ctx, fmt.Sprintf("pgbench flow, round %d", r), b.cfg.Duration)
		if err != nil {
			return nil, summary{}, err
		}
		b.progress("round %d/%d: pgbench flow %.0f/s", r, b.cfg.Rounds, ref.rate())
		phases = append(phases, ref)
		if b.floor != nil {
			floor, err := b.servicePhase(ctx, b.floor, floorPayments(fmt.Sprintf("Go floor, round %d", r), fmt.Sprintf("floor-r%d", r),
				b.cfg.Connections, b.cfg.Duration))
			if err != nil {
				return nil, summary{}, err
			}
			b.progress("round %d/%d: the floor %.0f/s", r, b.cfg.Rounds, floor.rate())
			phases = append(phases, floor)
		}
		// With a second build, the two take turns going first, so that
		// neither always pays for what the other left behind (autovacuum
		// of its tables, a checkpoint's full-page writes).
		builds := []*service{b.api}
		if b.apiB != nil {
			builds = append(builds, b.apiB)
			if r%2 == 0 {
				builds[0], builds[1] = b.apiB, b.api
			}
		}
		for _, svc := range builds {
			w := newPayments(fmt.Sprintf("API new payments, round %d", r), fmt.Sprintf("new-r%d", r), b.cfg.Connections, b.cfg.Duration)
			if svc == b.apiB {
				w.Name, w.Kind = fmt.Sprintf("API B new payments, round %d", r), kindNewB
			}
			p, err := b.servicePhase(ctx, svc, w)
			if err != nil {
				return nil, summary{}, err
			}
			b.progress("round %d/%d: %s: new payments %.0f/s (the relay drained the outbox %s later)%s", r, b.cfg.Rounds, svc.Name, p.rate(), fmtDuration(p.Drain), p.Groups.describe())
			phases = append(phases, p)
		}
	}
	rep, err := b.apiPhase(ctx, replays("API replays", "replay", replayKeys, b.cfg.Connections, b.cfg.ReplayDuration))
	if err != nil {
		return nil, summary{}, err
	}
	b.progress("replays %.0f/s", rep.rate())
	phases = append(phases, rep)

	var st stormResult
	if b.cfg.StormRequests > 0 {
		if st, err = b.storm(ctx); err != nil {
			return nil, summary{}, err
		}
		b.progress("storm: %d requests answered in %s, %d charge(s)", st.Requests, fmtDuration(st.Elapsed), st.Charges)
	}
	var so soakResult
	if b.cfg.Soak > 0 {
		if so, err = b.soak(ctx); err != nil {
			return nil, summary{}, err
		}
		b.progress("soak: RSS %s -> %s, goroutines %d -> %d", fmtMiB(so.RSSStart), fmtMiB(so.RSSEnd), so.GoroutinesStart, so.GoroutinesEnd)
	}
	return phases, summarize(phases, st, so), nil
}

// warmUp sends unmeasured load through the API and pgbench, and makes the
// payments the replay phase replays; then waits until the API's statistics
// are flushed, so that none of it counts in the first phase.
func (b *benchRun) warmUp(ctx context.Context) error {
	b.progress("warming up (%s of API load and of the floor's, %d payments to replay later, %s of pgbench)", b.cfg.Warmup, replayKeys, b.cfg.Warmup)
	if b.cfg.Warmup > 0 {
		if p := newPayments("warm-up", "warmup", b.cfg.Connections, b.cfg.Warmup).run(ctx, b.api.Client); p.Ops == 0 {
			return fmt.Errorf("warm-up: no payment was created: %s", fmtCounts(p.Unexpected))
		}
	}
	if b.floor != nil && b.cfg.Warmup > 0 {
		if p := newPayments("floor warm-up", "warmup", b.cfg.Connections, b.cfg.Warmup).run(ctx, b.floor.Client); p.Ops == 0 {
			return fmt.Errorf("floor warm-up: no payment was created: %s", fmtCounts(p.Unexpected))
		}
	}
	if b.apiB != nil && b.cfg.Warmup > 0 {
		if p := newPayments("API B warm-up", "warmup", b.cfg.Connections, b.cfg.Warmup).run(ctx, b.apiB.Client); p.Ops == 0 {
			return fmt.Errorf("API B warm-up: no payment was created: %s", fmtCounts(p.Unexpected))
		}
		if _, _, err := waitOutboxDrained(ctx, b.apiB.DB, drainTimeout); err != nil {
			return err
		}
	}
	if err := seed(ctx, b.api.Client, "replay", replayKeys, b.cfg.Connections); err != nil {
		return err
	}
	if _, _, err := waitOutboxDrained(ctx, b.api.DB, drainTimeout); err != nil {
		return err
	}
	idleSince := time.Now()
	if b.cfg.Warmup >= time.Second {
		run := b.pgbench
		run.Duration = b.cfg.Warmup
		if _, err := run.run(ctx); err != nil {
			return fmt.Errorf("pgbench warm-up: %w", err)
		}
	}
	return clock.Sleep(ctx, time.Until(idleSince.Add(statsFlushWait)))
}

// referencePhase runs the pgbench flow for d.
func (b *benchRun) referencePhase(ctx context.Context, name string, d time.Duration) (phase, error) {
	if err := b.mon.checkpoint(ctx); err != nil {
		return phase{}, err
	}
	lsn0, err := b.mon.walPosition(ctx)
	if err != nil {
		return phase{}, err
	}
	c0, err := b.mon.counters(ctx, referenceDatabase)
	if err != nil {
		return phase{}, err
	}
	cpu0, err := b.mon.cpu()
	if err != nil {
		return phase{}, err
	}
	run := b.pgbench
	run.Duration = d
	res, err := run.run(ctx)
	if err != nil {
		return phase{}, err
	}
	if err := b.mon.waitBackendsGone(ctx, pgbenchAppName); err != nil {
		return phase{}, err
	}
	cpu1, err := b.mon.cpu()
	if err != nil {
		return phase{}, err
	}
	c1, err := b.mon.counters(ctx, referenceDatabase)
	if err != nil {
		return phase{}, err
	}
	own := b.ownWAL(ctx, name, referenceDatabase, lsn0)
	p := phase{
		Name: name, Kind: kindReference, Ops: res.Processed, Failed: res.Failed,
		Latencies: res.Latencies, DB: c1.sub(c0), OwnWAL: own, PGCPU: cpu1 - cpu0, ClientCPU: res.CPU,
	}
	if res.Failed > 0 {
		p.Unexpected = map[string]int{"failed": res.Failed}
	}
	if res.TPS > 0 {
		p.Elapsed = time.Duration(float64(res.Processed) / res.TPS * float64(time.Second))
	}
	return p, nil
}

// apiPhase runs w through the API.
func (b *benchRun) apiPhase(ctx context.Context, w workload) (phase, error) {
	return b.servicePhase(ctx, b.api, w)
}

// servicePhase runs w through svc. Its counters and CPU run from the first
// request until the relay has published every event (the relay's work is
// part of a payment's cost), or, for a service without one, until the last
// answer.
func (b *benchRun) servicePhase(ctx context.Context, svc *service, w workload) (phase, error) {
	if err := b.mon.checkpoint(ctx); err != nil {
		return phase{}, err
	}
	lsn0, err := b.mon.walPosition(ctx)
	if err != nil {
		return phase{}, err
	}
	c0, err := b.mon.counters(ctx, svc.Database)
	if err != nil {
		return phase{}, err
	}
	pg0, api0, err := b.cpu(svc)
	if err != nil {
		return phase{}, err
	}
	self0, err := processCPU(os.Getpid())
	if err != nil {
		return phase{}, err
	}
	groups0, groupsOK := svc.Proc.groupCommits(ctx)
	p := w.run(ctx, svc.Client)
	if !svc.NoRelay {
		drain, left, err := waitOutboxDrained(ctx, svc.DB, drainTimeout)
		if err != nil {
			return phase{}, err
		}
		p.Drain = drain
		if left != 0 {
			b.progress("%s: the outbox relay still %d behind (bytes of WAL for the stream, events for the poller) after %s: the counters miss its work", w.Name, left, drainTimeout)
		}
	}
	pg1, api1, err := b.cpu(svc)
	if err != nil {
		return phase{}, err
	}
	self1, err := processCPU(os.Getpid())
	if err != nil {
		return phase{}, err
	}
	if groups1, ok := svc.Proc.groupCommits(ctx); ok && groupsOK {
		p.Groups = groups1.sub(groups0)
	}
	own := b.ownWAL(ctx, w.Name, svc.Database, lsn0)
	if err := clock.Sleep(ctx, statsFlushWait); err != nil {
		return phase{}, err
	}
	c1, err := b.mon.counters(ctx, svc.Database)
	if err != nil {
		return phase{}, err
	}
	if exited, err := svc.Proc.exited(); exited {
		return phase{}, fmt.Errorf("%s exited during %s (%v): see its log", svc.Name, w.Name, err)
	}
	p.DB, p.OwnWAL, p.PGCPU, p.APICPU, p.ClientCPU = c1.sub(c0), own, pg1-pg0, api1-api0, self1-self0
	return p, nil
}

// ownWAL is the WAL that database wrote from lsn0 to now (walOf); zero,
// and said so, if pg_waldump could not read it.
func (b *benchRun) ownWAL(ctx context.Context, phaseName, database, lsn0 string) walShare {
	lsn1, err := b.mon.walPosition(ctx)
	if err == nil {
		var own walShare
		if own, err = b.mon.walOf(ctx, database, lsn0, lsn1); err == nil {
			return own
		}
	}
	b.progress("%s: its database's WAL not read (%v): the targets judge the cluster's", phaseName, err)
	return walShare{}
}

// cpu reads the CPU time used so far by the cluster and by svc.
func (b *benchRun) cpu(svc *service) (pg, api time.Duration, err error) {
	if pg, err = b.mon.cpu(); err != nil {
		return 0, 0, err
	}
	if api, err = processCPU(svc.Proc.Pid); err != nil {
		return 0, 0, err
	}
	return pg, api, nil
}

// storm sends the same-key storm and counts the provider's charges for its
// payment.
func (b *benchRun) storm(ctx context.Context) (stormResult, error) {
	st, paymentID := storm(ctx, b.api.Proc.URL, benchSecret, "storm", b.cfg.StormRequests)
	if paymentID == "" {
		return st, nil // nothing created: reported as failed
	}
	for _, c := range b.sim.Simulator().Charges() {
		if c.IdempotencyKey == payments.ProviderKey(paymentID) {
			st.Charges++
			st.ChargeRequests += c.RequestCount
		}
	}
	return st, nil
}

// soak runs new payments for the soak's length and reads the API's memory
// and goroutines before and after, both times idle.
func (b *benchRun) soak(ctx context.Context) (soakResult, error) {
	// Let the storm's connections close on the server's side first.
	if err := clock.Sleep(ctx, time.Second); err != nil {
		return soakResult{}, err
	}
	so := soakResult{Duration: b.cfg.Soak}
	var err error
	if so.RSSStart, err = processRSS(b.api.Proc.Pid); err != nil {
		return so, err
	}
	if so.GoroutinesStart, err = b.api.Proc.goroutines(ctx); err != nil {
		return so, err
	}
	p := newPayments("soak", "soak", b.cfg.Connections, b.cfg.Soak).run(ctx, b.api.Client)
	so.Payments, so.Failed = p.Ops, p.Failed
	if so.Drain, so.Behind, err = waitOutboxDrained(ctx, b.api.DB, soakDrainTimeout); err != nil {
		return so, err
	}
	if err := clock.Sleep(ctx, time.Second); err != nil {
		return so, err
	}
	if so.RSSEnd, err = processRSS(b.api.Proc.Pid); err != nil {
		return so, err
	}
	if so.GoroutinesEnd, err = b.api.Proc.goroutines(ctx); err != nil {
		return so, err
	}
	return so, nil
}

func (b *benchRun) header() header {
	return header{
		Machine: machine(), Load: b.loadBefore + " before, " + loadAverage() + " after", PostgreSQL: b.pgVersion, Settings: b.pgSettings, Go: runtime.Version(),
		Connections: b.cfg.Connections, Rounds: b.cfg.Rounds, Duration: b.cfg.Duration, Started: b.started,
		PlainB: plainB(b.cfg), ReplayCache: b.cfg.ReplayCache,
	}
}

// plainB names API B's settings when it is the plain configuration.
func plainB(c config) string {
	if !c.Plain {
		return ""
	}
	return strings.Join(plainEnv, " ")
}
