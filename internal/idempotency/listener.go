package idempotency

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotifyChannel is the PostgreSQL channel on which a key's owner announces,
// in the transaction that stores its answer or releases its lease, that the
// key changed. The payload is the payment id.
const NotifyChannel = "paymentsapi_idempotency_keys"

// Listener delivers NotifyChannel notifications to the requests of this
// instance that wait for a key owned by a request on any instance
// (Prefer: wait). It holds one dedicated connection.
type Listener struct {
	cfg *pgx.ConnConfig
	log *slog.Logger

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

// NewListener returns a Listener that connects with cfg; Run starts it.
func NewListener(cfg *pgx.ConnConfig, log *slog.Logger) *Listener {
	return &Listener{cfg: cfg, log: log, waiters: map[string]map[chan struct{}]struct{}{}}
}

// Subscribe returns a channel that is signalled when the key of paymentID
// changes, and a function to call when the caller stops waiting.
func (l *Listener) Subscribe(paymentID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	if l.waiters[paymentID] == nil {
		l.waiters[paymentID] = map[chan struct{}]struct{}{}
	}
	l.waiters[paymentID][ch] = struct{}{}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.waiters[paymentID], ch)
		if len(l.waiters[paymentID]) == 0 {
			delete(l.waiters, paymentID)
		}
		l.mu.Unlock()
	}
}

// wake signals the waiters of paymentID, or every waiter when paymentID is
// empty (after a reconnection, when notifications may have been missed).
func (l *Listener) wake(paymentID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, set := range l.waiters {
		if paymentID != "" && id != paymentID {
			continue
		}
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// Run listens until ctx ends, reconnecting after failures.
func (l *Listener) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		l.log.WarnContext(ctx, "idempotency listener disconnected; reconnecting", "error", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (l *Listener) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	l.wake("") // anything may have changed while we were not listening
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		l.wake(n.Payload)
	}
}
