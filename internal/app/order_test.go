package app_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
)

// The order of app.Modules is the order of the core's operations and
// nothing else: built from the list reversed, every operation is built,
// and a manual payment's authorization still schedules its expiry (the
// cancel operation's hook at the payments' move to AUTHORIZED).
func TestModulesAreWiredTheSameInEitherOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	simSrv := httptest.NewServer(sim.New(sim.Options{}))
	t.Cleanup(simSrv.Close)
	clk := clock.NewFake(now)
	log := slog.New(slog.DiscardHandler)
	m := metrics.New(prometheus.NewRegistry())
	engine := idempotency.NewEngine(idempotency.Deps{DB: pool, Clock: clk, Log: log, Metrics: m}, idempotency.Config{
		ReplayTTL: 24 * time.Hour, Lease: 30 * time.Second, RetryAfter: time.Second, CommitMode: pgtest.CommitMode(),
	})
	env := operation.Env{DB: pool, Engine: engine, Clock: clk, Log: log, Metrics: m, Provider: simclient.New(simSrv.URL, nil),
		Config: operation.Config{ReplayTTL: 24 * time.Hour, ProviderTimeout: 5 * time.Second, ProviderKeyWindow: 24 * time.Hour}}

	mods := app.Modules(app.Config{})
	reversed := slices.Clone(mods)
	slices.Reverse(reversed)
	ops, err := operation.Build(reversed, env)
	if err != nil {
		t.Fatalf("the modules in reverse: %v", err)
	}
	var pay *payments.Service
	for i, op := range ops {
		if op.Name() != reversed[i].Name {
			t.Errorf("operation %d is %s, want %s: the list's order", i, op.Name(), reversed[i].Name)
		}
		if p, ok := op.(*payments.Service); ok {
			pay = p
		}
	}

	cmd := payments.Command{AccountID: "acc_1", AmountMinor: 1000, Currency: "EUR", MerchantReference: "order-1",
		PaymentMethod: "pm_card_visa", Channel: payments.ChannelWeb, CaptureMethod: payments.CaptureManual}
	reply, err := pay.Create(ctx, "t", "k1", cmd, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pay.Get(ctx, "t", reply.Resource.ID)
	if err != nil || p.State != payments.StateAuthorized {
		t.Fatalf("the manual payment: %v %v, want AUTHORIZED", p.State, err)
	}
	var expiries int
	err = pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE tenant_id = 't' AND operation = 'cancel_payment'
		AND idempotency_key = $1`, idempotency.ServiceKey("authorization-expiry:"+p.ID)).Scan(&expiries)
	if err != nil || expiries != 1 {
		t.Errorf("expiry voids scheduled with the authorization: %d %v, want 1", expiries, err)
	}
}
