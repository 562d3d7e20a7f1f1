package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/api"
	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/audit"
	"github.com/paymentsapi/paymentsapi/internal/backoff"
	"github.com/paymentsapi/paymentsapi/internal/cleanup"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/config"
	"github.com/paymentsapi/paymentsapi/internal/dashboard"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/endpoints"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/operators"
	"github.com/paymentsapi/paymentsapi/internal/orphans"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub"
	"github.com/paymentsapi/paymentsapi/internal/outbox/relay"
	"github.com/paymentsapi/paymentsapi/internal/pgembed"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
	"github.com/paymentsapi/paymentsapi/internal/provider/stripeprovider"
	"github.com/paymentsapi/paymentsapi/internal/provider/units"
	"github.com/paymentsapi/paymentsapi/internal/secretbox"
	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

// devDatabase is the database the embedded PostgreSQL serves in dev mode.
const devDatabase = "paymentsapi"

// instance is what both the server and the reconcile command need: the
// database, the provider and the payments service.
type instance struct {
	cfg     config.Config
	log     *slog.Logger
	pool    *pgxpool.Pool
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	core    *app.Core
	keys    *idempotency.Listener
	janitor *cleanup.Janitor
	tracer  trace.TracerProvider // a no-op one unless OTEL_* asks for traces
	reader  relay.Mode           // the server's outbox reader (relay.Choose)
	dataDir string               // dev mode: where the embedded PostgreSQL keeps its data
	devURL  string               // dev mode: the embedded database's URL, for psql and the operator commands
	simURL  string               // the in-process provider simulator's base URL; "": none
	sim     *sim.Server          // the in-process provider simulator; nil: none
	apiKeys apikeys.Hasher       // how API keys' secrets are stored (API_KEY_PEPPER)
	secrets *secretbox.Box       // seals webhook secrets (SECRETS_KEY); nil: none set
	closers []func()

	// provider is the provider's adapter (nil for an operator's database
	// tool), for the audit of its objects (package orphans).
	provider provider.Provider

	// stripeWebhookSecret verifies POST /webhooks/stripe: STRIPE_WEBHOOK_SECRET,
	// or, for the in-process simulator without one, a secret made at start.
	stripeWebhookSecret string
}

// close releases what newApp acquired, in reverse order.
func (a *instance) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
}

// orphanAudit is the audit of the provider's objects (package orphans),
// for the server's periodic audit and the dashboard; nil when the provider
// cannot list them.
func (a *instance) orphanAudit() *orphans.Auditor {
	l, ok := a.provider.(provider.Listing)
	if !ok {
		return nil
	}
	aud := app.Auditor(a.pool, l)
	return &aud
}

// use is what a command needs of the instance.
type use int

const (
	// useServer: the server. In dev mode it starts its own PostgreSQL and
	// provider simulator; it migrates the database (with MIGRATE=false it
	// refuses one that lacks a migration) and stores the API keys.
	useServer use = iota
	// useOperator: an operator's command (reconcile, outbox) on the
	// database the servers use. It needs DATABASE_URL, never migrates (it
	// refuses a database that lacks a migration) and stores no keys.
	useOperator
)

// errNeedsRealProvider: the reconciler would ask a simulator it just
// started, which knows nothing: every unknown payment would look "never
// seen", be sent again to it, and be booked as paid.
var errNeedsRealProvider = errors.New("paymentsapi reconcile must ask the real provider: set PROVIDER_URL " +
	"(a running providersim) or PROVIDER=stripe; it never starts a simulator of its own")

// checkOperator refuses the configurations an operator's command must not
// run with.
func checkOperator(cfg config.Config, needsProvider bool) error {
	if cfg.DevMode() {
		return errors.New("operator commands work on the servers' database: set DATABASE_URL (they never start an embedded PostgreSQL)")
	}
	if needsProvider && cfg.Provider == "sim" && cfg.ProviderURL == "" {
		return errNeedsRealProvider
	}
	return nil
}

