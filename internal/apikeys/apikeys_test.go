package apikeys

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestParsePairs(t *testing.T) {
	pairs, err := ParsePairs(" demo:sk_1 , acme:sk:with:colons,")
	if err != nil || len(pairs) != 2 || pairs[1] != (Pair{"acme", "sk:with:colons"}) {
		t.Fatalf("got %v, %v", pairs, err)
	}
	for _, bad := range []string{"demo", "demo:", ":sk", "a:1,a:2"} {
		if _, err := ParsePairs(bad); err == nil {
			t.Errorf("ParsePairs(%q) accepted", bad)
		}
	}
	if _, err := ParsePairs("demo:"); err == nil || strings.Contains(err.Error(), "sk_") {
		t.Errorf("error must not echo secrets: %v", err)
	}
}

const testPepper = "pepper-of-at-least-thirty-two-characters"

// setUp gives a parallel test its database, a Hasher under testPepper and
// a time.
func setUp(t *testing.T) (*pgxpool.Pool, Hasher, time.Time) {
	t.Helper()
	t.Parallel()
	h, err := NewHasher(testPepper)
	if err != nil {
		t.Fatal(err)
	}
	return pgtest.NewPool(t), h, time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
}

// A tenant holds several keys at once (rotation: the new one works before
// the old one is revoked); a revoked key is refused, and API_KEYS naming it
// again, as a restarted instance with an old configuration would, neither
// revives it nor replaces the tenant's other keys.
func TestATenantHoldsSeveralKeysAndARevokedOneStaysRevoked(t *testing.T) {
	pool, h, now := setUp(t)
	ctx := context.Background()
	if n, err := Add(ctx, pool, h, []Pair{{"demo", "sk_configured_by_hand_long_enough"}}, now); err != nil || len(n) != 1 {
		t.Fatalf("Add = %v, %v", n, err)
	}
	old, oldSecret, err := Create(ctx, pool, h, "demo", false, now)
	if err != nil {
		t.Fatal(err)
	}
	_, newSecret, err := Create(ctx, pool, h, "demo", true, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(oldSecret, "sk_live_") || !strings.HasPrefix(newSecret, "sk_test_") || len(oldSecret) < len("sk_live_")+43 {
		t.Errorf("secrets %q, %q: want sk_live_/sk_test_ and 32 random bytes", oldSecret, newSecret)
	}
	for _, s := range []string{"sk_configured_by_hand_long_enough", oldSecret, newSecret} {
		if tenant, err := Authenticate(ctx, pool, h, s, now); err != nil || tenant.Tenant != "demo" {
			t.Fatalf("a key of the tenant: %q, %v", tenant, err)
		}
	}

	if _, err := Revoke(ctx, pool, old.ID, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := Authenticate(ctx, pool, h, oldSecret, now); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("a revoked key: %v, want ErrUnknownKey", err)
	}
	if tenant, err := Authenticate(ctx, pool, h, newSecret, now); err != nil || tenant.Tenant != "demo" {
		t.Errorf("the tenant's other key after the revocation: %q, %v", tenant, err)
	}
	// An instance started with an old API_KEYS naming the revoked secret,
	// for the same tenant or another.
	n, err := Add(ctx, pool, h, []Pair{{"demo", oldSecret}, {"other", newSecret}}, now.Add(time.Hour))
	if err != nil || len(n) != 0 {
		t.Errorf("Add of known secrets = %v, %v; want nothing added", n, err)
	}
	if _, err := Authenticate(ctx, pool, h, oldSecret, now); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("a revoked key named again by API_KEYS: %v, want ErrUnknownKey", err)
	}
	if _, err := Revoke(ctx, pool, "key_nope", now); !errors.Is(err, ErrNoSuchKey) {
		t.Errorf("revoke of an unknown id: %v", err)
	}

	keys, err := List(ctx, pool, "demo")
	if err != nil || len(keys) != 3 {
		t.Fatalf("List = %+v, %v", keys, err)
	}
	for _, k := range keys {
		if (k.ID == old.ID) != (k.RevokedAt != nil) || k.LastUsedAt == nil {
			t.Errorf("listed %+v: want revoked only for %s, and a last use", k, old.ID)
		}
	}
	if n, err := Count(ctx, pool); err != nil || n != 2 {
		t.Errorf("Count = %d, %v; want the 2 active keys", n, err)
	}
}

// Secrets are stored as an HMAC-SHA256 under the pepper, never in the
// clear; keys stored as a plain SHA-256 (before the pepper, or by the
// previous release) keep working beside them; and a revoked copy of a
// secret in one form refuses it in the other.
func TestSecretsAreStoredKeyedUnderThePepperAndPlainOnesKeepWorking(t *testing.T) {
	pool, h, now := setUp(t)
	ctx := context.Background()
	if _, err := NewHasher("short"); err == nil {
		t.Error("a pepper of 5 characters was accepted")
	}
	k, secret, err := Create(ctx, pool, h, "demo", false, now)
	if err != nil {
		t.Fatal(err)
	}
	var stored []byte
	if err := pool.QueryRow(ctx, `SELECT secret_hash FROM tenant_api_keys WHERE id = $1`, k.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, []byte(testPepper))
	mac.Write([]byte(secret))
	if !bytes.Equal(stored, mac.Sum(nil)) {
		t.Errorf("stored %x, want the HMAC-SHA256 of the secret under the pepper", stored)
	}
	other, _ := NewHasher(strings.Repeat("x", 40))
	if _, err := Authenticate(ctx, pool, other, secret, now); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("a keyed hash matched under another pepper: %v", err)
	}

	// A key of the previous release: a plain SHA-256.
	if _, err := Add(ctx, pool, Hasher{}, []Pair{{"acme", "sk_plain_long_enough_secret"}}, now); err != nil {
		t.Fatal(err)
	}
	if tenant, err := Authenticate(ctx, pool, h, "sk_plain_long_enough_secret", now); err != nil || tenant.Tenant != "acme" {
		t.Errorf("a plain SHA-256 key with the pepper set: %q, %v", tenant, err)
	}
	if n, err := Add(ctx, pool, h, []Pair{{"acme", "sk_plain_long_enough_secret"}}, now); err != nil || len(n) != 0 {
		t.Errorf("Add of a secret stored plain = %v, %v; want it known", n, err)
	}

	// The same secret stored in both forms; revoking either refuses it.
	if _, err := pool.Exec(ctx, `INSERT INTO tenant_api_keys (id, tenant_id, secret_hash, created_at) VALUES ('key_copy', 'demo', $1, $2)`,
		plain(secret), now); err != nil {
		t.Fatal(err)
	}
	if _, err := Revoke(ctx, pool, "key_copy", now); err != nil {
		t.Fatal(err)
	}
	if _, err := Authenticate(ctx, pool, h, secret, now); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("a secret whose plain copy is revoked: %v, want ErrUnknownKey", err)
	}
}
