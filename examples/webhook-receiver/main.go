// Command webhook-receiver is an example of a merchant's webhook endpoint
// for the payments API: it verifies each delivery with the Standard
// Webhooks library, deduplicates by webhook-id, answers 204 at once, and
// acts on the event afterwards (here: logs it).
//
//	WEBHOOK_SECRET=whsec_... go run ./examples/webhook-receiver -addr 127.0.0.1:8090
//
// Register it first, with a server that allows plain http and loopback
// destinations (dev mode, `make run`), and take the secret from the answer:
//
//	curl -s http://localhost:8080/webhook-endpoints -H 'Authorization: Bearer sk_test_demo' \
//	  -H 'Idempotency-Key: example-receiver' -H 'Content-Type: application/json' \
//	  -d '{"url":"http://127.0.0.1:8090/"}'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "the address to receive deliveries on")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, os.Getenv("WEBHOOK_SECRET"), log); err != nil {
		log.Error("webhook-receiver", "err", err)
		os.Exit(1)
	}
}

// run serves the receiver on addr until ctx ends, then lets the worker
// finish the events it was handed.
func run(ctx context.Context, addr, secret string, log *slog.Logger) error {
	if secret == "" {
		return errors.New("set WEBHOOK_SECRET to the endpoint's secret (whsec_...), as its registration answered it")
	}
	rc, err := NewReceiver(secret, 1000, 100_000, log)
	if err != nil {
		return fmt.Errorf("WEBHOOK_SECRET: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range rc.Events() {
			handle(log, ev)
		}
	}()
	srv := &http.Server{Addr: addr, Handler: rc, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	log.Info("receiving webhooks", "addr", addr)
	select {
	case err = <-served:
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err = srv.Shutdown(shutdown)
	}
	rc.Close()
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// handle acts on one new event. A real receiver would update its order
// here, in the transaction that also records ev.ID (see seenIDs).
func handle(log *slog.Logger, ev Event) {
	log.Info("event", "webhook_id", ev.ID, "type", ev.Type, "timestamp", ev.Timestamp, "data", string(ev.Data))
}
