// Command paymentsapi is the payments service. With no configuration it
// starts an embedded PostgreSQL under ./.data and an in-process provider
// simulator, and prints a curl command to try it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/config"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "paymentsapi:", err)
		}
		// A command whose answer is its status (orphans: 4, some found)
		// exits with it; anything else failed.
		var exit *exitError
		if errors.As(err, &exit) {
			stop()
			os.Exit(exit.status)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// usage lists the commands, for `paymentsapi -h`, which prints it after the
// flags that every command shares.
const usage = `
usage:
  paymentsapi [serve] [flags]                      the API, with its reconciler, relay and listener
  paymentsapi migrate [flags]                      apply the migrations and exit
  paymentsapi reconcile [-once] [flags]            the reconciler alone (an operator's tool)
  paymentsapi outbox parked | unpark -all | ID...  list or release parked outbox events
  paymentsapi outbox replay ID...                  publish events once more
  paymentsapi orphans [-since 72h] [flags]         the provider's objects no local row explains (exit 4)
  paymentsapi keys create TENANT [-test] | list [TENANT] | revoke KEY_ID   the API keys
  paymentsapi audit [-limit N] [-tenant T] [-action A]   the audit log, newest first
  paymentsapi secrets reseal [flags]               seal every webhook secret again under SECRETS_KEY

Each flag above also reads the environment variable its line names. With no
DATABASE_URL, serve starts in dev mode: an embedded PostgreSQL under DATA_DIR,
the provider simulator in-process, a demo key. "paymentsapi COMMAND -h" says
more about a command.
`

// run is the whole program: everything it needs from the OS is a parameter,
// so tests start the real server in-process. Its commands are those usage
// lists.
func run(ctx context.Context, args []string, getenv func(string) string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "migrate" {
		return migrateCommand(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "keys" {
		return keysCommand(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "outbox" {
		return outboxCommand(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "audit" {
		return auditCommand(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "secrets" {
		return secretsCommand(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "orphans" {
		return orphansCommand(ctx, args[1:], getenv, stdout, stderr)
	}
	command := "serve"
	if len(args) > 0 && (args[0] == "serve" || args[0] == "reconcile") {
		command, args = args[0], args[1:]
	}
	once := false
	if command == "reconcile" {
		rest := args[:0:0]
		for _, a := range args {
			if a == "-once" || a == "--once" {
				once = true
				continue
			}
			rest = append(rest, a)
		}
		args = rest
	}
	cfg, err := config.Load(args, getenv, stderr, app.Settings()...)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	if err != nil {
		return err
	}
	log := logging.New(stderr, cfg.LogLevel)
	if command == "reconcile" {
		if once { // an operator asking the provider now; a running reconciler is the reconciler
			ctx = asOperator(ctx, getenv)
		}
		return reconcile(ctx, cfg, log, stdout, once)
	}
	tp, stopTracing, err := tracing.Setup(ctx, "paymentsapi", getenv, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	return serve(ctx, cfg, log, stdout, tp)
}
