package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// Publisher sends one event downstream. Publish returns nil only once the
// event is durably accepted (for a broker: acknowledged); the relay marks
// the event published after that, so a crash in between publishes it again.
// Publishing the same event twice must therefore be harmless: publishers
// pass the event id on as the message id, and consumers deduplicate by it.
type Publisher interface {
	Publish(ctx context.Context, e Event) error
}

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
		return fmt.Errorf("write event %s: %w", e.ID, err)
	}
	return nil
}