// newApp connects to (or, in dev mode, starts) the database, migrates it
// (with MIGRATE=false, checks that it is migrated), stores the API keys,
// and starts the provider; for an operator's command it only connects,
// checks the schema is current, and connects the provider.
//
// tp traces the database's round trips and the provider's calls (nil: an
// operator's command, untraced).
func newApp(ctx context.Context, cfg config.Config, log *slog.Logger, u use, tp trace.TracerProvider) (_ *instance, err error) {
	a := &instance{cfg: cfg, log: log, tracer: tp}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	clk := clock.System{}

	dbURL := cfg.DatabaseURL
	if cfg.DevMode() {
		cluster, err := pgembed.Start(ctx, pgembed.Options{DataDir: filepath.Join(cfg.DataDir, "postgres"), Logger: log})
		if err != nil {
			return nil, fmt.Errorf("start embedded PostgreSQL (set DATABASE_URL to use your own): %w", err)
		}
		a.closers = append(a.closers, func() {
			if err := cluster.Stop(context.WithoutCancel(ctx)); err != nil {
				log.Error("stop embedded PostgreSQL", "error", err)
			}
		})
		if err := cluster.EnsureDatabase(ctx, devDatabase); err != nil {
			return nil, err
		}
		dbURL, a.dataDir, a.devURL = cluster.URL(devDatabase), cluster.DataDir(), cluster.URL(devDatabase)
		log.Info("embedded PostgreSQL started", "data_dir", cluster.DataDir(), "database_url", a.devURL)
		// After the cluster's start, which creates the directory so that
		// PostgreSQL's OS user may enter it.
		if err := ignoreInGit(cfg.DataDir); err != nil {
			return nil, err
		}
	}

	if a.apiKeys, err = apiKeyHasher(cfg, u, log); err != nil {
		return nil, err
	}
	if a.secrets, err = secretsBox(cfg, u, log); err != nil {
		return nil, err
	}
	a.pool, err = database.Open(ctx, dbURL, tracing.Pool(tp))
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, a.pool.Close)
	if u == useOperator {
		if _, err := database.CheckMigrated(ctx, a.pool); err != nil {
			return nil, err
		}
	} else {
		// Before migrating: with OUTBOX_RELAY=stream, a server the stream
		// cannot read is refused before this release changes its schema;
		// auto falls back to polling there, which any server allows.
		reader, why, err := relay.Choose(ctx, a.pool, relay.Mode(cfg.OutboxRelay))
		if err != nil {
			return nil, err
		}
		a.reader = reader
		log.Info("outbox relay chosen", "reader", string(reader), "why", why)
		if err := prepareSchema(ctx, a.pool, cfg, log); err != nil {
			return nil, err
		}
		if err := setUpAPIKeys(ctx, a.pool, cfg, a.apiKeys, clk, log); err != nil {
			return nil, err
		}
	}

	if u == useOperator && cfg.Provider == "sim" && cfg.ProviderURL == "" {
		return a, nil // a database tool (outbox): no provider, and never a simulator of its own
	}
	prov, simSrv, stopProvider, err := startProvider(ctx, cfg, log, tp)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, stopProvider)
	a.provider = prov
	a.stripeWebhookSecret = cfg.StripeWebhookSecret
	if simSrv != nil {
		a.sim, a.simURL = simSrv, simSrv.URL()
		if a.stripeWebhookSecret == "" {
			// The in-process simulator announces the customers' choices
			// on a challenge page to this service's POST /webhooks/stripe
			// (serve points it there), so that the provider's webhook
			// road works with no configuration. Nothing outside this
			// process needs the secret, so a new one each start will do.
			if a.stripeWebhookSecret, err = newStripeWebhookSecret(); err != nil {
				return nil, err
			}
		}
	}

	a.reg = prometheus.NewRegistry()
	a.metrics = metrics.New(a.reg)
	app.RegisterGauges(a.reg, a.pool, clk, log)
	a.janitor = cleanup.New(a.pool, clk, cleanup.Policy{
		ReplayTTL: cfg.IdempotencyTTL, MetadataTTL: cfg.IdempotencyMetadataTTL, OutboxRetention: cfg.OutboxRetention,
		InboxRetention: cfg.InboxRetention, EventRetention: cfg.EventRetention, Share: cfg.CleanupShare,
	}, log)
	a.keys = idempotency.NewListener(a.pool.Config().ConnConfig.Copy(), log)
	a.core = app.New(app.Deps{
		DB: a.pool, Provider: prov, Clock: clk, Log: log, Metrics: a.metrics, Waiter: a.keys, Tracer: a.tracer,
	}, app.Config{
		ReplayTTL:         cfg.IdempotencyTTL,
		Lease:             cfg.LeaseDuration,
		RetryAfter:        time.Second,
		CommitMode:        cfg.CommitMode,
		ReplayCache:       cfg.ReplayCache == "memory",
		CommitConcurrency: cfg.CommitConcurrency,
		ProviderTimeout:   cfg.ProviderTimeout,
		ProviderKeyWindow: cfg.ProviderKeyTTL,
		ProviderLookupLag: cfg.ProviderLookupLag,
		RefusalRecheck:    cfg.RefusalRecheck,
		Settings:          cfg.Settings,
		Recovery: idempotency.RecoveryPolicy{
			Backoff:     backoff.Policy{Base: cfg.ReconcileInterval},
			MaxAttempts: cfg.ReconcileMaxAttempts,
		},
		StripeWebhookSecret: a.stripeWebhookSecret,
		Webhooks:            endpoints.Options{Policy: webhookPolicy(cfg), Secrets: a.secrets},
		PublicURL:           cfg.PublicURL,
		AllowHTTPReturnURL:  cfg.DevMode(),
	})
	return a, nil
}

