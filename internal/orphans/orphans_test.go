package orphans_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/orphans"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// listing is a provider that holds fixed objects.
type listing struct {
	charges []provider.Charge
	refunds []provider.Refund
}

func (l listing) LookupLag() time.Duration { return 0 }
func (l listing) ListCharges(context.Context, time.Time) ([]provider.Charge, error) {
	return l.charges, nil
}
func (l listing) ListRefunds(context.Context, time.Time) ([]provider.Refund, error) {
	return l.refunds, nil
}

// The audit counts the provider's objects made with our keys whose rows are
// missing, and neither those whose rows exist nor another system's, and
// the periodic audit sets the gauge to that count.
func TestAuditCountsOnlyOurObjectsWithoutRows(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `CREATE TABLE widgets (id text PRIMARY KEY); INSERT INTO widgets VALUES ('wid_kept')`); err != nil {
		t.Fatal(err)
	}
	key := func(id string) string { return "ours:" + id }
	a := orphans.Auditor{
		DB: db,
		Listing: listing{
			charges: []provider.Charge{
				{ID: "ch_1", IdempotencyKey: key("wid_kept")},
				{ID: "ch_2", IdempotencyKey: key("wid_lost"), AmountMinor: 700},
				{ID: "ch_3", IdempotencyKey: "another-system:42"},
			},
			refunds: []provider.Refund{{ID: "re_1", IdempotencyKey: "another-system:43"}},
		},
		Charges: []orphans.Source{{
			Resource:    operation.Resource{Type: "widget", ProviderKey: key},
			ExistingIDs: `SELECT id FROM widgets WHERE id = ANY($1)`,
		}},
	}
	found, err := a.Find(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].ProviderID != "ch_2" || found[0].ResourceType != "widget" ||
		found[0].ResourceID != "wid_lost" || found[0].Object != orphans.ObjectCharge || found[0].AmountMinor != 700 {
		t.Fatalf("found %+v, want only ch_2", found)
	}

	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "paymentsapi_orphan_provider_objects", Help: "orphans"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(gauge)
	value := func() float64 {
		families, err := reg.Gather()
		if err != nil || len(families) != 1 {
			t.Fatalf("gather: %v %v", families, err)
		}
		return families[0].GetMetric()[0].GetGauge().GetValue()
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(runCtx, clock.System{}, time.Hour, 72*time.Hour, gauge, slog.New(slog.DiscardHandler))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for value() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	if got := value(); got != 1 {
		t.Fatalf("gauge = %v, want 1", got)
	}
}
