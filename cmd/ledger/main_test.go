package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub/natstest"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestRunBooksEntriesFromNATS runs the command in-process against a real
// PostgreSQL and a real NATS server: an event published before it started
// and one published while it runs are booked, its metrics say so, and it
// stops cleanly when its context ends. It runs as docker-compose.yml runs
// it: with MIGRATE=false, as a role with only the application role's
// documented grants.
func TestRunBooksEntriesFromNATS(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	natsURL := natstest.Start(t)
	_, js := natstest.Connect(t, natsURL)
	pub := natspub.NewPublisher(js, natspub.StreamConfig{}, nil)
	publish := func(paymentID string) {
		t.Helper()
		ev, err := outbox.NewEvent(context.Background(), "PaymentSucceeded", "payment", paymentID, map[string]string{
			"paymentId": paymentID, "status": "SUCCEEDED", "accountId": "acc_1", "amount": "12.34", "currency": "EUR",
		}, time.Now().UTC())
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	publish("pay_before")

	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &testio.SyncBuffer{}, &testio.SyncBuffer{}
	done := make(chan error, 1)
	env := map[string]string{"DATABASE_URL": pgtest.URLAsApplicationRole(t, dbURL, ""), "NATS_URL": natsURL, "MIGRATE": "false"}
	go func() {
		done <- run(ctx, []string{"-metrics-addr", "127.0.0.1:0"}, func(k string) string { return env[k] }, stdout, stderr)
	}()

	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	waitEntries := func(n int) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			var got int
			err := pool.QueryRow(t.Context(), `SELECT count(*) FROM ledger_entries WHERE amount_minor = 1234`).Scan(&got)
			if err == nil && got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d ledger entries after 15s (err %v), want %d; stderr:\n%s", got, err, n, stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitEntries(1)
	publish("pay_during")
	waitEntries(2)

	m := regexp.MustCompile(`metrics on (http://\S+)`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no metrics URL on stdout: %q", stdout.String())
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `paymentsapi_ledger_events_total{outcome="applied"} 2`) {
		t.Errorf("metrics:\n%s", body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return 15s after its context ended")
	}
}

func TestRunNeedsItsURLs(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	err := run(context.Background(), nil, func(string) string { return "" }, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") || !strings.Contains(err.Error(), "NATS_URL") {
		t.Fatalf("run = %v", err)
	}
	if err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, io.Discard, &stderr); err != errUsage {
		t.Fatalf("run -h = %v", err)
	}
}

// With MIGRATE=false the ledger applies nothing: on a database that lacks
// migrations it stops, naming them, before it reads a message.
func TestRunWithoutMigratingRefusesADatabaseThatLacksMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewEmptyURL(t)
	env := map[string]string{"DATABASE_URL": dbURL, "NATS_URL": "nats://127.0.0.1:1", "MIGRATE": "false"}
	err := run(ctx, nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
	var missing *database.MissingMigrationsError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), "paymentsapi migrate") {
		t.Fatalf("run with MIGRATE=false on an empty database: %v, want a refusal naming paymentsapi migrate", err)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("the ledger created %d tables with MIGRATE=false", tables)
	}
}