// webhookPolicy is where merchants' webhook endpoints may point.
func webhookPolicy(cfg config.Config) outbound.Policy {
	return outbound.Policy{AllowHTTP: cfg.WebhookAllowHTTP, AllowPrivate: cfg.WebhookAllowPrivate, AllowedPorts: cfg.WebhookAllowedPorts}
}

// serve runs the API until ctx ends, then shuts down in order: stop taking
// requests, let in-flight ones finish (bounded), stop the background
// workers, then close the provider, the pool and the embedded database.
//
// tp traces requests, the relay's publishes and the webhook deliveries (a
// no-op provider: nothing is traced).
func serve(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer, tp trace.TracerProvider) error {
	if err := cfg.CheckServer(); err != nil {
		return err
	}
	a, err := newApp(ctx, cfg, log, useServer, tp)
	if err != nil {
		return err
	}
	defer a.close()
	clk := clock.System{}
	// The dashboard's broadcaster hears what the relay publishes; its
	// Overview reads the service's metrics once a minute.
	live := dashboard.NewLive(clk, log.With("component", "dashboard"))
	health := dashboard.NewHealth(a.reg, clk, log.With("component", "dashboard"))
	relay, closePublisher, err := newRelay(a, cfg, log, stdout, live)
	if err != nil {
		return err
	}
	defer closePublisher() // runs after the workers below have stopped
	deliveries, err := delivery.NewWorker(delivery.Deps{
		DB: a.pool, Clock: clk, Log: log.With("component", "webhook-delivery"),
		Metrics: delivery.NewMetrics(a.reg, a.pool, clk, log), Tracer: tp, Events: a.core.EventLog.Relation(), Secrets: a.secrets,
	}, delivery.Config{Policy: webhookPolicy(cfg), Timeout: cfg.WebhookTimeout, Schedule: cfg.WebhookRetrySchedule,
		KeepPrivateAnswers: cfg.DevMode()})
	if err != nil {
		return err
	}

	workers, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { a.keys.Run(workers) })
	wg.Go(func() { a.core.Reconciler.Run(workers, cfg.ReconcileInterval) })
	wg.Go(func() { relay.Run(workers) })
	wg.Go(func() { deliveries.Run(workers) }) // every instance sends webhooks, with or without NATS
	wg.Go(func() { a.janitor.Run(workers, cfg.CleanupInterval) })
	wg.Go(func() { live.Run(workers) })
	wg.Go(func() { health.Run(workers, time.Minute, live.Tick) })
	if a.core.AnswerCache != nil {
		wg.Go(func() { a.core.AnswerCache.Watch(workers) })
	}
	if aud := a.orphanAudit(); aud != nil {
		wg.Go(func() {
			aud.Run(workers, clk, orphansInterval, orphansWindow, a.metrics.OrphanProviderObjects,
				log.With("component", "orphans"))
		})
	}
	defer func() {
		stopWorkers()
		wg.Wait()
	}()

	ops, err := operators.Parse(cfg.OperatorKeys)
	if err != nil {
		return err
	}
	deps := a.core.HTTPDeps(httpapi.Deps{
		DB: a.pool, Log: log, Metrics: a.metrics, Gatherer: a.reg, OpenAPI: api.OpenAPI, APIKeys: a.apiKeys,
		Ready:          func(ctx context.Context) error { return database.Ready(ctx, a.pool) },
		RateLimit:      httpapi.RateLimit{PerSecond: cfg.RateLimit, Burst: cfg.RateLimitBurst},
		SeparateOps:    cfg.OpsAddr != "",
		TrustedProxies: cfg.TrustedProxies, Operators: ops,
		Dashboard: a.core.Dashboard(dashboard.Deps{
			DB: a.pool, Live: live, Health: health, Clock: clk, Log: log.With("component", "dashboard"),
			DemoSecret: demoSecret(cfg), Orphans: a.orphanAudit(),
		}),
	})
	warnExposure(cfg, log)
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	srv := &http.Server{
		Handler:           tracing.Handler(tp, httpapi.NewServer(deps)),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// A create may wait for the provider (twice: a lookup, then a
		// charge) and, with Prefer: wait, for an original request.
		WriteTimeout:   cfg.ProviderTimeout*2 + idempotency.MaxWait + 30*time.Second,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: httpapi.ServerMaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(live.Stop) // the dashboard's streams would hold the shutdown back
	servers := []*http.Server{srv}
	serveErr := make(chan error, 2)
	go func() { serveErr <- srv.Serve(ln) }()
	if cfg.OpsAddr != "" {
		opsLn, err := net.Listen("tcp", cfg.OpsAddr)
		if err != nil {
			_ = srv.Close()
			return fmt.Errorf("listen on %s (OPS_ADDR): %w", cfg.OpsAddr, err)
		}
		ops := &http.Server{
			Handler:           httpapi.OpsHandler(deps),
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			MaxHeaderBytes:    httpapi.ServerMaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}
		servers = append(servers, ops)
		go func() { serveErr <- ops.Serve(opsLn) }()
		log.Info("operations listening", "url", "http://"+displayAddr(opsLn.Addr()), "endpoints", "/metrics /healthz /readyz")
	}
	if cfg.DebugAddr != "" {
		_, stop, err := serveProfiler(cfg.DebugAddr, log)
		if err != nil {
			return err
		}
		defer stop()
	}

	base := "http://" + displayAddr(ln.Addr())
	if a.sim != nil {
		// The listen address, not PUBLIC_URL: the simulator runs in this
		// process, and PUBLIC_URL may name a proxy it cannot reach.
		a.sim.Simulator().SetWebhook(sim.WebhookTarget{URL: base + stripeWebhookPath, Secret: a.stripeWebhookSecret})
		log.Info("the in-process provider simulator sends its webhooks to this service", "url", base+stripeWebhookPath,
			"secret", secretOrigin(cfg))
	}
	log.Info("paymentsapi listening", "url", base, "dev_mode", cfg.DevMode(), "provider", cfg.Provider,
		"rate_limit_per_tenant_per_instance", cfg.RateLimit, "stripe_webhooks", a.stripeWebhookSecret != "")
	printBanner(stdout, cfg, banner{base: base, dataDir: a.dataDir, devURL: a.devURL, simURL: a.simURL})

	select {
	case err := <-serveErr:
		for _, s := range servers {
			_ = s.Close()
		}
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("in-flight requests did not finish in time; their keys stay leased and resume on retry or by the reconciler", "error", err)
	}
	for _, s := range servers[1:] { // the operations listener, last: metrics to the end
		if err := s.Shutdown(shutdownCtx); err != nil {
			_ = s.Close()
		}
	}
	return nil
}

