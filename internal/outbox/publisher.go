package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Publisher sends one event downstream. Publish returns nil only once the
// event is durably accepted (for a broker: acknowledged); the relay marks
// the event published after that, so a crash in between publishes it again.
// Publishing the same event twice must therefore be harmless: publishers
// pass the event id on as the message id, and consumers deduplicate by it.
//
// A failure of the broker as a whole (unreachable, not answering in time, no
// stream behind the subject) is not the event's fault: a publisher wraps
// ErrBrokerUnavailable into such errors, and the relay then pauses without
// counting an attempt on any row. Every other error counts against its row,
// which is parked after RelayConfig.MaxAttempts.
type Publisher interface {
	Publish(ctx context.Context, e Event) error
}

// ErrBrokerUnavailable is wrapped by a Publisher's error when the broker as a
// whole cannot take events right now, whatever the event. The relay hands
// the row back uncounted, stops its pass and backs off (see Relay).
var ErrBrokerUnavailable = errors.New("outbox broker unavailable")

// PublisherFunc adapts a function to the Publisher interface.
type PublisherFunc func(ctx context.Context, e Event) error

// Publish calls f(ctx, e).
func (f PublisherFunc) Publish(ctx context.Context, e Event) error { return f(ctx, e) }

// LogPublisher writes each event as one JSON line (the Event's JSON form:
// eventId, type, aggregateType, aggregateId, occurredAt, payload) to an
// io.Writer, typically stdout. It is the default publisher: useful in
// development and wherever a log shipper reads stdout. It is safe for
// concurrent use.
type LogPublisher struct {
	mu sync.Mutex
	w  io.Writer
}

// NewLogPublisher returns a LogPublisher writing to w.
func NewLogPublisher(w io.Writer) *LogPublisher { return &LogPublisher{w: w} }

// Publish writes e as one JSON line.
func (p *LogPublisher) Publish(ctx context.Context, e Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode event %s: %w", e.ID, err)
	}
	line = append(line, '\n')
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.w.Write(line); err != nil {
		// The writer is this publisher's broker: no event gets through it.
		return fmt.Errorf("write event %s: %w: %w", e.ID, ErrBrokerUnavailable, err)
	}
	return nil
}
