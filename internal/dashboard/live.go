package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/payments"
)

// Live is the dashboard's one in-process broadcaster. It is fed by what
// this instance's outbox relay publishes (Tap), so that pages learn of new
// payments and changes without a query of their own: a page subscribes to
// its tenant's changes (an operator's, to any tenant's) and the broadcaster
// hands each to the pages that want it. Only the instance whose relay holds
// the outbox publishes (one relay reads at a time): the pages served by
// another instance see no change until their instance's relay takes over.
type Live struct {
	clock clock.Clock
	log   *slog.Logger
	// in takes the relay's published batches; when it is full a batch is
	// dropped rather than hold the relay back.
	in chan []outbox.Event
	// Activity counts what the events say, per tenant (the Overview).
	activity *activity

	mu   sync.Mutex
	subs map[*subscription]struct{}
	// stopped closes when the server shuts down: the streams end, so that
	// the shutdown does not wait for them.
	stopped  chan struct{}
	stopOnce sync.Once
}

// Change is what a page learns of one published event.
type Change struct {
	Tenant        string
	AggregateType string // payment, refund
	PaymentID     string // the payment's, for a payment's or a refund's event
	Payment       *payments.View
	PublishedAt   time.Time
	// Tick: not an event, the Overview's metrics were read again; every
	// page is told.
	Tick bool
}

// NewLive returns a broadcaster; Run it.
func NewLive(clk clock.Clock, log *slog.Logger) *Live {
	return &Live{clock: clk, log: log, in: make(chan []outbox.Event, 256), activity: newActivity(),
		subs: map[*subscription]struct{}{}, stopped: make(chan struct{})}
}

// Stop ends every page's stream, and refuses new ones: the server is
// shutting down (http.Server.RegisterOnShutdown), and a stream would hold
// its shutdown back until the timeout.
func (l *Live) Stop() { l.stopOnce.Do(func() { close(l.stopped) }) }

// Tap returns next, whose accepted events are also handed to l. It adds no
// wait to the relay: a batch is queued or, when the queue is full, dropped
// (the pages then miss it, and the Overview undercounts).
func (l *Live) Tap(next outbox.BatchPublisher) outbox.BatchPublisher {
	return &tap{live: l, next: next}
}

type tap struct {
	live *Live
	next outbox.BatchPublisher
}

func (t *tap) Publish(ctx context.Context, e outbox.Event) error {
	return t.PublishBatch(ctx, []outbox.Event{e})[0]
}

func (t *tap) PublishBatch(ctx context.Context, events []outbox.Event) []error {
	errs := t.next.PublishBatch(ctx, events)
	accepted := make([]outbox.Event, 0, len(events))
	for i, e := range events {
		if errs[i] == nil {
			accepted = append(accepted, e)
		}
	}
	if len(accepted) > 0 {
		select {
		case t.live.in <- accepted:
		default:
		}
	}
	return errs
}

// Run hands the tapped events to the subscribed pages until ctx ends.
// Every event is counted for the Overview from a scan of its payload; it is
// decoded only when a page of its tenant listens.
func (l *Live) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case batch := <-l.in:
			now := l.clock.Now()
			for _, e := range batch {
				l.take(e, now)
			}
		}
	}
}

// take counts e for the Overview and hands it to the pages that listen.
func (l *Live) take(e outbox.Event, now time.Time) {
	var c Change
	tenant, ok := peek(e.Payload, "tenantId")
	decoded := !ok
	if decoded {
		if c, ok = decode(e, now); !ok {
			return
		}
		tenant = c.Tenant
	}
	l.activity.add(tenant, e, now)
	if !l.listened(tenant) {
		return
	}
	if !decoded {
		if c, ok = decode(e, now); !ok {
			return
		}
	}
	l.broadcast(c)
}

// decode reads what a page shows of e: its tenant and, for a payment's
// event, the payment as the event carries it.
func decode(e outbox.Event, now time.Time) (Change, bool) {
	var body struct {
		payments.View
		TenantID string `json:"tenantId"`
	}
	if err := json.Unmarshal(e.Payload, &body); err != nil || body.TenantID == "" {
		return Change{}, false
	}
	c := Change{Tenant: body.TenantID, AggregateType: e.AggregateType, PaymentID: body.PaymentID, PublishedAt: now}
	if e.AggregateType == payments.ResourceType {
		c.PaymentID = e.AggregateID
		c.Payment = &body.View
	}
	return c, c.PaymentID != ""
}

// peek reads the string member name of a JSON object without decoding it
// whole: the broadcaster sees every event the relay publishes, and most go
// to no page. It reads the first "name" that is a key (a colon follows,
// after spaces: the relay reads payloads from jsonb, which writes them), and
// takes no escaped value (ok false: the caller decodes the payload). The
// operations' payloads are flat objects, so the first such key is the
// member.
func peek(payload []byte, name string) (string, bool) {
	key := []byte(`"` + name + `"`)
	for from := 0; ; {
		i := bytes.Index(payload[from:], key)
		if i < 0 {
			return "", false
		}
		at := from + i
		from = at + len(key)
		if at > 0 && payload[at-1] == '\\' {
			continue // inside a string
		}
		rest := bytes.TrimLeft(payload[from:], " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		rest = bytes.TrimLeft(rest[1:], " \t\r\n")
		if len(rest) == 0 || rest[0] != '"' {
			return "", false
		}
		end := bytes.IndexByte(rest[1:], '"')
		if end < 0 || bytes.IndexByte(rest[1:1+end], '\\') >= 0 {
			return "", false
		}
		return string(rest[1 : 1+end]), true
	}
}

// listened reports whether a page listens to tenant's changes.
func (l *Live) listened(tenant string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.subs {
		if s.tenant == "" || s.tenant == tenant {
			return true
		}
	}
	return false
}

// Tick tells every page that the Overview's metrics were read again.
func (l *Live) Tick() { l.broadcast(Change{Tick: true, PublishedAt: l.clock.Now()}) }

// subscription is one page's: the changes of its tenant ("": every
// tenant's), queued; a page that falls behind loses changes and is told so.
type subscription struct {
	tenant string
	ch     chan Change
	mu     sync.Mutex
	missed bool
}

// subscriptionBuffer is how many changes a page may have unread.
const subscriptionBuffer = 64

func (l *Live) subscribe(tenant string) *subscription {
	s := &subscription{tenant: tenant, ch: make(chan Change, subscriptionBuffer)}
	l.mu.Lock()
	l.subs[s] = struct{}{}
	l.mu.Unlock()
	return s
}

func (l *Live) unsubscribe(s *subscription) {
	l.mu.Lock()
	delete(l.subs, s)
	l.mu.Unlock()
}

func (l *Live) broadcast(c Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.subs {
		if !c.Tick && s.tenant != "" && s.tenant != c.Tenant {
			continue
		}
		select {
		case s.ch <- c:
		default:
			s.mu.Lock()
			s.missed = true
			s.mu.Unlock()
		}
	}
}

// tookMiss reports, once, that the page missed changes.
func (s *subscription) tookMiss() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.missed
	s.missed = false
	return m
}
