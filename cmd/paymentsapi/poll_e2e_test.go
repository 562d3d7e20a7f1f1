package main

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/pgembed"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/proctest"
)

var relayChosenRE = regexp.MustCompile(`outbox relay chosen.*"reader":"(\w+)"`)

// serveUntilCancel runs the service with env until the test ends, and
// returns its base URL and its stdout and stderr.
func serveUntilCancel(t *testing.T, env map[string]string) (base string, stdout, stderr *proctest.LineWatcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr = proctest.NewLineWatcher(), proctest.NewLineWatcher()
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, getenv(env), nil, stdout, stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run returned %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("run did not return after cancel")
		}
	})
	base, _ = stdout.Await(t, proctest.ListeningRE, 90*time.Second)
	return base, stdout, stderr
}

// With OUTBOX_RELAY=auto (the default), a role that may not replicate
// gets the poller, and the one line at start says so and why.
func TestAutoPollsWhereTheRoleMayNotReplicate(t *testing.T) {
	t.Parallel()
	asRole := pgtest.URLAsNewRole(t, pgtest.NewEmptyURL(t), "NOREPLICATION")
	_, _, stderr := serveUntilCancel(t, map[string]string{
		"DATABASE_URL": asRole, "HTTP_ADDR": "127.0.0.1:0", "API_KEYS": "t1:sk_test_poll_role_0123456789abcdef", "OUTBOX_RELAY": "auto", "PROVIDER": "sim", "PROVIDER_SIM_IN_PROCESS": "true",
	})
	reader, seen := stderr.Await(t, relayChosenRE, 30*time.Second)
	if line := seen[len(seen)-1]; reader != "poll" || !strings.Contains(line, "REPLICATION") {
		t.Fatalf("chose %s: %s; want poll, naming REPLICATION", reader, line)
	}
}

// The service on a stock PostgreSQL (wal_level=replica) and a role that is
// neither a superuser nor may replicate: it starts (OUTBOX_RELAY unset),
// polls, and publishes a payment's events, in order, on stdout.
func TestTheServicePublishesThroughThePollerOnAStockServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := pgembed.Start(ctx, pgembed.Options{
		DataDir: filepath.Join(tempDir(t), "pg"), Ephemeral: true, WALLevel: "replica",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop(context.Background()) })
	admin, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`CREATE ROLE app LOGIN NOSUPERUSER NOREPLICATION`, `CREATE DATABASE payments OWNER app`} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	_ = admin.Close(ctx)
	u, err := url.Parse(cluster.URL("payments"))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("app")

	secret := "sk_test_stock_server_0123456789abcdef"
	base, stdout, stderr := serveUntilCancel(t, map[string]string{
		"DATABASE_URL": u.String(), "HTTP_ADDR": "127.0.0.1:0", "API_KEYS": "t1:" + secret, "OUTBOX_RELAY": "auto", "PROVIDER": "sim", "PROVIDER_SIM_IN_PROCESS": "true",
	})
	reader, seen := stderr.Await(t, relayChosenRE, 30*time.Second)
	if line := seen[len(seen)-1]; reader != "poll" || !strings.Contains(line, "wal_level=replica") {
		t.Fatalf("chose %s: %s; want poll, naming wal_level=replica", reader, line)
	}
	res := call(t, http.MethodPost, base+"/payments", secret, "stock-1",
		`{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"stock-1","paymentMethod":"pm_card_visa"}`)
	if res.status != http.StatusCreated {
		t.Fatalf("POST /payments: %d %s", res.status, res.body)
	}
	created, _ := stdout.Await(t, regexp.MustCompile(`"type":"(PaymentCreated)"`), 30*time.Second)
	succeeded, _ := stdout.Await(t, regexp.MustCompile(`"type":"(PaymentSucceeded)"`), 30*time.Second)
	if created == "" || succeeded == "" {
		t.Fatal("the payment's events were not published")
	}
}
