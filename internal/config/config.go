// Package config reads the service's settings from flags and the
// environment. Flags win over variables; variables win over defaults.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider/units"
	"github.com/paymentsapi/paymentsapi/internal/secretbox"
	"github.com/paymentsapi/paymentsapi/internal/setting"
)

// Config is every setting of the paymentsapi process.
type Config struct {
	DatabaseURL string
	DataDir     string // dev mode: where the embedded PostgreSQL keeps its data
	HTTPAddr    string
	// PublicURL is the base URL customers' browsers reach the service at
	// (PUBLIC_URL; default http:// and HTTP_ADDR, a missing host being
	// localhost): the provider sends a customer back from an
	// authentication (3-D Secure) to GET /payments/{id}/return under it.
	PublicURL string
	// DebugAddr is where Go's profiler (net/http/pprof) listens; empty:
	// nowhere. Unauthenticated: bind it to loopback.
	DebugAddr string
	// OpsAddr is where the operations listener serves /metrics (with
	// /healthz and /readyz), off the public one (OPS_ADDR); empty: /metrics
	// is served on HTTPAddr, unauthenticated, beside the API.
	OpsAddr string
	// Migrate is whether the server applies the migrations at start-up
	// (MIGRATE, default true). False: it applies none, and refuses a
	// database that lacks one (`paymentsapi migrate` applies them), so its
	// role needs no right to change the schema.
	Migrate bool
	APIKeys string
	// APIKeyPepper is the server secret API keys' secrets are hashed
	// under (API_KEY_PEPPER); empty outside dev mode: a plain SHA-256. In
	// dev mode an empty one is generated and kept in DataDir.
	APIKeyPepper string
	// SecretsKey seals the webhook endpoints' signing secrets
	// (SECRETS_KEY: the base64 of 32 bytes, package secretbox); empty
	// outside dev mode: no endpoint can be created. In dev mode an empty
	// one is generated and kept in DataDir.
	SecretsKey string
	// SecretsKeyOthers are more keys (SECRETS_KEY_OTHERS, comma-separated)
	// that the server opens sealed secrets with but never seals under: the
	// overlap that lets SECRETS_KEY be rotated on a running fleet.
	SecretsKeyOthers []string
	Provider         string // "sim" or "stripe"
	// ProviderNamed reports whether PROVIDER (or -provider) was given:
	// outside dev mode a server needs it (CheckServer).
	ProviderNamed bool
	// ProviderSimInProcess lets a server outside dev mode run the provider
	// simulator in its own process (PROVIDER_SIM_IN_PROCESS).
	ProviderSimInProcess bool
	// ProviderSimCurrencyRules are the currency rules the in-process
	// simulator plays (PROVIDER_SIM_CURRENCY_RULES): iso, or stripe to
	// see Stripe's units and refusals without Stripe (package units).
	ProviderSimCurrencyRules string
	ProviderURL              string
	ProviderTimeout          time.Duration
	ProviderKeyTTL           time.Duration
	// ProviderLookupLag is how long after a create the provider's lookup
	// may still miss it, as the operator knows it (PROVIDER_LOOKUP_LAG);
	// the service uses the longer of it and the provider's own declaration.
	ProviderLookupLag time.Duration
	// RefusalRecheck is how long after a refusal the reconciler looks the
	// resource up anyway (REFUSAL_RECHECK); never before the lookup lag.
	RefusalRecheck         time.Duration
	StripeAPIKey           string
	StripeAPIBase          string
	StripeWebhookSecret    string
	IdempotencyTTL         time.Duration
	IdempotencyMetadataTTL time.Duration
	LeaseDuration          time.Duration
	ReconcileInterval      time.Duration
	ReconcileMaxAttempts   int
	CommitMode             string
	ReplayCache            string
	CommitConcurrency      int
	OutboxRetention        time.Duration
	InboxRetention         time.Duration
	// EventRetention is how long the event log keeps an event
	// (GET /events).
	EventRetention  time.Duration
	CleanupInterval time.Duration
	// CleanupShare is the largest share of its time a clean-up pass spends
	// in statements while it catches up on a backlog (cleanup.Policy.Share).
	CleanupShare    float64
	OutboxPublisher string
	// OutboxRelay is which reader publishes the outbox (OUTBOX_RELAY):
	// auto, poll or stream (package outbox/relay).
	OutboxRelay     string
	NATSURL         string
	LogLevel        string
	ShutdownTimeout time.Duration
	RateLimit       float64 // requests per second per tenant, per instance; 0: off
	RateLimitBurst  int     // 0: one second's worth of RateLimit
	// TrustedProxies are the networks of the proxies whose X-Forwarded-For
	// names the client (TRUSTED_PROXIES, comma-separated CIDRs); empty:
	// none, the client is the connection's peer.
	TrustedProxies []netip.Prefix
	// OperatorKeys are the operators' name:secret pairs
	// (OPERATOR_KEYS): who may read the audit log (GET /audit-events).
	OperatorKeys string

	// WebhookAllowHTTP allows plain http webhook endpoints, and
	// WebhookAllowPrivate endpoints whose host has a loopback, private,
	// link-local or otherwise non-public address (WEBHOOK_ALLOW_HTTP,
	// WEBHOOK_ALLOW_PRIVATE): both true in dev mode, false otherwise,
	// unless set.
	WebhookAllowHTTP    bool
	WebhookAllowPrivate bool
	// WebhookAllowedPorts are the ports a webhook URL may name besides 443
	// and 8443 while neither of the two above is set
	// (WEBHOOK_ALLOWED_PORTS).
	WebhookAllowedPorts []int
	// WebhookTimeout bounds one webhook delivery attempt.
	WebhookTimeout time.Duration
	// WebhookRetrySchedule is the wait after each failed delivery attempt,
	// the n-th for the n-th; after the last the message has failed.
	WebhookRetrySchedule []time.Duration

	// Settings are the values of the settings the service's modules
	// declare (operation.Module.Settings), by name.
	Settings setting.Values
}

