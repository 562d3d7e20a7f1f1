package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/backoff"
)

// NotifyChannel is the PostgreSQL channel on which a key's owner announces,
// in the transaction that stores its answer or releases its lease, that the
// key changed. The payload is the key's row id.
const NotifyChannel = "paymentsapi_idempotency_keys"

// Listener delivers NotifyChannel notifications to the requests of this
// instance that wait for a key owned by a request on any instance
// (Prefer: wait). It holds one dedicated connection.
type Listener struct {
	cfg *pgx.ConnConfig
	log *slog.Logger

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{} // by key row id, as in the payload
}

// NewListener returns a Listener that connects with cfg; Run starts it.
func NewListener(cfg *pgx.ConnConfig, log *slog.Logger) *Listener {
	return &Listener{cfg: cfg, log: log, waiters: map[string]map[chan struct{}]struct{}{}}
}

// Subscribe returns a channel that is signalled when key row keyID
// changes, and a function to call when the caller stops waiting.
func (l *Listener) Subscribe(keyID int64) (<-chan struct{}, func()) {
	id := strconv.FormatInt(keyID, 10)
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	if l.waiters[id] == nil {
		l.waiters[id] = map[chan struct{}]struct{}{}
	}
	l.waiters[id][ch] = struct{}{}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.waiters[id], ch)
		if len(l.waiters[id]) == 0 {
			delete(l.waiters, id)
		}
		l.mu.Unlock()
	}
}

// wake signals the waiters of key row keyID, or every waiter when keyID is
// empty (after a reconnection, when notifications may have been missed).
func (l *Listener) wake(keyID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, set := range l.waiters {
		if keyID != "" && id != keyID {
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
	policy := backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}
	for failures := 1; ctx.Err() == nil; failures++ {
		err := l.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := policy.Delay(failures)
		l.log.WarnContext(ctx, "idempotency listener disconnected; reconnecting", "error", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (l *Listener) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	lctx, cancel := context.WithTimeout(ctx, listenerPingTimeout)
	_, err = conn.Exec(lctx, "LISTEN "+NotifyChannel)
	cancel()
	if err != nil {
		return err
	}
	l.wake("") // anything may have changed while we were not listening
	for {
		wctx, cancel := context.WithTimeout(ctx, listenerIdle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			l.wake(n.Payload)
			continue
		case ctx.Err() != nil:
			return nil
		case !errors.Is(err, context.DeadlineExceeded):
			return err
		}
		// Nothing arrived for listenerIdle. A frozen primary (or one
		// behind a partition) keeps the connection open and silent, and
		// after a failover the notifications come from the new primary:
		// ask this server to answer within listenerPingTimeout, else
		// reconnect. pgx leaves the connection usable after a
		// WaitForNotification deadline.
		pctx, cancel := context.WithTimeout(ctx, listenerPingTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("idempotency listener: the database did not answer a ping: %w", err)
		}
	}
}

// listenerIdle is how long the listener waits for a notification before it
// checks that its server still answers; listenerPingTimeout bounds that
// check (and LISTEN). Together they bound how long a frozen primary can keep
// `Prefer: wait` requests from being woken by the new one; those requests
// also check their key on their own at the end of their wait.
const (
	listenerIdle        = 5 * time.Second
	listenerPingTimeout = 3 * time.Second
)
