// Command providersim serves the payment provider simulator (package
// internal/provider/sim) over HTTP, so that the payments API can be killed
// and restarted while the provider keeps its memory.
//
// Usage:
//
//	providersim [-addr 127.0.0.1:8081] [-slow 2s] [-key-ttl 24h] [-flaky-lookups 2] [-hang 60s]
//	            [-currency-rules iso|stripe] [-webhook-url URL]
//	providersim -methods
//
// Each flag's default can also be set by an environment variable:
// PROVIDERSIM_ADDR, PROVIDERSIM_SLOW, PROVIDERSIM_KEY_TTL,
// PROVIDERSIM_FLAKY_LOOKUPS, PROVIDERSIM_HANG, PROVIDERSIM_CURRENCY_RULES,
// PROVIDERSIM_WEBHOOK_URL. A flag wins over its variable.
//
// -webhook-url is where the simulator announces what customers chose on
// its 3-D Secure challenge pages, as Stripe's webhooks would (a
// payment_intent event, signed with Stripe's scheme): a service's POST
// /webhooks/stripe, such as http://127.0.0.1:8080/webhooks/stripe. The
// signing secret is the environment variable PROVIDERSIM_WEBHOOK_SECRET
// (whsec_..., the service's STRIPE_WEBHOOK_SECRET), never a flag, so that
// it does not show in the process list. Without -webhook-url nothing is
// announced: the services learn the outcome from the customer's return and
// from their reconciler.
//
// -currency-rules stripe plays Stripe's currency rules (package units):
// amounts in Stripe's unit (ISK with two decimals, whole kronur only) and
// Stripe's refusals (BHD, JOD, KWD, OMR and TND amounts that do not end in
// 0). The default, iso, counts ISO 4217 minor units and takes any amount.
// The service's client learns which from GET /_sim/methods.
//
// Once listening it prints one line on stdout,
//
//	providersim listening on http://127.0.0.1:8081
//
// so that a launcher using port 0 learns the address. Logs are JSON lines on
// stderr. SIGINT or SIGTERM stops it gracefully.
//
// -methods prints the payment methods the simulator understands, and what
// their charges, captures and refunds do (sim.Behaviours), as a Markdown
// table on stdout, and exits. The HTTP API (charges, captures, voids,
// refunds, and the /_sim listings) is package sim's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/units"
)

// shutdownTimeout bounds the graceful shutdown.
const shutdownTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "providersim:", err)
		os.Exit(1)
	}
}

// run parses args (flag defaults from getenv), serves the simulator until ctx
// ends, then shuts it down. It prints the listening URL on stdout and logs
// on stderr. -h prints usage and returns nil.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if cfg.methods {
		_, err := io.WriteString(stdout, sim.MethodsMarkdown())
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))

	// A zero flag means "none"; in sim.Options zero means "default" and a
	// negative value means "none".
	opts := sim.Options{SlowDelay: cfg.slow, KeyTTL: cfg.keyTTL, FlakyLookups: cfg.flakyLookups, HangFor: cfg.hang, Logger: log,
		CurrencyRules: cfg.rules}
	if opts.SlowDelay == 0 {
		opts.SlowDelay = -1
	}
	if opts.FlakyLookups == 0 {
		opts.FlakyLookups = -1
	}
	if opts.HangFor == 0 {
		opts.HangFor = -1
	}
	srv, err := sim.Start(ctx, cfg.addr, opts)
	if err != nil {
		return err
	}
	srv.Simulator().SetWebhook(cfg.webhook)
	log.Info("providersim started", "url", srv.URL(), "slow", cfg.slow.String(), "keyTTL", cfg.keyTTL.String(),
		"flakyLookups", cfg.flakyLookups, "hang", cfg.hang.String(), "currencyRules", cfg.rules.Name(),
		"webhookURL", cfg.webhook.URL)
	if _, err := fmt.Fprintf(stdout, "providersim listening on %s\n", srv.URL()); err != nil {
		_ = srv.Close()
		return fmt.Errorf("writing the listening address: %w", err)
	}

	<-ctx.Done()
	log.Info("providersim shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	log.Info("providersim stopped")
	return nil
}

type config struct {
	addr         string
	slow         time.Duration
	keyTTL       time.Duration
	flakyLookups int
	hang         time.Duration
	rules        units.Rules
	methods      bool
	webhook      sim.WebhookTarget // zero: no webhooks
}