// warnExposure warns, outside dev mode, of the defaults that leave the
// public listener more open than a production deployment should: no rate
// limit (RATE_LIMIT is off by default, for benchmarks and tests), and the
// metrics served beside the API (OPS_ADDR unset). In dev mode both are
// what a developer wants.
func warnExposure(cfg config.Config, log *slog.Logger) {
	if cfg.DevMode() {
		return
	}
	if cfg.RateLimit == 0 {
		log.Warn("RATE_LIMIT is off: one tenant can send as many requests as it likes; " +
			"set RATE_LIMIT (requests per second per tenant, in each instance), and RATE_LIMIT_BURST if needed")
	}
	if cfg.OpsAddr == "" {
		log.Warn("OPS_ADDR is not set: /metrics is served, unauthenticated, on the public listener (HTTP_ADDR); " +
			"set OPS_ADDR (e.g. 127.0.0.1:9090) to serve it on an operations listener of its own")
	}
}

// newRelay returns the outbox relay newApp chose (OUTBOX_RELAY) with the
// configured publisher (OUTBOX_PUBLISHER: log, JSON lines on stdout; or
// nats, JetStream at NATS_URL) and its metrics, and a function that closes
// the publisher.
func newRelay(a *instance, cfg config.Config, log *slog.Logger, stdout io.Writer, live *dashboard.Live) (relay.Relay, func(), error) {
	var (
		pub      outbox.Publisher = outbox.NewLogPublisher(stdout)
		closePub                  = func() {}
	)
	if cfg.OutboxPublisher == "nats" {
		nc, err := natspub.Connect(cfg.NATSURL, "paymentsapi", log.With("component", "nats"))
		if err != nil {
			return nil, nil, err
		}
		// An asynchronous publish (a relay's batch) whose acknowledgement
		// never comes is given up after as long as a batch may wait, so that
		// abandoned acknowledgements do not pile up in the client.
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(natspub.DefaultBatchTimeout))
		if err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("JetStream: %w", err)
		}
		pub, closePub = natspub.NewPublisher(js, natspub.StreamConfig{}, log), nc.Close
	}
	r, stats, err := relay.New(a.reader, outbox.RelayDeps{
		ConnString: a.pool.Config().ConnConfig.ConnString(), DB: a.pool,
		// Every event is fanned out to the webhook endpoints before it is
		// published, and each one published is handed to the dashboard.
		Publisher: live.Tap(a.core.EventLog.Publisher(pub)), Clock: clock.System{}, Log: log.With("component", "outbox-relay"),
		Metrics: outbox.NewMetrics(a.reg), Tracer: a.tracer,
	}, outbox.SendConfig{})
	if err != nil {
		closePub()
		return nil, nil, err
	}
	a.reg.MustRegister(stats)
	return r, closePub, nil
}

