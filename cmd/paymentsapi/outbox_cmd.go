package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/audit"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/relay"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
)

const outboxUsage = `usage:
  paymentsapi outbox parked [flags]               list parked outbox events (up to 1000), one JSON object a line
  paymentsapi outbox unpark -all [flags]          send every parked event round again
  paymentsapi outbox unpark [flags] EVENT-ID...   send these parked events round again, with their payments'
  paymentsapi outbox replay [flags] EVENT-ID...   publish these events once more (a consumer fixed)

Flags are those of paymentsapi serve (DATABASE_URL, ...). A parked event
either failed (its lastError says why) or waits behind an earlier event of
its payment that failed (waitsFor). Unparking an event releases every
parked event of its payment: the running relay publishes them within a
second, in order, their attempts starting over. Unpark once the cause of
the failures is fixed.

A replay publishes events the relay published already, through the running
relay, after what was written before it: for a consumer that refused them
and was fixed (consumers deduplicate by event id, so the others ignore
them). Events cleaned up after OUTBOX_RETENTION cannot be replayed: the
command names them and fails.
`

// maxParkedListed bounds what `outbox parked` prints.
const maxParkedListed = 1000

// outboxCommand runs `paymentsapi outbox ...` (args after "outbox"), the
// operator's tools for parked outbox events and replays. It works on the database of
// the configuration, as the server does, and may run while servers run.
func outboxCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "parked" && args[0] != "unpark" && args[0] != "replay") {
		fmt.Fprint(stderr, outboxUsage)
		return errUsage
	}
	sub, args := args[0], args[1:]
	all, eventIDs, rest, help := false, []string(nil), args[:0:0], false
	for _, a := range args {
		switch {
		case sub == "unpark" && (a == "-all" || a == "--all"):
			all = true
		case sub != "parked" && ids.IsUUID(a):
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
	if sub == "replay" && !help && len(eventIDs) == 0 {
		fmt.Fprint(stderr, outboxUsage)
		return errors.New("outbox replay: give the ids of the events to replay")
	}
	ctx = asOperator(ctx, getenv)
	a, err := openDatabaseTool(ctx, rest, getenv, stderr, outboxUsage)
	if err != nil {
		return err
	}
	defer a.close()
	log := a.log
	now := clock.System{}.Now()

	out := json.NewEncoder(stdout)
	switch {
	case sub == "parked":
		parked, err := outbox.Parked(ctx, a.pool, maxParkedListed)
		return printLines(out, parked, err)
	case sub == "replay":
		// A replay is a message in the stream's slot: the poller, which
		// has no slot, would never see it.
		reader, why, err := relay.Choose(ctx, a.pool, relay.Mode(a.cfg.OutboxRelay))
		if err != nil {
			return err
		}
		if reader != relay.Stream {
			return fmt.Errorf("outbox replay needs the stream reader, and the servers poll (%s)", why)
		}
		var missing []string
		err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
			if missing, err = stream.Replay(ctx, tx, eventIDs); err != nil {
				return err
			}
			if missing == nil {
				missing = []string{}
			}
			return audit.Record(ctx, tx, now, audit.Change{Action: outbox.AuditReplayed,
				Details: map[string]any{"eventIds": eventIDs, "notFound": missing}})
		})
		if err != nil {
			return err
		}
		log.Info("outbox events replayed", "count", len(eventIDs)-len(missing))
		if err := out.Encode(map[string]any{"replayed": len(eventIDs) - len(missing), "notFound": missing}); err != nil {
			return err
		}
		if len(missing) > 0 {
			return fmt.Errorf("outbox replay: %d of %d events are not in the outbox (cleaned up, or never written): %s",
				len(missing), len(eventIDs), strings.Join(missing, ", "))
		}
		return nil
	case all:
		var n int64
		err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
			if n, err = outbox.UnparkAll(ctx, tx, now); err != nil {
				return err
			}
			return audit.Record(ctx, tx, now, audit.Change{Action: outbox.AuditUnparked,
				Details: map[string]any{"all": true, "count": n}})
		})
		if err != nil {
			return err
		}
		log.Info("outbox events unparked", "count", n)
		return out.Encode(map[string]any{"unparked": n})
	default:
		var released, notParked []string
		err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
			released, notParked = nil, []string{}
			for _, id := range eventIDs {
				err := outbox.Unpark(ctx, tx, id, now)
				switch {
				case errors.Is(err, outbox.ErrNotParked):
					notParked = append(notParked, id)
				case err != nil:
					return err
				default:
					released = append(released, id)
				}
			}
			if len(released) == 0 {
				return nil
			}
			return audit.Record(ctx, tx, now, audit.Change{Action: outbox.AuditUnparked,
				Details: map[string]any{"eventIds": released, "count": len(released)}})
		})
		if err != nil {
			return err
		}
		unparked := len(released)
		for _, id := range released {
			log.Info("outbox event unparked", "event_id", id)
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