// DevMode reports whether the service runs with an embedded PostgreSQL.
func (c Config) DevMode() bool { return c.DatabaseURL == "" }

// DevAPIKeys is the demo key of dev mode.
const DevAPIKeys = "demo:sk_test_demo"

// DevOperatorKeys is the demo operator of dev mode.
const DevOperatorKeys = "dev:sk_operator_demo"

// StripeKeyTTL is how long Stripe is known to remember an idempotency key
// (at least 24 hours). PROVIDER_KEY_TTL may not exceed it with
// PROVIDER=stripe: a payment re-sent after Stripe forgot its key, because a
// lookup missed the first charge, would be charged twice.
const StripeKeyTTL = 24 * time.Hour

// MinInboxRetention is the shortest INBOX_RETENTION accepted: far longer
// than the windows in which a copy of an event arrives again by itself (the
// ledger's ack wait and the relay's claim lease, 30 s each, and JetStream's
// duplicate window, 2 min).
const MinInboxRetention = time.Hour

// Load parses args (without the program name) over the environment: the
// service's own settings, and those its modules declare (settings), each
// with its flag and its line in -help.
func Load(args []string, getenv func(string) string, stderr io.Writer, settings ...setting.Setting) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("paymentsapi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	var durErr error
	dur := func(p *time.Duration, flagName, envName, def, usage string) {
		d, err := time.ParseDuration(env(envName, def))
		if err != nil {
			durErr = errors.Join(durErr, fmt.Errorf("%s: %w", envName, err))
		}
		fs.DurationVar(p, flagName, d, usage+" ("+envName+")")
	}
	// Secrets take their variable only after parsing, so that -h and a
	// mistyped flag never print them as defaults.
	secrets := map[*string]string{}
	secret := func(p *string, flagName, envName, usage string) {
		fs.StringVar(p, flagName, "", usage+" ("+envName+")")
		secrets[p] = envName
	}
	secret(&c.DatabaseURL, "database-url", "DATABASE_URL", "PostgreSQL URL; empty starts an embedded PostgreSQL")
	fs.StringVar(&c.DataDir, "data-dir", env("DATA_DIR", ".data"), "dev mode: data directory of the embedded PostgreSQL (DATA_DIR)")
	fs.StringVar(&c.HTTPAddr, "http-addr", env("HTTP_ADDR", ":8080"), "listen address (HTTP_ADDR)")
	fs.StringVar(&c.PublicURL, "public-url", env("PUBLIC_URL", ""), "base URL customers' browsers reach the service at, where the provider sends them back after an authentication; empty: http:// and HTTP_ADDR (PUBLIC_URL)")
	fs.StringVar(&c.OpsAddr, "ops-addr", env("OPS_ADDR", ""), "listen address of the operations endpoints, /metrics (with /healthz and /readyz), off the public listener, e.g. 127.0.0.1:9090; empty: /metrics is served on HTTP_ADDR (OPS_ADDR)")
	fs.StringVar(&c.DebugAddr, "debug-addr", env("DEBUG_ADDR", ""), "listen address of Go's profiler, /debug/pprof/ (unauthenticated: use loopback); empty: none (DEBUG_ADDR)")
	secret(&c.APIKeys, "api-keys", "API_KEYS", "tenant:secret pairs, comma-separated")
	secret(&c.OperatorKeys, "operator-keys", "OPERATOR_KEYS", "operators' name:secret pairs, comma-separated (GET /audit-events)")
	var trustedProxies string
	fs.StringVar(&trustedProxies, "trusted-proxies", env("TRUSTED_PROXIES", ""),
		"CIDRs of the proxies whose X-Forwarded-For names the client, comma-separated; empty: none (TRUSTED_PROXIES)")
	secret(&c.APIKeyPepper, "api-key-pepper", "API_KEY_PEPPER", "server secret API keys are hashed under, at least 32 characters; dev mode: generated in the data directory")
	secret(&c.SecretsKey, "secrets-key", "SECRETS_KEY", "key webhook signing secrets are stored encrypted under: the base64 of 32 random bytes (openssl rand -base64 32); dev mode: generated in the data directory")
	var secretsKeyOthers string
	secret(&secretsKeyOthers, "secrets-key-others", "SECRETS_KEY_OTHERS", "more keys, comma-separated, that stored webhook secrets are opened with but never sealed under: the overlap while SECRETS_KEY is rotated (docs/operations.md)")
	fs.StringVar(&c.Provider, "provider", env("PROVIDER", ""), "payment provider: sim or stripe; outside dev mode it must be named (PROVIDER)")
	var simInProcess string
	fs.StringVar(&simInProcess, "provider-sim-in-process", env("PROVIDER_SIM_IN_PROCESS", ""),
		"outside dev mode, allow PROVIDER=sim without PROVIDER_URL to run the simulator in-process: true or false (PROVIDER_SIM_IN_PROCESS)")
	fs.StringVar(&c.ProviderSimCurrencyRules, "provider-sim-currency-rules", env("PROVIDER_SIM_CURRENCY_RULES", "iso"),
		"currency rules the in-process simulator plays: iso or stripe (PROVIDER_SIM_CURRENCY_RULES)")
	fs.StringVar(&c.ProviderURL, "provider-url", env("PROVIDER_URL", ""), "base URL of a running providersim; empty runs it in-process (PROVIDER_URL)")
	dur(&c.ProviderTimeout, "provider-timeout", "PROVIDER_TIMEOUT", "5s", "bound of one provider call")
	dur(&c.ProviderKeyTTL, "provider-key-ttl", "PROVIDER_KEY_TTL", "24h", "how long the provider remembers its idempotency keys")
	dur(&c.ProviderLookupLag, "provider-lookup-lag", "PROVIDER_LOOKUP_LAG", "0s", "how long a provider's lookup may miss a new object; the longer of this and the provider's own declaration is used")
	dur(&c.RefusalRecheck, "refusal-recheck", "REFUSAL_RECHECK", "1m", "how long after a refusal the reconciler looks it up anyway (at least the lookup lag)")
	secret(&c.StripeAPIKey, "stripe-api-key", "STRIPE_API_KEY", "Stripe secret key")
	secret(&c.StripeWebhookSecret, "stripe-webhook-secret", "STRIPE_WEBHOOK_SECRET", "Stripe webhook signing secret (whsec_...); empty: no POST /webhooks/stripe")
	fs.StringVar(&c.StripeAPIBase, "stripe-api-base", env("STRIPE_API_BASE", ""), "Stripe API base URL, e.g. a stripe-mock (STRIPE_API_BASE)")
	dur(&c.IdempotencyTTL, "idempotency-ttl", "IDEMPOTENCY_TTL", "24h", "replay window of stored responses")
	dur(&c.IdempotencyMetadataTTL, "idempotency-metadata-ttl", "IDEMPOTENCY_METADATA_TTL", "720h", "how long key metadata outlives the replay window")
	dur(&c.LeaseDuration, "lease-duration", "LEASE_DURATION", "30s", "how long a request owns an in-flight key")
	dur(&c.ReconcileInterval, "reconcile-interval", "RECONCILE_INTERVAL", "5s", "how often the reconciler runs")
	dur(&c.OutboxRetention, "outbox-retention", "OUTBOX_RETENTION", "168h", "how long published outbox events are kept, at least (EVENT_RETENTION when longer: the outbox is the event log)")
	dur(&c.EventRetention, "event-retention", "EVENT_RETENTION", "720h", "how long the event log (GET /events) keeps an event")
	dur(&c.InboxRetention, "inbox-retention", "INBOX_RETENTION", "720h", "how long the event consumers' inbox rows are kept (rejected ones are kept until a person deletes them)")
	dur(&c.CleanupInterval, "cleanup-interval", "CLEANUP_INTERVAL", "1m", "how often expired keys and published events are cleaned up")
	dur(&c.WebhookTimeout, "webhook-timeout", "WEBHOOK_TIMEOUT", "10s", "bound of one webhook delivery attempt, from dial to the last byte read")
	var allowHTTP, allowPrivate, allowedPorts, schedule, migrate string
	fs.StringVar(&migrate, "migrate", env("MIGRATE", "true"),
		"apply the migrations at start-up: true or false; false refuses a database that lacks one (run paymentsapi migrate) (MIGRATE)")
	fs.StringVar(&allowHTTP, "webhook-allow-http", env("WEBHOOK_ALLOW_HTTP", ""),
		"allow plain http webhook endpoints: true or false; default true in dev mode only (WEBHOOK_ALLOW_HTTP)")
	fs.StringVar(&allowPrivate, "webhook-allow-private", env("WEBHOOK_ALLOW_PRIVATE", ""),
		"allow webhook endpoints on loopback, private, link-local and other non-public addresses: true or false; default true in dev mode only (WEBHOOK_ALLOW_PRIVATE)")
	fs.StringVar(&allowedPorts, "webhook-allowed-ports", env("WEBHOOK_ALLOWED_PORTS", ""),
		"ports a webhook URL may name besides 443 and 8443, comma-separated; any port when WEBHOOK_ALLOW_HTTP or WEBHOOK_ALLOW_PRIVATE is true (WEBHOOK_ALLOWED_PORTS)")
	fs.StringVar(&schedule, "webhook-retry-schedule", env("WEBHOOK_RETRY_SCHEDULE", DefaultWebhookRetrySchedule),
		"waits after each failed webhook delivery attempt, comma-separated; after the last the message has failed (WEBHOOK_RETRY_SCHEDULE)")
	maxAttempts, err := strconv.Atoi(env("RECONCILE_MAX_ATTEMPTS", "20"))
	if err != nil || maxAttempts < 1 {
		durErr = errors.Join(durErr, fmt.Errorf("RECONCILE_MAX_ATTEMPTS must be a positive integer"))
	}
	fs.IntVar(&c.ReconcileMaxAttempts, "reconcile-max-attempts", maxAttempts, "unresolved attempts before a payment is marked for manual review (RECONCILE_MAX_ATTEMPTS)")
	fs.StringVar(&c.CommitMode, "commit-mode", env("COMMIT_MODE", "group"),
		"how requests' transactions are committed: inline (each on its own, as written) or group (those that queue up committed together, like statements merged) (COMMIT_MODE)")
	fs.StringVar(&c.ReplayCache, "replay-cache", env("REPLAY_CACHE", "off"),
		"off (every retry reads its key's record) or memory (retries of keys finished lately replayed from process memory; a window after a database failover, see docs/operations.md) (REPLAY_CACHE)")
	commits, err := strconv.Atoi(env("COMMIT_CONCURRENCY", "1"))
	if err != nil || commits < 1 {
		durErr = errors.Join(durErr, fmt.Errorf("COMMIT_CONCURRENCY must be a positive integer"))
	}
	fs.IntVar(&c.CommitConcurrency, "commit-concurrency", commits,
		"requests' transactions of each kind (claims, owner steps) in flight at once; beyond it they queue and are committed together, several in one transaction (COMMIT_CONCURRENCY)")
	fs.StringVar(&c.OutboxPublisher, "outbox-publisher", env("OUTBOX_PUBLISHER", "log"), "outbox publisher: log or nats (OUTBOX_PUBLISHER)")
	fs.StringVar(&c.OutboxRelay, "outbox-relay", env("OUTBOX_RELAY", "auto"),
		"outbox reader: stream (logical decoding: wal_level=logical and a role that may replicate), poll (any server), or auto: the stream where the server allows it, else poll (OUTBOX_RELAY)")
	secret(&c.NATSURL, "nats-url", "NATS_URL", "NATS URL (may hold credentials)")
	fs.StringVar(&c.LogLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error (LOG_LEVEL)")
	dur(&c.ShutdownTimeout, "shutdown-timeout", "SHUTDOWN_TIMEOUT", "20s", "how long in-flight requests may finish on shutdown")
	// num is dur for a number; unreadable, it is refused with mustBe.
	num := func(p *float64, flagName, envName, def, mustBe, usage string) {
		v, err := strconv.ParseFloat(env(envName, def), 64)
		if err != nil {
			durErr = errors.Join(durErr, fmt.Errorf("%s must be %s", envName, mustBe))
		}
		fs.Float64Var(p, flagName, v, usage+" ("+envName+")")
	}
	num(&c.CleanupShare, "cleanup-share", "CLEANUP_SHARE", "0.1", "a number above 0, at most 1",
		"largest share of its time clean-up spends in statements while it catches up: after each full batch it rests (1-share)/share times as long as the batch took; 1: no rest")
	num(&c.RateLimit, "rate-limit", "RATE_LIMIT", "0", "a number of requests per second (0: off)",
		"requests per second per tenant, in each instance; 0 turns the limit off")
	burst, err := strconv.Atoi(env("RATE_LIMIT_BURST", "0"))
	if err != nil {
		durErr = errors.Join(durErr, fmt.Errorf("RATE_LIMIT_BURST must be an integer"))
	}
	fs.IntVar(&c.RateLimitBurst, "rate-limit-burst", burst, "requests a tenant may send at once; 0: RATE_LIMIT rounded up (RATE_LIMIT_BURST)")
	raw := make([]string, len(settings))
	for i, st := range settings {
		if fs.Lookup(st.Flag()) != nil {
			return Config{}, fmt.Errorf("a module declares the setting %s, which the service has already", st.Name)
		}
		fs.StringVar(&raw[i], st.Flag(), env(st.Name, st.Default), st.Usage+" ("+st.Name+")")
	}
	if durErr != nil {
		return Config{}, durErr
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	c.Settings = make(setting.Values, len(settings))
	for i, st := range settings {
		v, err := st.Parse(raw[i])
		if err != nil {
			durErr = errors.Join(durErr, fmt.Errorf("%s %w", st.Name, err))
		}
		c.Settings[st.Name] = v
	}
	if durErr != nil {
		return Config{}, durErr
	}
	for p, envName := range secrets {
		if *p == "" {
			*p = env(envName, "")
		}
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.TrustedProxies, err = ParseCIDRs(trustedProxies); err != nil {
		return Config{}, fmt.Errorf("TRUSTED_PROXIES: %w", err)
	}
	for k := range strings.SplitSeq(secretsKeyOthers, ",") {
		if k = strings.TrimSpace(k); k != "" {
			c.SecretsKeyOthers = append(c.SecretsKeyOthers, k)
		}
	}
	if c.APIKeys == "" && c.DevMode() {
		c.APIKeys = DevAPIKeys
	}
	if c.OperatorKeys == "" && c.DevMode() {
		c.OperatorKeys = DevOperatorKeys
	}
	if c.PublicURL == "" {
		c.PublicURL = DefaultPublicURL(c.HTTPAddr)
	}
	c.PublicURL = strings.TrimSuffix(c.PublicURL, "/")
	if u, err := url.Parse(c.PublicURL); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return Config{}, fmt.Errorf("PUBLIC_URL must be an absolute http or https URL, not %q", c.PublicURL)
	}
	c.ProviderNamed = c.Provider != ""
	if !c.ProviderNamed {
		c.Provider = "sim"
	}
	// The webhook destinations' default depends on dev mode, known only
	// now that DATABASE_URL is read.
	var errs []error
	allow := func(p *bool, envName, v string) {
		*p = c.DevMode()
		if v == "" {
			return
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s must be true or false, not %q", envName, v))
		}
		*p = b
	}
	allow(&c.WebhookAllowHTTP, "WEBHOOK_ALLOW_HTTP", allowHTTP)
	allow(&c.WebhookAllowPrivate, "WEBHOOK_ALLOW_PRIVATE", allowPrivate)
	if c.Migrate, err = strconv.ParseBool(migrate); err != nil {
		errs = append(errs, fmt.Errorf("MIGRATE must be true or false, not %q", migrate))
	}
	if simInProcess != "" {
		b, err := strconv.ParseBool(simInProcess)
		if err != nil {
			errs = append(errs, fmt.Errorf("PROVIDER_SIM_IN_PROCESS must be true or false, not %q", simInProcess))
		}
		c.ProviderSimInProcess = b
	}
	if c.WebhookAllowedPorts, err = parsePorts(allowedPorts); err != nil {
		errs = append(errs, fmt.Errorf("WEBHOOK_ALLOWED_PORTS: %w", err))
	}
	if c.WebhookRetrySchedule, err = parseSchedule(schedule); err != nil {
		errs = append(errs, fmt.Errorf("WEBHOOK_RETRY_SCHEDULE: %w", err))
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return c, c.validate()
}

// DefaultWebhookRetrySchedule is WEBHOOK_RETRY_SCHEDULE's default: ten
// attempts over 3 days and 7 hours.
const DefaultWebhookRetrySchedule = "5s,5m,30m,2h,5h,10h,14h,24h,24h"

// parseSchedule reads a comma-separated list of positive durations.
func parseSchedule(s string) ([]time.Duration, error) {
	var out []time.Duration
	for part := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		if d <= 0 {
			return nil, fmt.Errorf("every wait must be positive, not %s", d)
		}
		out = append(out, d)
	}
	return out, nil
}

// parsePorts reads a comma-separated list of TCP ports ("": none).
func parsePorts(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%q is not a port (1-65535)", part)
		}
		out = append(out, n)
	}
	return out, nil
}

