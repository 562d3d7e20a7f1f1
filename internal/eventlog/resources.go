package eventlog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// OfResources returns the tenant's events about any of the resources ids
// (a payment and its refunds), oldest first, at most limit, that happened
// from from to to. An event is written in the transaction of its
// resource's change, at that change's time, so a resource's events lie
// between its creation and its last update: the window keeps the read to a
// range of the tenant's index.
func (l *Log) OfResources(ctx context.Context, tenant string, ids []string, from, to time.Time, limit int) ([]Entry, error) {
	rows, err := l.db.Query(ctx, `SELECT id::text, type, occurred_at, data FROM `+l.relation+` ev
		WHERE tenant_id = $1 AND aggregate_id = ANY($2) AND occurred_at BETWEEN $3 AND $4
		ORDER BY occurred_at, id LIMIT $5`, tenant, ids, from, to, limit)
	if err != nil {
		return nil, fmt.Errorf("read the events of %v: %w", ids, err)
	}
	entries, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return nil, fmt.Errorf("read the events of %v: %w", ids, err)
	}
	return entries, nil
}
