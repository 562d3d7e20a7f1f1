// Package app assembles the service's core from its collaborators: the
// idempotency engine, each operation plugged into it, and the reconciler of
// them all. The server (cmd/paymentsapi), the test harnesses and the
// client's test server build it the same way, here.
package app

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/internal/answercache"
	"github.com/paymentsapi/paymentsapi/internal/authorizations"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/dashboard"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/endpoints"
	"github.com/paymentsapi/paymentsapi/internal/eventlog"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
	"github.com/paymentsapi/paymentsapi/internal/setting"
	"github.com/paymentsapi/paymentsapi/internal/webhooks"
)

// Config is the core's timing rules.
type Config struct {
	ReplayTTL         time.Duration // IDEMPOTENCY_TTL
	Lease             time.Duration // LEASE_DURATION
	RetryAfter        time.Duration // advice on 409 in use, 202, 503
	CommitMode        string        // COMMIT_MODE: idempotency.CommitInline or CommitGroup ("": group)
	ReplayCache       bool          // REPLAY_CACHE=memory: retries of finished keys answered from memory (answercache)
	CommitConcurrency int           // COMMIT_CONCURRENCY; 0: one claim and one owner step in flight
	ProviderTimeout   time.Duration // PROVIDER_TIMEOUT
	ProviderKeyWindow time.Duration // PROVIDER_KEY_TTL
	// ProviderLookupLag is how long after a create a lookup may still miss
	// it (PROVIDER_LOOKUP_LAG): the service uses the longer of it and what
	// the provider declares (provider.Adapter.LookupLag).
	ProviderLookupLag time.Duration
	RefusalRecheck    time.Duration // REFUSAL_RECHECK; default one minute
	// Settings are the values of the settings the modules declare
	// (config.Config.Settings); one without a value has its default.
	Settings     setting.Values
	Recovery     idempotency.RecoveryPolicy
	PaymentHooks payments.Hooks // failpoints, for tests
	// StripeWebhookSecret verifies POST /webhooks/stripe (STRIPE_WEBHOOK_SECRET);
	// empty: the route does not exist.
	StripeWebhookSecret string
	// Webhooks is where merchants' webhook endpoints may point
	// (WEBHOOK_ALLOW_HTTP, WEBHOOK_ALLOW_PRIVATE), checked at registration;
	// the delivery worker (internal/delivery) checks the same at every
	// connection.
	Webhooks endpoints.Options
	// PublicURL is the base URL customers' browsers reach the service at
	// (PUBLIC_URL): the provider sends a customer back from an
	// authentication under it.
	PublicURL string
	// AllowHTTPReturnURL lets a payment's returnUrl be plain http (dev
	// mode).
	AllowHTTPReturnURL bool
	// ExtraModules are operations registered by tests, listed after the
	// ones of Modules and treated exactly like them. A forker adds a line
	// to Modules instead.
	ExtraModules []operation.Module
}

// Deps are the core's collaborators.
type Deps struct {
	DB       *pgxpool.Pool
	Provider provider.Adapter
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Metrics
	// Waiter lets duplicates wait for their original (idempotency.Listener);
	// nil: they never wait.
	Waiter idempotency.Waiter
	// Tracer traces the reconciler's work (tracing.Setup); nil or a no-op
	// provider traces nothing.
	Tracer trace.TracerProvider
}

// Modules are the service's operations. Their order is the order of the
// core's Operations and nothing else: each module declares the modules it
// acts through (operation.Module.Uses) and the hooks it runs at their
// points (Hooks), and operation.Build wires them whatever the order. Adding
// an operation is one package and one line here.
func Modules(cfg Config) []operation.Module {
	return []operation.Module{
		payments.Module(cfg.PaymentHooks), payments.AuthenticationModule(),
		refunds.Module(),
		authorizations.CaptureModule(), authorizations.CancelModule(),
		endpoints.CreateModule(cfg.Webhooks), endpoints.RotateModule(cfg.Webhooks), delivery.ResendModule(),
	}
}

// Settings are the settings the modules declare, for package config to load
// and list.
func Settings() []setting.Setting {
	var out []setting.Setting
	for _, m := range Modules(Config{}) {
		out = append(out, m.Settings...)
	}
	return out
}

// Core is the assembled service.
type Core struct {
	Engine *idempotency.Engine
	// AnswerCache is the engine's cache of answers, nil unless
	// Config.ReplayCache; it answers only while its Watch runs.
	AnswerCache *answercache.Memory
	// Modules and Operations are the registered operations, and the same
	// built on the core's collaborators, in one order.
	Modules    []operation.Module
	Operations []operation.Instance
	// Payments and Refunds are two of Operations, typed, for the commands
	// and tests that drive them directly.
	Payments   *payments.Service
	Refunds    *refunds.Service
	Reconciler *idempotency.Reconciler
	// EventLog is the log of the operations' events (GET /events); the
	// relay records each event there before it publishes it.
	EventLog *eventlog.Log
	// StripeWebhooks is the handler of POST /webhooks/stripe, nil without
	// a webhook secret.
	StripeWebhooks http.Handler
}

