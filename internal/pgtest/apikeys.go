package pgtest

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// apiKeysVersion is the migration that moved API keys to tenant_api_keys.
const apiKeysVersion = 42

// auditVersion is the migration that added the actor and request id of
// every transition, and the audit log.
const auditVersion = 44

// NewPoolAtWithKeys is NewPoolAt for a test in which this release's code
// stands in for an earlier one, on a version before the API keys moved to
// tenant_api_keys (00042): it adds that table, which this release
// authenticates against, and, before 00044, the columns and the table
// this release's audit writes. Before the test migrates, RetireKeys gives
// the keys back to api_keys, where the earlier release kept them, and
// takes the audit's additions back.
func NewPoolAtWithKeys(t testing.TB, version int64) *pgxpool.Pool {
	t.Helper()
	pool := NewPoolAt(t, version)
	var stmts []string
	if version < apiKeysVersion {
		stmts = append(stmts, `CREATE TABLE tenant_api_keys (id text PRIMARY KEY, tenant_id text NOT NULL,
		secret_hash bytea NOT NULL UNIQUE, created_at timestamptz NOT NULL, last_used_at timestamptz, revoked_at timestamptz)`)
	}
	if version < auditVersion {
		stmts = append(stmts, auditAdditions...)
	}
	for _, sql := range stmts {
		if _, err := pool.Exec(t.Context(), sql); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	return pool
}

// auditAdditions are what this release's audit writes that a schema
// before 00044 lacks (NewPoolAtWithKeys), and retireAudit takes them back.
var (
	auditAdditions = []string{
		`ALTER TABLE payment_transitions ADD COLUMN actor text, ADD COLUMN request_id text`,
		`ALTER TABLE refund_transitions ADD COLUMN actor text, ADD COLUMN request_id text`,
		`ALTER TABLE payment_action_transitions ADD COLUMN actor text, ADD COLUMN request_id text`,
		`CREATE TABLE audit_events (id uuid PRIMARY KEY, occurred_at timestamptz NOT NULL, actor text NOT NULL,
		request_id text, action text NOT NULL, tenant_id text, target_id text, details jsonb NOT NULL DEFAULT '{}')`,
	}
	retireAudit = `
		ALTER TABLE payment_transitions DROP COLUMN IF EXISTS actor, DROP COLUMN IF EXISTS request_id;
		ALTER TABLE refund_transitions DROP COLUMN IF EXISTS actor, DROP COLUMN IF EXISTS request_id;
		ALTER TABLE payment_action_transitions DROP COLUMN IF EXISTS actor, DROP COLUMN IF EXISTS request_id;
		DROP TABLE IF EXISTS audit_events`
)

// RetireKeys moves the keys of a NewPoolAtWithKeys database into api_keys
// and drops tenant_api_keys, and drops the audit's additions, so that the
// migrations find the schema of the version the pool was made at, and copy
// the keys back themselves.
func RetireKeys(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `
		INSERT INTO api_keys (tenant_id, secret_hash, created_at, updated_at)
		SELECT DISTINCT ON (tenant_id) tenant_id, secret_hash, created_at, created_at FROM tenant_api_keys
		ORDER BY tenant_id, created_at;
		DROP TABLE tenant_api_keys;`+retireAudit)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}
