package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// TestOutboxCommandListsAndUnparks runs `paymentsapi outbox parked` and
// `paymentsapi outbox unpark` against a database with parked events.
func TestOutboxCommandListsAndUnparks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewURL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	var parked []outbox.Event
	for _, p := range []string{"pay_a", "pay_b", "pay_c"} {
		ev, err := outbox.NewEvent(ctx, "PaymentCreated", "payment", p, map[string]string{"paymentId": p}, at)
		if err != nil {
			t.Fatal(err)
		}
		b := &pgx.Batch{}
		outbox.Queue(b, ev)
		if err := pool.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		parked = append(parked, ev)
	}
	if _, err := pool.Exec(ctx, `UPDATE outbox_events SET parked_at = $1, attempts = 10, last_error = 'broker says no'`, at); err != nil {
		t.Fatal(err)
	}
	isParked := func(id string) bool {
		t.Helper()
		var p bool
		if err := pool.QueryRow(ctx, `SELECT parked_at IS NOT NULL FROM outbox_events WHERE id = $1`, id).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := map[string]string{"DATABASE_URL": dbURL, "LOG_LEVEL": "error"}
	outboxCmd := func(args ...string) (string, error) {
		var stdout bytes.Buffer
		err := outboxCommand(ctx, args, func(k string) string { return env[k] }, &stdout, io.Discard)
		return stdout.String(), err
	}

	out, err := outboxCmd("parked")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("outbox parked printed %d lines:\n%s", len(lines), out)
	}
	var first outbox.ParkedEvent
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first.ID != parked[0].ID || first.Attempts != 10 || first.LastError != "broker says no" || first.AggregateID != "pay_a" {
		t.Errorf("first parked event: %+v", first)
	}

	// One by id (upper case works too); an id that is not parked is named
	// and fails the command, after the others were unparked.
	unknown := "01900000-0000-7000-8000-000000000000"
	out, err = outboxCmd("unpark", strings.ToUpper(parked[0].ID), unknown)
	if err == nil || !strings.Contains(err.Error(), unknown) {
		t.Fatalf("unpark with an unknown id = %v", err)
	}
	if !strings.Contains(out, `"unparked":1`) || isParked(parked[0].ID) || !isParked(parked[1].ID) {
		t.Fatalf("unpark by id: %s", out)
	}

	// The rest at once.
	out, err = outboxCmd("unpark", "-all")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != `{"unparked":2}` || isParked(parked[1].ID) || isParked(parked[2].ID) {
		t.Fatalf("unpark -all: %s", out)
	}
	var attempts int
	if err := pool.QueryRow(ctx, `SELECT max(attempts) FROM outbox_events`).Scan(&attempts); err != nil || attempts != 0 {
		t.Fatalf("attempts after unpark: %d, %v (want 0: they start over)", attempts, err)
	}

	for _, args := range [][]string{nil, {"unpark"}, {"unpark", "-all", parked[0].ID}, {"frobnicate"}} {
		if _, err := outboxCmd(args...); err == nil {
			t.Errorf("outbox %q succeeded", args)
		}
	}
	if _, err := outboxCmd("unpark", "-h"); !errors.Is(err, errUsage) {
		t.Errorf("outbox unpark -h = %v, want usage", err)
	}
}
