package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

const outboxUsage = `usage:
  paymentsapi outbox parked [flags]               list parked outbox events (up to 1000), one JSON object a line
  paymentsapi outbox unpark -all [flags]          send every parked event round again
  paymentsapi outbox unpark [flags] EVENT-ID...   send these parked events round again

Flags are those of paymentsapi serve (DATABASE_URL, ...). An unparked event
is due at once, its attempts start over, and the events of its payment that
waited behind it follow it in order. Unpark once the cause of the failures
is fixed: a parked event's lastError says what it was.
`

// maxParkedListed bounds what `outbox parked` prints.
const maxParkedListed = 1000

// outboxCommand runs `paymentsapi outbox ...` (args after "outbox"), the
// operator's tools for parked outbox events. It works on the database of
// the configuration, as the server does, and may run while servers run.
func outboxCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "parked" && args[0] != "unpark") {
		fmt.Fprint(stderr, outboxUsage)
		return errUsage
	}
	sub, args := args[0], args[1:]
	all, eventIDs, rest, help := false, []string(nil), args[:0:0], false
	for _, a := range args {
		switch {
		case sub == "unpark" && (a == "-all" || a == "--all"):
			all = true
		case sub == "unpark" && ids.IsUUID(a):
			eventIDs = append(eventIDs, strings.ToLower(a))
		default:
			help = help || a == "-h" || a == "-help" || a == "--help"
			rest = append(rest, a)
		}
	}
	if sub == "unpark" && !help && all == (len(eventIDs) > 0) {
		fmt.Fprint(stderr, outboxUsage)
		if all {
			return errors.New("outbox unpark: give either -all or event ids, not both")
		}
		return errors.New("outbox unpark: give -all or the ids of the events to unpark")
	}
	cfg, log, err := operatorConfig(rest, getenv, stderr, outboxUsage)
	if err != nil {
		return err
	}
	a, err := newApp(ctx, cfg, log, useOperator, nil)
	if err != nil {
		return err
	}
	defer a.close()
	now := clock.System{}.Now()

	out := json.NewEncoder(stdout)
	switch {
	case sub == "parked":
		parked, err := outbox.Parked(ctx, a.pool, maxParkedListed)
		if err != nil {
			return err
		}
		for _, p := range parked {
			if err := out.Encode(p); err != nil {
				return err
			}
		}
		return nil
	case all:
		n, err := outbox.UnparkAll(ctx, a.pool, now)
		if err != nil {
			return err
		}
		log.Info("outbox events unparked", "count", n)
		return out.Encode(map[string]any{"unparked": n})
	default:
		unparked, notParked := 0, []string{}
		for _, id := range eventIDs {
			err := outbox.Unpark(ctx, a.pool, id, now)
			switch {
			case errors.Is(err, outbox.ErrNotParked):
				notParked = append(notParked, id)
			case err != nil:
				return err
			default:
				unparked++
				log.Info("outbox event unparked", "event_id", id)
			}
		}
		if err := out.Encode(map[string]any{"unparked": unparked, "notParked": notParked}); err != nil {
			return err
		}
		if len(notParked) > 0 {
			return fmt.Errorf("outbox unpark: %d of %d events were not parked (unknown, published, or not parked): %s",
				len(notParked), len(eventIDs), strings.Join(notParked, ", "))
		}
		return nil
	}
}