// DefaultPublicURL is PUBLIC_URL's default for the listen address addr:
// http:// and addr, localhost for a missing or unspecified host.
func DefaultPublicURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// StripeWebhookSecretPrefix starts every Stripe webhook signing secret.
const StripeWebhookSecretPrefix = "whsec_"

// CheckServer refuses a server's configuration that would, outside dev
// mode, pay through a provider nobody chose: a missing PROVIDER defaults to
// the simulator, and an in-process simulator "pays" every payment without
// any money moving.
func (c Config) CheckServer() error {
	if c.DevMode() {
		return nil
	}
	if !c.ProviderNamed {
		return errors.New("PROVIDER must be named outside dev mode (a DATABASE_URL is set): " +
			"PROVIDER=stripe for real payments, or PROVIDER=sim for the simulator")
	}
	if c.Provider == "sim" && c.ProviderURL == "" && !c.ProviderSimInProcess {
		return errors.New("PROVIDER=sim outside dev mode runs the simulator in this process, which moves no money: " +
			"set PROVIDER_URL to a running providersim, or PROVIDER_SIM_IN_PROCESS=true to mean it")
	}
	return nil
}

func (c Config) validate() error {
	var errs []error
	if c.Provider != "sim" && c.Provider != "stripe" {
		errs = append(errs, fmt.Errorf("PROVIDER must be sim or stripe, not %q", c.Provider))
	}
	if _, err := units.Named(c.ProviderSimCurrencyRules); err != nil {
		errs = append(errs, fmt.Errorf("PROVIDER_SIM_CURRENCY_RULES: %w", err))
	}
	if c.Provider == "stripe" && c.StripeAPIKey == "" {
		errs = append(errs, errors.New("PROVIDER=stripe needs STRIPE_API_KEY"))
	}
	if c.Provider == "stripe" && c.ProviderKeyTTL > StripeKeyTTL {
		errs = append(errs, fmt.Errorf("PROVIDER_KEY_TTL (%s) must be at most %s with PROVIDER=stripe: "+
			"Stripe forgets idempotency keys after 24 hours, and a payment re-sent after that could be charged twice",
			c.ProviderKeyTTL, StripeKeyTTL))
	}
	if c.StripeWebhookSecret != "" && !strings.HasPrefix(c.StripeWebhookSecret, StripeWebhookSecretPrefix) {
		// Never the value: it is a secret, and most likely another one
		// (the API key) in the wrong place.
		errs = append(errs, errors.New("STRIPE_WEBHOOK_SECRET must start with whsec_: it is the signing secret of the webhook "+
			"endpoint (Stripe Dashboard, Developers, Webhooks, or `stripe listen`), not an API key"))
	}
	if c.SecretsKey != "" {
		if _, err := secretbox.ParseKey(c.SecretsKey); err != nil {
			errs = append(errs, fmt.Errorf("SECRETS_KEY: %w", err))
		}
	}
	for i, k := range c.SecretsKeyOthers {
		if _, err := secretbox.ParseKey(k); err != nil {
			errs = append(errs, fmt.Errorf("SECRETS_KEY_OTHERS: key %d: %w", i+1, err))
		}
	}
	if len(c.SecretsKeyOthers) > 0 && c.SecretsKey == "" && !c.DevMode() {
		errs = append(errs, errors.New("SECRETS_KEY_OTHERS is set without SECRETS_KEY: outside dev mode the server would open secrets it could never seal again"))
	}
	if c.CommitMode != "inline" && c.CommitMode != "group" {
		errs = append(errs, fmt.Errorf("COMMIT_MODE must be inline or group, not %q", c.CommitMode))
	}
	if c.ReplayCache != "off" && c.ReplayCache != "memory" {
		errs = append(errs, fmt.Errorf("REPLAY_CACHE must be off or memory, not %q", c.ReplayCache))
	}
	if c.OutboxPublisher != "log" && c.OutboxPublisher != "nats" {
		errs = append(errs, fmt.Errorf("OUTBOX_PUBLISHER must be log or nats, not %q", c.OutboxPublisher))
	}
	if c.OutboxRelay != "auto" && c.OutboxRelay != "poll" && c.OutboxRelay != "stream" {
		errs = append(errs, fmt.Errorf("OUTBOX_RELAY must be auto, poll or stream, not %q", c.OutboxRelay))
	}
	if c.OutboxPublisher == "nats" && c.NATSURL == "" {
		errs = append(errs, errors.New("OUTBOX_PUBLISHER=nats needs NATS_URL"))
	}
	for name, d := range map[string]time.Duration{
		"PROVIDER_TIMEOUT": c.ProviderTimeout, "PROVIDER_KEY_TTL": c.ProviderKeyTTL,
		"IDEMPOTENCY_TTL": c.IdempotencyTTL, "IDEMPOTENCY_METADATA_TTL": c.IdempotencyMetadataTTL,
		"LEASE_DURATION": c.LeaseDuration, "RECONCILE_INTERVAL": c.ReconcileInterval,
		"SHUTDOWN_TIMEOUT": c.ShutdownTimeout, "OUTBOX_RETENTION": c.OutboxRetention,
		"CLEANUP_INTERVAL": c.CleanupInterval, "INBOX_RETENTION": c.InboxRetention, "EVENT_RETENTION": c.EventRetention,
		"REFUSAL_RECHECK": c.RefusalRecheck,
		"WEBHOOK_TIMEOUT": c.WebhookTimeout,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, not %s", name, d))
		}
	}
	if !(c.CleanupShare > 0 && c.CleanupShare <= 1) {
		errs = append(errs, fmt.Errorf("CLEANUP_SHARE must be above 0 and at most 1, not %v", c.CleanupShare))
	}
	if c.ProviderLookupLag < 0 {
		errs = append(errs, fmt.Errorf("PROVIDER_LOOKUP_LAG must be 0 or more, not %s", c.ProviderLookupLag))
	}
	if !(c.RateLimit >= 0) || math.IsInf(c.RateLimit, 0) {
		errs = append(errs, fmt.Errorf("RATE_LIMIT must be a finite number of requests per second, 0 (off) or more, not %v", c.RateLimit))
	}
	if c.RateLimitBurst < 0 {
		errs = append(errs, fmt.Errorf("RATE_LIMIT_BURST must be 0 or more, not %d", c.RateLimitBurst))
	}
	if c.RateLimitBurst > 0 && c.RateLimit == 0 {
		errs = append(errs, errors.New("RATE_LIMIT_BURST is set but RATE_LIMIT is 0 (off): set RATE_LIMIT too"))
	}
	if c.InboxRetention > 0 && c.InboxRetention < MinInboxRetention {
		errs = append(errs, fmt.Errorf("INBOX_RETENTION (%s) must be at least %s: the inbox must remember an event "+
			"for longer than the broker and the relay may deliver it again", c.InboxRetention, MinInboxRetention))
	}
	if c.LeaseDuration <= c.ProviderTimeout {
		errs = append(errs, fmt.Errorf("LEASE_DURATION (%s) must exceed PROVIDER_TIMEOUT (%s): "+
			"a request must not lose its key while it still waits for the provider", c.LeaseDuration, c.ProviderTimeout))
	}
	return errors.Join(errs...)
}

// ParseCIDRs parses a comma-separated list of networks (TRUSTED_PROXIES):
// CIDRs, or single addresses, which stand for themselves.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, "/") {
			a, err := netip.ParseAddr(item)
			if err != nil {
				return nil, fmt.Errorf("%q is neither a CIDR nor an address", item)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8", item)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
