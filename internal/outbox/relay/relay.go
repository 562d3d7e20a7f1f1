// Package relay is the seam between the service and the two readers of
// the outbox: the stream (package outbox/stream: logical decoding, which
// needs wal_level=logical and a role that may replicate) and the poller
// (package outbox/poll: any PostgreSQL 13 or newer, any role). Both publish
// every event at least once, a payment's in the order they committed, park
// what keeps failing, and catch up after a restart or a failover; they
// pass the same tests (relay_test.go). Choose says which one a server can
// run, New builds it.
package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/poll"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
)

// Relay is what the service runs of a reader.
type Relay interface {
	// Run reads and publishes until ctx ends, starting over after any
	// failure.
	Run(ctx context.Context)
	// RunOnce publishes what was committed before it was called, and
	// returns how many events the publisher accepted meanwhile; for tests
	// and one-shot commands.
	RunOnce(ctx context.Context) (int, error)
	// Close ends what RunOnce kept open.
	Close(ctx context.Context)
}

var (
	_ Relay = (*stream.Relay)(nil)
	_ Relay = (*poll.Relay)(nil)
)

// Mode is OUTBOX_RELAY: which reader to run.
type Mode string

// The modes. Auto is the stream where the server and the role allow it,
// else the poller.
const (
	Auto   Mode = "auto"
	Poll   Mode = "poll"
	Stream Mode = "stream"
)

// Choose returns the reader to run for mode on db's server (Poll or
// Stream) and why, in a sentence for the start-up log. Stream on a server
// that cannot stream is refused (stream.ErrServerCannotStream, naming the
// fix); Auto falls back to the poller there.
func Choose(ctx context.Context, db outbox.DB, mode Mode) (Mode, string, error) {
	switch mode {
	case Poll:
		return Poll, "OUTBOX_RELAY=poll", nil
	case Stream, Auto:
	default:
		return "", "", fmt.Errorf("unknown OUTBOX_RELAY %q (auto, poll or stream)", mode)
	}
	err := stream.CheckServer(ctx, db)
	switch {
	case err == nil && mode == Stream:
		return Stream, "OUTBOX_RELAY=stream", nil
	case err == nil:
		return Stream, "OUTBOX_RELAY=auto, and the server has wal_level=logical and the role may replicate", nil
	case mode == Auto && errors.Is(err, stream.ErrServerCannotStream):
		return Poll, "OUTBOX_RELAY=auto, and the server cannot stream: " + err.Error(), nil
	}
	return "", "", err
}

// New returns the reader of mode (Poll or Stream, as Choose returns them)
// publishing with send (its zero fields the defaults), and the collector of
// its backlog gauges.
func New(mode Mode, d outbox.RelayDeps, send outbox.SendConfig) (Relay, prometheus.Collector, error) {
	switch mode {
	case Stream:
		r := stream.NewRelay(d, stream.RelayConfig{SendConfig: send})
		return r, stream.NewStatsCollector(d.DB, r.Slot(), d.Clock, d.Log), nil
	case Poll:
		r := poll.NewRelay(d, poll.RelayConfig{SendConfig: send})
		return r, poll.NewStatsCollector(d.DB, d.Clock, d.Log), nil
	}
	return nil, nil, fmt.Errorf("no outbox reader %q (poll or stream)", mode)
}
