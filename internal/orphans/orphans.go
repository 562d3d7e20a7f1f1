// Package orphans audits the provider: it finds the charges and refunds
// that this service made (their idempotency keys are derived from our
// resources' ids: operation.Resource.ProviderKey) but that no local row
// explains. The service writes a resource's row before it calls the
// provider, so such an object means the row was lost afterwards: an
// asynchronous standby promoted without the last commits. A client's retry
// with its key recreates the resource under the same derived id, and the
// object is explained again; until then it is listed here (paymentsapi
// orphans) and counted in the gauge paymentsapi_orphan_provider_objects.
//
// The package names no operation: the operations whose resources the
// provider's charges and refunds may be are handed to it (Source).
package orphans

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// The kinds of the provider's objects audited (Orphan.Object).
const (
	ObjectCharge = "charge"
	ObjectRefund = "refund"
)

// Source is an operation whose resources are the provider's objects of one
// kind: what their keys look like, and where their rows are.
type Source struct {
	// Resource derives the provider's key from our id, and back.
	Resource operation.Resource
	// ExistingIDs is the query of which of the ids $1 (text[]) are stored
	// (payments.ExistingIDs).
	ExistingIDs string
}

// Orphan is one of the provider's objects made with our key that no local
// row explains.
type Orphan struct {
	Object         string          `json:"object"` // charge or refund
	ProviderID     string          `json:"providerId"`
	IdempotencyKey string          `json:"idempotencyKey"`
	ResourceType   string          `json:"resourceType"` // payment, refund
	ResourceID     string          `json:"resourceId"`   // the id the key derives from, whose row is missing
	Status         provider.Status `json:"status"`
	AmountMinor    int64           `json:"amountMinor"`
	Currency       string          `json:"currency"`
	ChargeID       string          `json:"chargeId,omitempty"` // a refund's charge
	CreatedAt      time.Time       `json:"createdAt"`
}

// Auditor finds orphans.
type Auditor struct {
	DB      *pgxpool.Pool
	Listing provider.Listing
	// Charges and Refunds are the operations whose resources the
	// provider's charges, and its refunds, may be.
	Charges, Refunds []Source
}

// Find lists the provider's charges and refunds created at or after since
// whose key is one of ours and whose resource has no row.
func (a Auditor) Find(ctx context.Context, since time.Time) ([]Orphan, error) {
	charges, err := a.Listing.ListCharges(ctx, since)
	if err != nil {
		return nil, err
	}
	refunds, err := a.Listing.ListRefunds(ctx, since)
	if err != nil {
		return nil, err
	}
	var objects []Orphan
	for _, c := range charges {
		objects = append(objects, Orphan{Object: ObjectCharge, ProviderID: c.ID, IdempotencyKey: c.IdempotencyKey,
			Status: c.Status, AmountMinor: c.AmountMinor, Currency: c.Currency, CreatedAt: c.CreatedAt})
	}
	out, err := a.unexplained(ctx, objects, a.Charges)
	if err != nil {
		return nil, err
	}
	objects = objects[:0]
	for _, r := range refunds {
		objects = append(objects, Orphan{Object: ObjectRefund, ProviderID: r.ID, IdempotencyKey: r.IdempotencyKey,
			Status: r.Status, AmountMinor: r.AmountMinor, Currency: r.Currency, ChargeID: r.ChargeID, CreatedAt: r.CreatedAt})
	}
	orphanRefunds, err := a.unexplained(ctx, objects, a.Refunds)
	if err != nil {
		return nil, err
	}
	return append(out, orphanRefunds...), nil
}

// unexplained returns those of objects whose key one of sources derives
// and whose resource has no row. An object whose key no source derives is
// not ours (another system on the same provider account) and is skipped.
func (a Auditor) unexplained(ctx context.Context, objects []Orphan, sources []Source) ([]Orphan, error) {
	var out []Orphan
	for _, src := range sources {
		var mine []Orphan
		var ids []string
		for _, o := range objects {
			if id := src.Resource.IDFromProviderKey(o.IdempotencyKey); id != "" {
				o.ResourceType, o.ResourceID = src.Resource.Type, id
				mine, ids = append(mine, o), append(ids, id)
			}
		}
		if len(ids) == 0 {
			continue
		}
		rows, err := a.DB.Query(ctx, src.ExistingIDs, ids)
		if err != nil {
			return nil, fmt.Errorf("look for the rows of the provider's %ss: %w", src.Resource.Type, err)
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("look for the rows of the provider's %ss: %w", src.Resource.Type, err)
		}
		stored := make(map[string]bool, len(found))
		for _, id := range found {
			stored[id] = true
		}
		for _, o := range mine {
			if !stored[o.ResourceID] {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// Run audits every interval the objects created in the last window, and
// sets gauge to the number of orphans found, until ctx ends. A failed
// audit is logged and leaves the gauge as it was.
func (a Auditor) Run(ctx context.Context, clk clock.Clock, interval, window time.Duration, gauge prometheus.Gauge, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		// One audit may take at most the interval: a provider or database
		// that hangs delays the next audit, never stops them.
		actx, cancel := context.WithTimeout(ctx, interval)
		found, err := a.Find(actx, clk.Now().Add(-window))
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.WarnContext(ctx, "orphans: could not audit the provider", "error", err)
		default:
			gauge.Set(float64(len(found)))
			if len(found) > 0 {
				log.WarnContext(ctx, "orphans: the provider holds objects made with our keys that no local row explains",
					"count", len(found), "command", "paymentsapi orphans")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