// New assembles the core.
func New(d Deps, cfg Config) *Core {
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	var answers *answercache.Memory
	engineDeps := idempotency.Deps{DB: d.DB, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics, Waiter: d.Waiter, Tracer: d.Tracer}
	if cfg.ReplayCache {
		answers = answercache.New(d.DB, d.Clock, d.Log.With("component", "answer-cache"))
		engineDeps.Answers = answers
	}
	engine := idempotency.NewEngine(engineDeps, idempotency.Config{
		ReplayTTL: cfg.ReplayTTL, Lease: cfg.Lease, RetryAfter: cfg.RetryAfter, OutsideCall: cfg.ProviderTimeout,
		CommitMode: cfg.CommitMode, CommitConcurrency: cfg.CommitConcurrency,
	})
	mods := append(Modules(cfg), cfg.ExtraModules...)
	ops, err := operation.Build(mods, operation.Env{
		DB: d.DB, Engine: engine, Clock: d.Clock, Log: d.Log, Metrics: d.Metrics, Provider: d.Provider,
		Config: operation.Config{
			ReplayTTL: cfg.ReplayTTL, ProviderTimeout: cfg.ProviderTimeout, ProviderKeyWindow: cfg.ProviderKeyWindow,
			ProviderLookupLag: max(cfg.ProviderLookupLag, d.Provider.LookupLag()), RefusalRecheck: cfg.RefusalRecheck,
			PublicURL: strings.TrimSuffix(cfg.PublicURL, "/"), AllowHTTPReturnURL: cfg.AllowHTTPReturnURL,
		},
		Settings: cfg.Settings,
	})
	if err != nil {
		panic(err) // the modules are the code's: a mistake in them is a programming error
	}
	// The reconciler skips an operation the provider cannot serve: its keys
	// wait, untouched, for an instance whose provider can.
	var engineOps []idempotency.Operation
	for _, op := range ops {
		if operation.Supported(op) {
			engineOps = append(engineOps, op)
		}
	}
	c := &Core{
		Engine:      engine,
		AnswerCache: answers,
		Modules:     mods,
		Operations:  ops,
		Reconciler:  idempotency.NewReconciler(engine, cfg.Recovery, engineOps...),
	}
	for _, op := range ops {
		switch op := op.(type) {
		case *payments.Service:
			c.Payments = op
		case *refunds.Service:
			c.Refunds = op
		}
	}
	// Each event the log records is fanned out to the webhook endpoints in
	// the same statement. Its listing filters by payment: the events whose
	// data names it, its refunds' too.
	c.EventLog = eventlog.New(d.DB, d.Clock, d.Log.With("component", "event-log"), mods, eventlog.WithFanOut(delivery.FanOut),
		eventlog.WithSubject(eventlog.Subject{Member: payments.IDField, Created: c.Payments.Created}))
	if cfg.StripeWebhookSecret != "" {
		c.StripeWebhooks = webhooks.Stripe(webhooks.Deps{
			DB: d.DB, Reconciler: c.Reconciler, Modules: mods, Clock: d.Clock, Log: d.Log.With("component", "stripe-webhooks"),
			Metrics: d.Metrics,
		}, cfg.StripeWebhookSecret)
	}
	return c
}

// RegisterGauges registers the gauges read from the database on reg: the
// keys', the payments' states, and the sizes of the tables that grow with
// traffic and that clean-up keeps bounded (package cleanup).
func RegisterGauges(reg prometheus.Registerer, db *pgxpool.Pool, clk clock.Clock, log *slog.Logger) {
	var ops []string
	for _, m := range Modules(Config{}) {
		ops = append(ops, m.Name)
	}
	reg.MustRegister(idempotency.NewKeyCollector(db, clk, log, ops...), payments.NewStateCollector(db, log),
		database.NewTableSizeCollector(db, log, "idempotency_keys", "outbox_events", "inbox", "webhook_messages", "webhook_attempts"))
}

// Dashboard returns the dashboard (package dashboard) on the core's
// services, for httpapi.Deps.Dashboard; d brings the rest (its sessions'
// database, the broadcaster, the clock).
func (c *Core) Dashboard(d dashboard.Deps) func(httpapi.Gate) http.Handler {
	d.Payments, d.Refunds, d.Events = c.Payments, c.Refunds, c.EventLog
	d.Engine, d.Reconciler = c.Engine, c.Reconciler
	for _, op := range c.Operations {
		switch op := op.(type) {
		case *authorizations.Service:
			if op.Name() == authorizations.OperationCapture {
				d.Captures = op
			} else {
				d.Cancels = op
			}
		case *delivery.Resends:
			d.Deliveries = op
		case *endpoints.Service:
			d.Endpoints = op
		}
	}
	return dashboard.Handler(d)
}

// HTTPDeps returns the part of the HTTP API's dependencies the core provides.
func (c *Core) HTTPDeps(d httpapi.Deps) httpapi.Deps {
	d.Modules = c.Modules
	d.Operations = c.Operations
	d.RetryAfter = c.Engine.RetryAfter()
	d.StripeWebhooks = c.StripeWebhooks
	d.Features = append(d.Features, c.EventLog.Routes)
	return d
}