// auditReconcilerRun is the audit log's action of an operator who asked
// the provider now (`paymentsapi reconcile -once`); the moves it made name
// the operator too.
const auditReconcilerRun = "reconciler.run_by_operator"

// reconcile runs the reconciler alone: one pass with once, else until ctx
// ends. It prints what it did as JSON on stdout.
func reconcile(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer, once bool) error {
	if err := checkOperator(cfg, true); err != nil {
		return err
	}
	a, err := newApp(ctx, cfg, log, useOperator, nil)
	if err != nil {
		return err
	}
	defer a.close()
	if !once {
		a.core.Reconciler.Run(ctx, cfg.ReconcileInterval)
		return nil
	}
	stats, err := a.core.Reconciler.RunOnce(ctx, 1000)
	if err != nil {
		return err
	}
	if err := audit.Record(ctx, a.pool, clock.System{}.Now(), audit.Change{Action: auditReconcilerRun,
		Details: map[string]any{"outcomes": stats}}); err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(map[string]any{"reconciled": stats})
}

// setUpAPIKeys adds the configured keys that are not stored yet (API_KEYS
// is a bootstrap: it never replaces, revives or revokes a key). In dev mode
// the demo key is the default; with a real database there is none, and
// start-up warns when no key is stored at all, and for a configured secret
// short enough to be guessed.
func setUpAPIKeys(ctx context.Context, pool *pgxpool.Pool, cfg config.Config, h apikeys.Hasher, clk clock.Clock, log *slog.Logger) error {
	pairs, err := apikeys.ParsePairs(cfg.APIKeys)
	if err != nil {
		return err
	}
	if !cfg.DevMode() {
		for _, p := range pairs {
			if len(p.Secret) < minConfiguredSecret {
				log.Warn("API_KEYS holds a short secret: one of fewer than 24 characters can be guessed; "+
					"create a key with `paymentsapi keys create` and revoke this one", "tenant", p.Tenant)
			}
		}
	}
	// Each key added is audited with its addition, by the service acting
	// on its configuration.
	ctx = actor.Ensure(ctx, actor.System)
	var added []apikeys.Key
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		now := clk.Now()
		if added, err = apikeys.Add(ctx, tx, h, pairs, now); err != nil {
			return err
		}
		for _, k := range added {
			if err := audit.Record(ctx, tx, now, audit.Change{Action: apikeys.AuditAdded, TenantID: k.Tenant, TargetID: k.ID,
				Details: map[string]any{"from": "API_KEYS"}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(added) > 0 {
		log.Info("API keys added from API_KEYS", "count", len(added))
	}
	n, err := apikeys.Count(ctx, pool)
	if err != nil {
		return err
	}
	if n == 0 {
		log.Warn("no API keys are stored: every request will get 401; create one with `paymentsapi keys create TENANT`")
	}
	return nil
}

// minConfiguredSecret is the shortest secret in API_KEYS that start-up
// accepts without a warning outside dev mode.
const minConfiguredSecret = 24

// apiKeyHasher returns how API keys are stored: under API_KEY_PEPPER; in
// dev mode, without one, under a pepper generated once and kept in the data
// directory, so that the demo database's keys keep working across restarts.
func apiKeyHasher(cfg config.Config, u use, log *slog.Logger) (apikeys.Hasher, error) {
	pepper := cfg.APIKeyPepper
	if pepper == "" && cfg.DevMode() {
		var err error
		if pepper, err = devPepper(cfg.DataDir); err != nil {
			return apikeys.Hasher{}, err
		}
	}
	if pepper == "" && u == useServer {
		log.Warn("API_KEY_PEPPER is not set: API keys are stored as a plain SHA-256; set it to a random string of at least 32 characters")
	}
	return apikeys.NewHasher(pepper)
}

// devPepper reads the dev mode's pepper from dir, or generates it there.
func devPepper(dir string) (string, error) {
	return devSecret(dir, "api_key_pepper", "the dev API key pepper", func() (string, error) {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		return hex.EncodeToString(b[:]), nil
	})
}

// devSecret reads the dev mode's secret kept in dir/name, or makes one
// with generate and keeps it there (readable by its owner only), so that
// what the demo database holds under it stays usable across restarts.
func devSecret(dir, name, what string, generate func() (string, error)) (string, error) {
	path := filepath.Join(dir, name)
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", what, err)
	}
	secret, err := generate()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("keep %s: %w", what, err)
	}
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("keep %s: %w", what, err)
	}
	return secret, nil
}

