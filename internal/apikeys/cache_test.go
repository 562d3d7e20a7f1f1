package apikeys_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// A key the database accepted is trusted for the TTL, then asked again: a
// revoked key stops working within the TTL. Unknown keys are never cached.
func TestAuthenticatorTrustsAcceptedKeysForItsTTL(t *testing.T) {
	ctx := context.Background()
	db, clk, k, secret := withKey(t)
	a := apikeys.NewAuthenticator(db, apikeys.Hasher{}, clk, 10*time.Second)
	if _, err := a.Authenticate(ctx, "sk_2"); !errors.Is(err, apikeys.ErrUnknownKey) {
		t.Fatalf("unknown key: %v", err)
	}
	if tenant, err := a.Authenticate(ctx, secret); err != nil || tenant.Tenant != "t1" {
		t.Fatalf("known key: %q %v", tenant, err)
	}
	if _, err := apikeys.Revoke(ctx, db, k.ID, clk.Now()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(9 * time.Second)
	if tenant, err := a.Authenticate(ctx, secret); err != nil || tenant.Tenant != "t1" {
		t.Errorf("inside the TTL the revoked key is still trusted (by design): %q %v", tenant, err)
	}
	clk.Advance(2 * time.Second)
	if _, err := a.Authenticate(ctx, secret); !errors.Is(err, apikeys.ErrUnknownKey) {
		t.Errorf("after the TTL a revoked key: %v, want ErrUnknownKey", err)
	}
	// A key created after a miss works at once: misses are not cached.
	if _, err := apikeys.Add(ctx, db, apikeys.Hasher{}, []apikeys.Pair{{Tenant: "t2", Secret: "sk_2"}}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if tenant, err := a.Authenticate(ctx, "sk_2"); err != nil || tenant.Tenant != "t2" {
		t.Errorf("a key added after a miss: %q %v", tenant, err)
	}
}

// However long an Authenticator is asked to trust keys, a revoked key is
// refused by every instance within 10 s of its revocation.
func TestARevokedKeyIsRefusedWithinTenSecondsWhateverTheTTL(t *testing.T) {
	ctx := context.Background()
	db, clk, k, secret := withKey(t)
	instances := []*apikeys.Authenticator{
		apikeys.NewAuthenticator(db, apikeys.Hasher{}, clk, time.Hour),
		apikeys.NewAuthenticator(db, apikeys.Hasher{}, clk, 0),
	}
	for _, a := range instances {
		if _, err := a.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := apikeys.Revoke(ctx, db, k.ID, clk.Now()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(apikeys.MaxCacheTTL)
	for i, a := range instances {
		if _, err := a.Authenticate(ctx, secret); !errors.Is(err, apikeys.ErrUnknownKey) {
			t.Errorf("instance %d, 10 s after the revocation: %v, want ErrUnknownKey", i, err)
		}
	}
}

// withKey gives a parallel test its database, a fake clock and a key of
// tenant t1 with its secret.
func withKey(t *testing.T) (*pgxpool.Pool, *clock.Fake, apikeys.Key, string) {
	t.Helper()
	t.Parallel()
	db := pgtest.NewPool(t)
	clk := clock.NewFake(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	k, secret, err := apikeys.Create(context.Background(), db, apikeys.Hasher{}, "t1", false, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	return db, clk, k, secret
}
