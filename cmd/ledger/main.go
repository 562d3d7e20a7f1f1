// Command ledger runs the ledger projector: it consumes payment events from
// NATS JetStream (the stream the API's outbox relay publishes to, with
// OUTBOX_PUBLISHER=nats) and books exactly one ledger entry per succeeded
// payment in PostgreSQL (see package internal/ledger).
//
// Usage:
//
//	ledger [-database-url URL] [-nats-url URL] [-consumer ledger] [-metrics-addr :9091] [-log-level info] [-migrate=false]
//
// Each flag's default comes from a variable: DATABASE_URL, NATS_URL,
// LEDGER_CONSUMER, METRICS_ADDR, LOG_LEVEL, MIGRATE; a flag wins over its
// variable. DATABASE_URL and NATS_URL are required. It applies the
// migrations (the same ones as the API, under the same advisory lock), so
// it may start before the API; with MIGRATE=false it applies none and
// refuses a database that lacks one, as the API does. It waits for NATS while NATS is unreachable. With
// -metrics-addr it serves GET /metrics (Prometheus) and GET /healthz there.
// SIGINT or SIGTERM stops it after the messages already received are
// handled. Logs are JSON lines on stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/ledger"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub"
	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "ledger:", err)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

type config struct {
	databaseURL string
	natsURL     string
	consumer    string
	metricsAddr string
	logLevel    string
	migrate     bool
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	env := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	var c config
	fs := flag.NewFlagSet("ledger", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// URLs may hold credentials: they take their variable only after
	// parsing, so that -h and a mistyped flag never print them.
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL URL (DATABASE_URL)")
	fs.StringVar(&c.natsURL, "nats-url", "", "NATS URL (NATS_URL)")
	fs.StringVar(&c.consumer, "consumer", env("LEDGER_CONSUMER", ledger.DefaultConsumer), "inbox consumer and JetStream durable consumer name (LEDGER_CONSUMER)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", env("METRICS_ADDR", ""), "where to serve /metrics and /healthz; empty: not served (METRICS_ADDR)")
	fs.StringVar(&c.logLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error (LOG_LEVEL)")
	migrate := env("MIGRATE", "true")
	fs.StringVar(&migrate, "migrate", migrate, "apply the migrations at start-up: true or false (MIGRATE)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, errUsage
		}
		return c, err
	}
	if c.databaseURL == "" {
		c.databaseURL = env("DATABASE_URL", "")
	}
	if c.natsURL == "" {
		c.natsURL = env("NATS_URL", "")
	}
	var errs []error
	var err error
	if c.migrate, err = strconv.ParseBool(migrate); err != nil {
		errs = append(errs, fmt.Errorf("MIGRATE must be true or false, not %q", migrate))
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if c.databaseURL == "" {
		errs = append(errs, errors.New("DATABASE_URL (-database-url) is required"))
	}
	if c.natsURL == "" {
		errs = append(errs, errors.New("NATS_URL (-nats-url) is required"))
	}
	return c, errors.Join(errs...)
}

// run is the whole program: everything it needs from the OS is a parameter,
// so tests run it in-process. It consumes until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := logging.New(stderr, cfg.logLevel)
	tp, stopTracing, err := tracing.Setup(ctx, "paymentsapi-ledger", getenv, log)
	if err != nil {
		return err
	}
	defer stopTracing()

	pool, err := database.Open(ctx, cfg.databaseURL, tracing.Pool(tp))
	if err != nil {
		return err
	}
	defer pool.Close()
	if cfg.migrate {
		err = database.Migrate(ctx, pool, log)
	} else {
		_, err = database.CheckMigrated(ctx, pool)
	}
	if err != nil {
		return err
	}

	nc, err := natspub.Connect(cfg.natsURL, "paymentsapi-ledger", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("JetStream: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	proj := ledger.NewProjector(ledger.Deps{DB: pool, Clock: clock.System{}, Log: log, Registerer: reg, Modules: app.Modules(app.Config{}), Tracer: tp}, cfg.consumer)

	if cfg.metricsAddr != "" {
		stopMetrics, err := serveMetrics(cfg.metricsAddr, reg, stdout)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	log.Info("ledger starting", "consumer", cfg.consumer)
	if err := proj.Run(ctx, js, ledger.ConsumerConfig{}); err != nil {
		return err
	}
	log.Info("ledger stopped")
	return nil
}

// serveMetrics serves /metrics and /healthz on addr and prints the URL on
// stdout; the returned function stops it.
func serveMetrics(addr string, reg *prometheus.Registry, stdout io.Writer) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(stdout, "ledger metrics on http://%s/metrics\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