// ignoreInGit writes into dir, dev mode's data directory, a .gitignore that
// ignores everything in it, unless it has one. The checkout's own
// .gitignore names only the default, .data: a DATA_DIR of another name
// inside a checkout would otherwise show in git status, with the database,
// the API key pepper and the secrets key in it, one `git add .` away from a
// commit.
func ignoreInGit(dir string) error {
	path := filepath.Join(dir, ".gitignore")
	if _, err := os.Stat(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if err := os.WriteFile(path, []byte("# paymentsapi's dev mode data: nothing here belongs in git.\n*\n"), 0o644); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	return nil
}

// secretsBox returns what seals webhook endpoints' secrets: SECRETS_KEY;
// in dev mode, without one, a key generated once and kept in the data
// directory. Outside dev mode without one it is nil, and a server warns:
// it can neither create an endpoint nor rotate or reveal a secret.
func secretsBox(cfg config.Config, u use, log *slog.Logger) (*secretbox.Box, error) {
	key := cfg.SecretsKey
	if key == "" && cfg.DevMode() {
		var err error
		if key, err = devSecret(cfg.DataDir, "secrets_key", "the dev secrets key", secretbox.NewKey); err != nil {
			return nil, err
		}
	}
	if key == "" {
		if u == useServer {
			log.Warn("SECRETS_KEY is not set: webhook endpoints can be neither created nor rotated (503 SECRETS_KEY_MISSING), " +
				"and their secrets not revealed; set it to the base64 of 32 random bytes (openssl rand -base64 32)")
		}
		return nil, nil
	}
	box, err := secretbox.FromKey(key, cfg.SecretsKeyOthers...)
	if err != nil {
		return nil, fmt.Errorf("SECRETS_KEY: %w", err)
	}
	return box, nil
}

// stripeWebhookPath is where the service takes Stripe's webhooks, and the
// in-process simulator's.
const stripeWebhookPath = "/webhooks/stripe"

// newStripeWebhookSecret makes a signing secret shaped like Stripe's
// (whsec_ and random characters).
func newStripeWebhookSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return config.StripeWebhookSecretPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// secretOrigin says, for the log, where the in-process simulator's
// webhook secret comes from (never the secret itself).
func secretOrigin(cfg config.Config) string {
	if cfg.StripeWebhookSecret != "" {
		return "STRIPE_WEBHOOK_SECRET"
	}
	return "made at start"
}

// startProvider returns the configured provider, the simulator it started
// in-process (nil if none), and a function that stops whatever it
// started. With tp active, each call to the provider is a client span and
// sends it traceparent.
func startProvider(ctx context.Context, cfg config.Config, log *slog.Logger, tp trace.TracerProvider) (_ provider.Provider, _ *sim.Server, stop func(), _ error) {
	hc := &http.Client{Transport: tracing.Transport(tp, &http.Transport{
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	})}
	switch cfg.Provider {
	case "sim":
		if cfg.ProviderURL != "" {
			return dialSim(ctx, cfg.ProviderURL, hc, log), nil, func() {}, nil
		}
		rules, err := units.Named(cfg.ProviderSimCurrencyRules)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("PROVIDER_SIM_CURRENCY_RULES: %w", err)
		}
		srv, err := sim.Start(ctx, "127.0.0.1:0", sim.Options{Logger: log.With("component", "providersim"), CurrencyRules: rules})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("start in-process provider simulator: %w", err)
		}
		log.Info("in-process provider simulator started", "url", srv.URL(), "currency_rules", rules.Name())
		return dialSim(ctx, srv.URL(), hc, log), srv, func() { _ = srv.Close() }, nil
	case "stripe":
		p, err := stripeprovider.New(stripeprovider.Config{
			APIKey: cfg.StripeAPIKey, BaseURL: cfg.StripeAPIBase, HTTPClient: hc,
			Logger: log.With("component", "stripe"),
		})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("set up the Stripe provider: %w", err)
		}
		return p, nil, func() {}, nil
	default:
		return nil, nil, nil, fmt.Errorf("unknown PROVIDER %q", cfg.Provider)
	}
}

