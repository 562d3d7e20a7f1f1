package main

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/proctest"
)

// SIGTERM while a payment waits for a slow provider: the server stops taking
// requests but lets the one in flight finish, within SHUTDOWN_TIMEOUT, and
// exits cleanly; nothing is left for recovery.
func TestGracefulShutdownLetsInFlightRequestsFinish(t *testing.T) {
	apiBin, simBin := proctest.Binaries(t)
	_, simURL := proctest.Start(t, simBin, nil, "-addr", "127.0.0.1:0", "-slow", "2s")
	dbURL := pgtest.NewURL(t)
	api, apiURL := proctest.Start(t, apiBin, recAPIEnv(dbURL, simURL, "SHUTDOWN_TIMEOUT=20s"))
	db := recPool(t, dbURL)

	answer := make(chan httpResult, 1)
	failed := make(chan error, 1)
	go func() {
		r, err := recPost(apiURL, "shutdown-1", `{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"inv-shutdown","paymentMethod":"pm_sim_slow"}`, nil)
		if err != nil {
			failed <- err
			return
		}
		answer <- r
	}()
	recWaitFor(t, 20*time.Second, "the payment waiting for the provider", func(ctx context.Context) (bool, error) {
		var n int
		err := db.QueryRow(ctx, `SELECT count(*) FROM payments WHERE state = 'PROVIDER_REQUEST_SENT'`).Scan(&n)
		return n == 1, err
	})
	if err := api.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-answer:
		if r.status != http.StatusCreated {
			t.Fatalf("in-flight request answered %d %s", r.status, r.body)
		}
	case err := <-failed:
		t.Fatalf("in-flight request was cut off by the shutdown: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- api.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("API did not exit cleanly: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("API did not exit after SIGTERM")
	}
	if n := recCount(t, db, `payments WHERE state = 'COMPLETED'`); n != 1 {
		t.Errorf("completed payments = %d, want 1", n)
	}
	if n := recCount(t, db, `idempotency_keys WHERE response_status = 201`); n != 1 {
		t.Errorf("stored answers = %d, want 1", n)
	}
}
