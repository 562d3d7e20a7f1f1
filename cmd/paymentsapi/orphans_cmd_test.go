package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/orphans"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
)

// `paymentsapi orphans` finds exactly the charge and the refund whose local
// rows a lost tail took (exit 4), and nothing once the clients' retries
// with their keys recreated them under the same ids (exit 0); the charge
// was made once.
func TestOrphansFindsWhatALostTailLeftAtTheProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	simSrv, err := sim.Start(ctx, "127.0.0.1:0", sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = simSrv.Close() })
	dbURL := pgtest.NewURL(t)
	db := recPool(t, dbURL)
	core := app.New(app.Deps{
		DB: db, Provider: simclient.New(simSrv.URL(), nil), Clock: clock.System{},
		Log: slog.New(slog.DiscardHandler), Metrics: metrics.New(prometheus.NewRegistry()),
	}, app.Config{
		ReplayTTL: 24 * time.Hour, Lease: 35 * time.Second, ProviderTimeout: 5 * time.Second,
		ProviderKeyWindow: 24 * time.Hour, RetryAfter: time.Second,
	})
	orphansNow := func() (lines []orphans.Orphan, err error) {
		t.Helper()
		var stdout bytes.Buffer
		env := map[string]string{"DATABASE_URL": dbURL, "PROVIDER_URL": simSrv.URL()}
		err = run(ctx, []string{"orphans", "-since", "1h"}, getenv(env),
			strings.NewReader(""), &stdout, io.Discard)
		dec := json.NewDecoder(&stdout)
		for dec.More() {
			var o orphans.Orphan
			if derr := dec.Decode(&o); derr != nil {
				t.Fatalf("orphans printed no JSON line: %v: %s", derr, stdout.String())
			}
			lines = append(lines, o)
		}
		return lines, err
	}

	cmd := payments.Command{AccountID: "acc_1", AmountMinor: 1000, Currency: "EUR", MerchantReference: "inv-1", PaymentMethod: sim.MethodVisa}
	pay := func() string {
		t.Helper()
		reply, err := core.Payments.Create(ctx, "tenant", "k-pay", cmd, 0)
		if err != nil || reply.Response.Status != 201 {
			t.Fatalf("create payment: %+v, %v", reply, err)
		}
		return reply.Resource.ID
	}
	refund := func(paymentID string) string {
		t.Helper()
		rc, err := core.Refunds.Prepare(ctx, "tenant", paymentID, refunds.CreateRequest{Amount: "3.00"})
		if err != nil {
			t.Fatal(err)
		}
		reply, err := core.Refunds.Create(ctx, "tenant", "k-refund", rc, 0)
		if err != nil || reply.Response.Status != 201 {
			t.Fatalf("create refund: %+v, %v", reply, err)
		}
		return reply.Resource.ID
	}
	paymentID := pay()
	refundID := refund(paymentID)
	if found, err := orphansNow(); err != nil || len(found) != 0 {
		t.Fatalf("orphans with every row in place: %+v, %v; want none, exit 0", found, err)
	}

	// The lost tail: the payment's and the refund's rows are gone.
	if _, err := db.Exec(ctx, `TRUNCATE payments, idempotency_keys, outbox_events CASCADE`); err != nil {
		t.Fatal(err)
	}
	found, err := orphansNow()
	var exit *exitError
	if !errors.As(err, &exit) || exit.status != exitOrphans {
		t.Fatalf("orphans after the lost tail: %v, want exit status %d", err, exitOrphans)
	}
	if len(found) != 2 || found[0].Object != orphans.ObjectCharge || found[0].ResourceID != paymentID ||
		found[0].IdempotencyKey != payments.ProviderKey(paymentID) || found[0].AmountMinor != 1000 ||
		found[1].Object != orphans.ObjectRefund || found[1].ResourceID != refundID || found[1].AmountMinor != 300 {
		t.Fatalf("orphans after the lost tail: %+v, want the charge of %s and the refund %s", found, paymentID, refundID)
	}

	// The clients retry with their keys: the same ids, no orphan left.
	if again := pay(); again != paymentID {
		t.Fatalf("the retry created payment %s, want %s", again, paymentID)
	}
	if again := refund(paymentID); again != refundID {
		t.Fatalf("the retry created refund %s, want %s", again, refundID)
	}
	if found, err := orphansNow(); err != nil || len(found) != 0 {
		t.Fatalf("orphans after the retries: %+v, %v; want none, exit 0", found, err)
	}
	charges, refunded := simSrv.Simulator().Charges(), simSrv.Simulator().Refunds()
	if len(charges) != 1 || charges[0].RequestCount != 2 || len(refunded) != 1 || refunded[0].RequestCount != 2 {
		t.Fatalf("charges %+v, refunds %+v: want one of each, asked twice", charges, refunded)
	}
}

// The audit asks the servers' provider or nothing: never a simulator of its
// own, which would hold no charge and so find no orphan.
func TestOrphansRefusesWithoutTheRealProvider(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}
	err := run(context.Background(), []string{"orphans"}, getenv(env), strings.NewReader(""), io.Discard, io.Discard)
	if !errors.Is(err, errNeedsRealProviderForOrphans) {
		t.Errorf("orphans with only DATABASE_URL: %v, want a refusal naming PROVIDER_URL", err)
	}
	for _, args := range [][]string{{"orphans", "-since"}, {"orphans", "-since", "soon"}, {"orphans", "-since=-1h"}} {
		if err := run(context.Background(), args, getenv(env), strings.NewReader(""), io.Discard, io.Discard); err == nil ||
			!strings.Contains(err.Error(), "-since") {
			t.Errorf("%v: %v, want a refusal of -since", args, err)
		}
	}
}
