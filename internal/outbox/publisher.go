package outbox

import (
	"context"
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

// BatchPublisher is a Publisher that can send several events at once: one
// write, one round of acknowledgements. PublishBatch publishes events in
// their order and returns one error per event, each with Publish's meaning
// (nil once that event is durably accepted; ErrBrokerUnavailable wrapped
// for a failure of the broker as a whole). The relay uses it for the rows
// of a pass when there are several, and books each result as it books a
// single publish's, in order (see Relay).
type BatchPublisher interface {
	Publisher
	PublishBatch(ctx context.Context, events []Event) []error
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

var _ BatchPublisher = (*LogPublisher)(nil)

// Publish writes e as one JSON line.
func (p *LogPublisher) Publish(ctx context.Context, e Event) error {
	return p.PublishBatch(ctx, []Event{e})[0]
}

// PublishBatch writes events as JSON lines, in order, with one Write: the
// relay's pass costs one system call, not one per event. An event that
// cannot be encoded fails alone; a failed write fails every event of the
// batch, as the broker's (the writer's) failure.
func (p *LogPublisher) PublishBatch(ctx context.Context, events []Event) []error {
	errs := make([]error, len(events))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	var buf []byte
	written := make([]int, 0, len(events))
	for i, e := range events {
		line, err := AppendJSON(buf, e)
		if err != nil {
			errs[i] = err
			continue
		}
		buf = append(line, '\n')
		written = append(written, i)
	}
	if len(written) == 0 {
		return errs
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.w.Write(buf); err != nil {
		// The writer is this publisher's broker: no event gets through it.
		for _, i := range written {
			errs[i] = fmt.Errorf("write event %s: %w: %w", events[i].ID, ErrBrokerUnavailable, err)
		}
	}
	return errs
}