// simDialTimeout bounds how long start-up waits for the provider
// simulator to say what it takes (a simulator started beside the service
// may still be starting).
const simDialTimeout = 10 * time.Second

// dialSim returns the client of the simulator at url, which has read what
// the simulator takes (simclient.Dial): its test payment methods, checked
// before anything is stored, and its currency rules. A simulator that
// cannot say within simDialTimeout gets a client that checks nothing and
// converts nothing, and a warning.
func dialSim(ctx context.Context, url string, hc *http.Client, log *slog.Logger) *simclient.Client {
	ctx, cancel := context.WithTimeout(ctx, simDialTimeout)
	defer cancel()
	c, err := simclient.Dial(ctx, url, hc)
	if err != nil {
		log.Warn("the provider simulator did not say what it takes: no test payment method is checked, amounts are ISO 4217 minor units",
			"url", url, "error", err)
		return simclient.New(url, hc)
	}
	if c.Methods() == nil {
		log.Info("the provider at PROVIDER_URL does not list its test payment methods: none is checked", "url", url)
		return c
	}
	log.Info("the provider simulator's test payment methods are checked before anything is stored", "url", url,
		"methods", len(c.Methods()), "currency_rules", c.Rules().Name())
	return c
}

func displayAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || tcp.IP.IsUnspecified() {
		port := 0
		if ok {
			port = tcp.Port
		}
		return fmt.Sprintf("localhost:%d", port)
	}
	return tcp.String()
}

