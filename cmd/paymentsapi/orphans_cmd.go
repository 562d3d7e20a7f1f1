package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/config"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

const orphansUsage = `usage:
  paymentsapi orphans [-since 72h] [flags]   list the provider's charges and refunds made with this
                                             service's keys that no local row explains, one JSON object a line

Flags are those of paymentsapi serve (DATABASE_URL, PROVIDER, PROVIDER_URL, ...): it needs the
servers' database and the real provider. It exits 4 when it finds any, 0 when none. An orphan is
a charge or refund whose payment or refund a database failover lost (the last commits of an
asynchronous standby): the client's retry with its key recreates it under the same id, and it is
no orphan any more. One that stays is for a person to look at (refund it, or recreate the payment).
`

// The audit the server runs beside its reconciler, for the gauge
// paymentsapi_orphan_provider_objects: every orphansInterval, over the
// objects of the last orphansWindow (the command's default -since).
const (
	orphansInterval = 10 * time.Minute
	orphansWindow   = 72 * time.Hour
)

// exitOrphans is the exit status of `paymentsapi orphans` that found some.
const exitOrphans = 4

// exitError ends the program with its status, having said what it had to.
type exitError struct {
	status int
	msg    string
}

func (e *exitError) Error() string { return e.msg }

// errNeedsRealProviderForOrphans: the audit asks the provider the servers
// use, never a simulator of its own (which would hold nothing).
var errNeedsRealProviderForOrphans = errors.New("paymentsapi orphans must ask the real provider: set PROVIDER_URL " +
	"(a running providersim) or PROVIDER=stripe; it never starts a simulator of its own")

// orphansCommand runs `paymentsapi orphans ...` (args after "orphans").
func orphansCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	since, rest, err := sinceFlag(args)
	if err != nil {
		fmt.Fprint(stderr, orphansUsage)
		return err
	}
	cfg, log, err := operatorConfig(rest, getenv, stderr, orphansUsage)
	if err != nil {
		return err
	}
	if cfg.Provider == "sim" && cfg.ProviderURL == "" {
		return errNeedsRealProviderForOrphans
	}
	a, err := newApp(ctx, cfg, log, useOperator, nil)
	if err != nil {
		return err
	}
	defer a.close()
	l, ok := a.provider.(provider.Listing)
	if !ok {
		return fmt.Errorf("paymentsapi orphans: provider %s cannot list its charges and refunds", cfg.Provider)
	}
	from := clock.System{}.Now().Add(-since)
	found, err := app.Auditor(a.pool, l).Find(ctx, from)
	if err != nil {
		return err
	}
	out := json.NewEncoder(stdout)
	for _, o := range found {
		if err := out.Encode(o); err != nil {
			return err
		}
	}
	if len(found) > 0 {
		return &exitError{status: exitOrphans, msg: fmt.Sprintf("%d of the provider's objects made with our keys since %s have no local row",
			len(found), from.UTC().Format(time.RFC3339))}
	}
	log.Info("orphans: every provider object made with our keys has its local row", "since", from.UTC().Format(time.RFC3339))
	return nil
}

// operatorConfig loads the configuration of an operator's command from its
// flags and environment (printing usage for -help), with its logger, and
// refuses one an operator's command must not run with (checkOperator).
func operatorConfig(args []string, getenv func(string) string, stderr io.Writer, usage string) (config.Config, *slog.Logger, error) {
	cfg, err := config.Load(args, getenv, stderr, app.Settings()...)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stderr, usage)
		return config.Config{}, nil, errUsage
	}
	if err != nil {
		return config.Config{}, nil, err
	}
	if err := checkOperator(cfg, false); err != nil {
		return config.Config{}, nil, err
	}
	return cfg, logging.New(stderr, cfg.LogLevel), nil
}

// openDatabaseTool opens the database of an operator's command that needs
// no provider (keys, outbox), from the command's flags.
func openDatabaseTool(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, usage string) (*instance, error) {
	cfg, log, err := operatorConfig(args, getenv, stderr, usage)
	if err != nil {
		return nil, err
	}
	return newApp(ctx, cfg, log, useOperator, nil)
}

// printLines prints what a listing found, one JSON object a line, or the
// listing's error.
func printLines[T any](out *json.Encoder, items []T, err error) error {
	if err != nil {
		return err
	}
	for _, item := range items {
		if err := out.Encode(item); err != nil {
			return err
		}
	}
	return nil
}

// sinceFlag takes -since DURATION (or -since=DURATION) out of args: how far
// back the audit looks, 72h unless given.
func sinceFlag(args []string) (since time.Duration, rest []string, err error) {
	since, rest = orphansWindow, args[:0:0]
	for i := 0; i < len(args); i++ {
		a, v, hasValue := args[i], "", false
		switch {
		case a == "-since" || a == "--since":
			if i+1 == len(args) {
				return 0, nil, errors.New("orphans: -since needs a duration, such as 72h")
			}
			i++
			v, hasValue = args[i], true
		case strings.HasPrefix(a, "-since=") || strings.HasPrefix(a, "--since="):
			_, v, _ = strings.Cut(a, "=")
			hasValue = true
		}
		if !hasValue {
			rest = append(rest, a)
			continue
		}
		if since, err = time.ParseDuration(v); err != nil || since <= 0 {
			return 0, nil, fmt.Errorf("orphans: -since %q is no positive duration, such as 72h", v)
		}
	}
	return since, rest, nil
}
