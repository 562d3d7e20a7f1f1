package apikeys_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// A key the database accepted is trusted for the TTL, then asked again: a
// revoked key stops working within the TTL. Unknown keys are never cached.
func TestAuthenticatorTrustsAcceptedKeysForItsTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	clk := clock.NewFake(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	if err := apikeys.Upsert(ctx, db, []apikeys.Pair{{Tenant: "t1", Secret: "sk_1"}}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	a := apikeys.NewAuthenticator(db, clk, 10*time.Second)
	if _, err := a.Authenticate(ctx, "sk_2"); !errors.Is(err, apikeys.ErrUnknownKey) {
		t.Fatalf("unknown key: %v", err)
	}
	if tenant, err := a.Authenticate(ctx, "sk_1"); err != nil || tenant != "t1" {
		t.Fatalf("known key: %q %v", tenant, err)
	}
	if _, err := db.Exec(ctx, `DELETE FROM api_keys`); err != nil {
		t.Fatal(err)
	}
	clk.Advance(9 * time.Second)
	if tenant, err := a.Authenticate(ctx, "sk_1"); err != nil || tenant != "t1" {
		t.Errorf("inside the TTL the revoked key is still trusted (by design): %q %v", tenant, err)
	}
	clk.Advance(2 * time.Second)
	if _, err := a.Authenticate(ctx, "sk_1"); !errors.Is(err, apikeys.ErrUnknownKey) {
		t.Errorf("after the TTL a revoked key: %v, want ErrUnknownKey", err)
	}
	// A key created after a miss works at once: misses are not cached.
	if err := apikeys.Upsert(ctx, db, []apikeys.Pair{{Tenant: "t2", Secret: "sk_2"}}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if tenant, err := a.Authenticate(ctx, "sk_2"); err != nil || tenant != "t2" {
		t.Errorf("a key added after a miss: %q %v", tenant, err)
	}
}