// banner is what the start-up banner tells a person, besides the
// configuration.
type banner struct {
	base    string // the API's base URL
	dataDir string // dev mode: where the embedded PostgreSQL keeps its data
	devURL  string // dev mode: the embedded database's URL
	simURL  string // the in-process provider simulator's base URL; "": none
}

// demoSecret is dev mode's demo API key, which the dashboard's login form
// is filled in with; "" unless the service runs in dev mode with it.
func demoSecret(cfg config.Config) string {
	if !cfg.DevMode() || cfg.APIKeys != config.DevAPIKeys {
		return ""
	}
	if pairs, err := apikeys.ParsePairs(cfg.APIKeys); err == nil && len(pairs) == 1 {
		return pairs[0].Secret
	}
	return ""
}

// printBanner tells a person how to try the service.
func printBanner(w io.Writer, cfg config.Config, bn banner) {
	secret := "<your secret>"
	if pairs, err := apikeys.ParsePairs(cfg.APIKeys); err == nil && cfg.APIKeys == config.DevAPIKeys && len(pairs) == 1 {
		secret = pairs[0].Secret
	}
	base := bn.base
	var b strings.Builder
	fmt.Fprintf(&b, "\npaymentsapi is listening on %s\n", base)
	if cfg.DevMode() {
		fmt.Fprintf(&b, "dev mode: embedded PostgreSQL in %s, demo key\n", bn.dataDir)
		fmt.Fprintf(&b, "database: %s (psql, and DATABASE_URL for the operator commands)\n", bn.devURL)
	}
	if bn.simURL != "" {
		// The simulator listens on a port of its own, chosen at start-up:
		// this line is the only place a person learns it.
		fmt.Fprintf(&b, "provider: the in-process provider simulator at %s\n", bn.simURL)
		fmt.Fprintf(&b, "          what it was asked to charge: %s/_sim/charges (and /_sim/refunds)\n", bn.simURL)
	} else {
		fmt.Fprintf(&b, "provider: %s\n", providerName(cfg))
	}
	if demoSecret(cfg) != "" {
		fmt.Fprintf(&b, "dashboard: %s%s/ (the login form is filled in with the demo key)\n", base, httpapi.DashboardPath)
	} else {
		fmt.Fprintf(&b, "dashboard: %s%s/ (log in with an API key, or an operator's key from OPERATOR_KEYS)\n", base, httpapi.DashboardPath)
	}
	fmt.Fprintf(&b, "\nTry it (run it twice: the second answer is a replay):\n\n")
	fmt.Fprintf(&b, "curl -i -X POST %s/payments \\\n", base)
	fmt.Fprintf(&b, "  -H 'Authorization: Bearer %s' \\\n", secret)
	fmt.Fprintf(&b, "  -H 'Idempotency-Key: demo-order-1' \\\n")
	fmt.Fprintf(&b, "  -H 'Content-Type: application/json' \\\n")
	fmt.Fprintf(&b, "  -d '{\"accountId\":\"acc_1\",\"amount\":\"10.00\",\"currency\":\"EUR\",\"merchantReference\":\"invoice-1\",\"paymentMethod\":\"pm_card_visa\"}'\n\n")
	_, _ = io.WriteString(w, b.String())
}

// providerName says which provider the service calls, as the banner shows
// it.
func providerName(cfg config.Config) string {
	switch {
	case cfg.Provider == "stripe" && cfg.StripeAPIBase != "":
		return "Stripe's API at " + cfg.StripeAPIBase
	case cfg.Provider == "stripe":
		return "Stripe"
	case cfg.ProviderURL != "":
		return "the provider simulator at " + cfg.ProviderURL
	}
	return "the in-process provider simulator"
}

// serveProfiler serves Go's profiler (net/http/pprof) on addr, on a mux of
// its own (never the API's), and returns its base URL; stop closes it.
func serveProfiler(addr string, log *slog.Logger) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listen on %s (DEBUG_ADDR): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	url = "http://" + displayAddr(ln.Addr()) + "/debug/pprof/"
	log.Info("profiler listening", "url", url)
	return url, func() { _ = srv.Close() }, nil
}