// webhookSecretPrefix starts every Stripe webhook signing secret.
const webhookSecretPrefix = "whsec_"

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	cfg := config{
		addr:         "127.0.0.1:8081",
		slow:         sim.DefaultSlowDelay,
		keyTTL:       sim.DefaultKeyTTL,
		flakyLookups: sim.DefaultFlakyLookups,
		hang:         sim.DefaultHangFor,
	}
	if v := getenv("PROVIDERSIM_ADDR"); v != "" {
		cfg.addr = v
	}
	cfg.webhook.URL = getenv("PROVIDERSIM_WEBHOOK_URL")
	cfg.webhook.Secret = getenv("PROVIDERSIM_WEBHOOK_SECRET")
	rules := getenv("PROVIDERSIM_CURRENCY_RULES")
	var err error
	envDuration := func(name string, dst *time.Duration) {
		if v := getenv(name); v != "" && err == nil {
			d, perr := time.ParseDuration(v)
			if perr != nil {
				err = fmt.Errorf("%s: %w", name, perr)
			}
			*dst = d
		}
	}
	envDuration("PROVIDERSIM_SLOW", &cfg.slow)
	envDuration("PROVIDERSIM_KEY_TTL", &cfg.keyTTL)
	envDuration("PROVIDERSIM_HANG", &cfg.hang)
	if v := getenv("PROVIDERSIM_FLAKY_LOOKUPS"); v != "" && err == nil {
		n, perr := strconv.Atoi(v)
		if perr != nil {
			err = fmt.Errorf("PROVIDERSIM_FLAKY_LOOKUPS: %w", perr)
		}
		cfg.flakyLookups = n
	}
	if err != nil {
		return cfg, err
	}

	fs := flag.NewFlagSet("providersim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.addr, "addr", cfg.addr, "listen address (port 0 picks a free port) [PROVIDERSIM_ADDR]")
	fs.DurationVar(&cfg.slow, "slow", cfg.slow, "delay before a slow payment method's charge answers [PROVIDERSIM_SLOW]")
	fs.DurationVar(&cfg.keyTTL, "key-ttl", cfg.keyTTL, "how long idempotency keys are remembered for creates [PROVIDERSIM_KEY_TTL]")
	fs.IntVar(&cfg.flakyLookups, "flaky-lookups", cfg.flakyLookups, "how many lookups of a charge with flaky lookups answer 503 [PROVIDERSIM_FLAKY_LOOKUPS]")
	fs.DurationVar(&cfg.hang, "hang", cfg.hang, "how long a charge, capture or refund whose answer is lost holds the request before dropping it [PROVIDERSIM_HANG]")
	fs.StringVar(&rules, "currency-rules", rules, "currency rules the simulator plays: iso (ISO 4217 minor units, any amount) or stripe (Stripe's units and refusals) [PROVIDERSIM_CURRENCY_RULES]")
	fs.StringVar(&cfg.webhook.URL, "webhook-url", cfg.webhook.URL, "where to announce the customers' choices on challenge pages as Stripe webhooks "+
		"(a service's /webhooks/stripe), signed with PROVIDERSIM_WEBHOOK_SECRET; empty: none [PROVIDERSIM_WEBHOOK_URL]")
	fs.BoolVar(&cfg.methods, "methods", false, "print the payment methods and what their charges, captures and refunds do, as Markdown, and exit")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.rules, err = units.Named(rules); err != nil {
		return cfg, fmt.Errorf("-currency-rules: %w", err)
	}
	if err := checkWebhook(cfg.webhook); err != nil {
		return cfg, err
	}
	switch {
	case fs.NArg() > 0:
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	case cfg.slow < 0:
		return cfg, errors.New("-slow must not be negative")
	case cfg.keyTTL <= 0:
		return cfg, errors.New("-key-ttl must be positive")
	case cfg.flakyLookups < 0:
		return cfg, errors.New("-flaky-lookups must not be negative")
	case cfg.hang < 0:
		return cfg, errors.New("-hang must not be negative")
	}
	return cfg, nil
}

// checkWebhook refuses a webhook target the service could not take: a URL
// that is not absolute http(s), a URL without a secret (every event would
// be refused as unsigned), or a secret without a URL (a mistake better
// said at start than found when no webhook comes).
func checkWebhook(t sim.WebhookTarget) error {
	switch {
	case t.URL == "" && t.Secret == "":
		return nil
	case t.URL == "":
		return errors.New("PROVIDERSIM_WEBHOOK_SECRET is set without -webhook-url: say where the webhooks go")
	case t.Secret == "":
		return errors.New("-webhook-url needs PROVIDERSIM_WEBHOOK_SECRET, the receiving service's STRIPE_WEBHOOK_SECRET")
	case !strings.HasPrefix(t.Secret, webhookSecretPrefix):
		return errors.New("PROVIDERSIM_WEBHOOK_SECRET must start with " + webhookSecretPrefix)
	}
	u, err := url.Parse(t.URL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("-webhook-url must be an absolute http or https URL, not %q", t.URL)
	}
	return nil
}
