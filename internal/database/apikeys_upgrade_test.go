package database_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// previousReleaseUpsert is how the release before 00042 stores its
// API_KEYS at start-up, statement for statement.
const previousReleaseUpsert = `
	INSERT INTO api_keys (tenant_id, secret_hash, created_at, updated_at)
	VALUES ($1, $2, $3, $3)
	ON CONFLICT (tenant_id) DO UPDATE
	SET secret_hash = EXCLUDED.secret_hash, updated_at = EXCLUDED.updated_at
	WHERE api_keys.secret_hash <> EXCLUDED.secret_hash`

// previousReleaseAuthenticate is how the release before 00042 finds a
// secret's tenant.
const previousReleaseAuthenticate = `SELECT tenant_id FROM api_keys WHERE secret_hash = $1`

// Migration 00042 keeps every stored key working, and keeps the previous
// release working beside this one during a rolling upgrade: its start-up
// upsert still succeeds and adds its key, a key this release revokes stops
// working on its instances too, and its upsert of a revoked secret (an old
// API_KEYS) brings it back nowhere.
func TestAPIKeysSurviveTheUpgradeAndRevocationsReachThePreviousRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolAt(t, 39)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	sum := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	if _, err := pool.Exec(ctx, previousReleaseUpsert, "demo", sum("sk_before_the_upgrade"), now); err != nil {
		t.Fatal(err)
	}
	// Up to the release of 00042, which ran beside the one before it.
	pgtest.MigrateTo(t, pool, pgtest.MigrationVersion(t, "api_keys_contract")-1)
	h, err := apikeys.NewHasher("a-pepper-of-at-least-thirty-two-chars")
	if err != nil {
		t.Fatal(err)
	}
	if tenant, err := apikeys.Authenticate(ctx, pool, h, "sk_before_the_upgrade", now); err != nil || tenant.Tenant != "demo" {
		t.Fatalf("a key stored before the upgrade: %q, %v", tenant, err)
	}

	// The previous release starts with another secret for the tenant.
	if _, err := pool.Exec(ctx, previousReleaseUpsert, "demo", sum("sk_rolled_out_by_the_old"), now); err != nil {
		t.Fatalf("the previous release's upsert after the upgrade: %v", err)
	}
	if tenant, err := apikeys.Authenticate(ctx, pool, h, "sk_rolled_out_by_the_old", now); err != nil || tenant.Tenant != "demo" {
		t.Errorf("a key the previous release stored after the upgrade: %q, %v", tenant, err)
	}

	keys, err := apikeys.List(ctx, pool, "demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := apikeys.Revoke(ctx, pool, k.ID, now); err != nil {
			t.Fatal(err)
		}
	}
	var tenant string
	if err := pool.QueryRow(ctx, previousReleaseAuthenticate, sum("sk_rolled_out_by_the_old")).Scan(&tenant); err == nil {
		t.Errorf("the previous release still finds a revoked key's tenant %q", tenant)
	}
	// The previous release restarts with its old API_KEYS.
	if _, err := pool.Exec(ctx, previousReleaseUpsert, "demo", sum("sk_rolled_out_by_the_old"), now); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, previousReleaseAuthenticate, sum("sk_rolled_out_by_the_old")).Scan(&tenant); err == nil {
		t.Errorf("the previous release's API_KEYS brought a revoked key back for it")
	}
	if _, err := apikeys.Authenticate(ctx, pool, h, "sk_rolled_out_by_the_old", now); !errors.Is(err, apikeys.ErrUnknownKey) {
		t.Errorf("the previous release's API_KEYS brought a revoked key back: %v", err)
	}

	// One release later the contract step drops api_keys, and what was
	// revoked stays revoked.
	if err := database.Migrate(ctx, pool, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	if _, err := apikeys.Authenticate(ctx, pool, h, "sk_rolled_out_by_the_old", now); !errors.Is(err, apikeys.ErrUnknownKey) {
		t.Errorf("after the contract step, a revoked key: %v", err)
	}
}
