package apikeys

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

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

func TestUpsertStoresOnlyHashesAndAuthenticates(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	now := time.Now()
	if err := Upsert(ctx, pool, []Pair{{"demo", "sk_old"}}, now); err != nil {
		t.Fatal(err)
	}
	if tenant, err := Authenticate(ctx, pool, "sk_old"); err != nil || tenant != "demo" {
		t.Fatalf("Authenticate = %q, %v", tenant, err)
	}
	// Rotation: upserting the tenant replaces its secret.
	if err := Upsert(ctx, pool, []Pair{{"demo", "sk_new"}}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := Authenticate(ctx, pool, "sk_old"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("old secret still works: %v", err)
	}
	if _, err := Authenticate(ctx, pool, ""); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("empty secret: %v", err)
	}
	var stored []byte
	if err := pool.QueryRow(ctx, `SELECT secret_hash FROM api_keys WHERE tenant_id = 'demo'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(stored, []byte("sk_new")) || !bytes.Equal(stored, Hash("sk_new")) {
		t.Errorf("stored %x is not the hash of the secret", stored)
	}
	if n, err := Count(ctx, pool); err != nil || n != 1 {
		t.Errorf("Count = %d, %v", n, err)
	}
}
