package database_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// A regression guard for the schema: the columns these bookkeeping updates
// change (a key's waiters and lease, a refund's state) are in no index's
// key, expression or predicate, so the updates are HOT and write no index
// entry. Adding such an index (the audit in docs/INDEXES.md) fails here.
// The statements are plain SQL that change the same columns as the
// services' (whose own statements change more: the key's hold also sets
// the indexed recovery_next_at, and is not HOT), in one transaction whose
// own counts (pg_stat_get_xact_*) are read.
// The payments' moves are checked with the state machine's own statements
// in package payments.
func TestBookkeepingUpdatesAreHOT(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		table   string
		setup   string // inserts the row (and what it needs), as $1
		updates []string
	}{
		{
			name:  "a key's waiters and lease",
			table: "idempotency_keys",
			setup: `INSERT INTO idempotency_keys (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
				    lease_expires_at, created_at, recovery_next_at)
				VALUES ('t', 'create_payment', 'k', '\x01', 'payment', $1, now(), now(), now() + interval '1 day')`,
			updates: []string{
				`UPDATE idempotency_keys SET waiters = waiters + 1 WHERE resource_id = $1`,
				`UPDATE idempotency_keys SET lease_expires_at = now() + interval '30 seconds' WHERE resource_id = $1`,
			},
		},
		{
			name:  "a refund's moves",
			table: "refunds",
			setup: `WITH p AS (
				    INSERT INTO payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
				        payment_method, channel, state, created_at, updated_at)
				    VALUES ('pay_' || $1, 't', 'acc', 100, 'EUR', $1, 'pm_card_visa', 'web', 'RECEIVED', now(), now())
				    RETURNING id)
				INSERT INTO refunds (id, tenant_id, payment_id, amount_minor, currency, state, created_at, updated_at)
				SELECT $1, 't', id, 100, 'EUR', 'RECEIVED', now(), now() FROM p`,
			updates: []string{
				`UPDATE refunds SET state = 'PROVIDER_REQUEST_SENT', updated_at = now() WHERE id = $1`,
				`UPDATE refunds SET state = 'SUCCEEDED', provider_reference = 're_1', updated_at = now() WHERE id = $1`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			err := pgx.BeginFunc(ctx, pgtest.NewPool(t), func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, tc.setup, "x1"); err != nil {
					return err
				}
				for _, u := range tc.updates {
					if _, err := tx.Exec(ctx, u, "x1"); err != nil {
						return err
					}
				}
				var updated, hot int
				err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated($1::regclass),
				                                pg_stat_get_xact_tuples_hot_updated($1::regclass)`, tc.table).Scan(&updated, &hot)
				if err != nil {
					return err
				}
				if updated != len(tc.updates) || hot != updated {
					t.Errorf("%s: %d updates, %d of them HOT; want %d and %d", tc.table, updated, hot, len(tc.updates), len(tc.updates))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// No BEFORE UPDATE row trigger on the tables the hot path updates most:
// PostgreSQL locks each row before updating it when a table has one
// (whatever its columns and WHEN condition), a WAL record per update
// (migration 00015, part 3). payments has one, its state machine's.
func TestNoBeforeUpdateTriggerOnTheOutboxOrTheKeys(t *testing.T) {
	t.Parallel()
	rows, err := pgtest.NewPool(t).Query(context.Background(), `
		SELECT tgrelid::regclass::text || '.' || tgname FROM pg_trigger
		WHERE tgrelid IN ('outbox_events'::regclass, 'idempotency_keys'::regclass) AND NOT tgisinternal
		  AND tgtype & (1 << 0) <> 0 -- ROW
		  AND tgtype & (1 << 1) <> 0 -- BEFORE
		  AND tgtype & (1 << 4) <> 0 -- UPDATE`)
	if err != nil {
		t.Fatal(err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Errorf("BEFORE UPDATE row triggers: %v", found)
	}
}
