package pgtest

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// apiKeysVersion is the migration that moved API keys to tenant_api_keys.
const apiKeysVersion = 42

// NewPoolAtWithKeys is NewPoolAt for a test in which this release's code
// stands in for an earlier one, on a version before the API keys moved to
// tenant_api_keys (00042): it adds that table, which this release
// authenticates against. Before the test migrates, RetireKeys gives the
// keys back to api_keys, where the earlier release kept them.
func NewPoolAtWithKeys(t testing.TB, version int64) *pgxpool.Pool {
	t.Helper()
	pool := NewPoolAt(t, version)
	if version >= apiKeysVersion {
		return pool
	}
	if _, err := pool.Exec(t.Context(), `CREATE TABLE tenant_api_keys (id text PRIMARY KEY, tenant_id text NOT NULL,
		secret_hash bytea NOT NULL UNIQUE, created_at timestamptz NOT NULL, last_used_at timestamptz, revoked_at timestamptz)`); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return pool
}

// RetireKeys moves the keys of a NewPoolAtWithKeys database into api_keys
// and drops tenant_api_keys, so that the migrations find the schema of
// the version the pool was made at, and copy the keys back themselves.
func RetireKeys(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `
		INSERT INTO api_keys (tenant_id, secret_hash, created_at, updated_at)
		SELECT DISTINCT ON (tenant_id) tenant_id, secret_hash, created_at, created_at FROM tenant_api_keys
		ORDER BY tenant_id, created_at;
		DROP TABLE tenant_api_keys`)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}
