package apikeys_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
// Requests that arrive together with a secret nothing is remembered for
// (a busy key whose entry just ran out) share one lookup: one query, not
// one each.
func TestRequestsTogetherShareOneLookup(t *testing.T) {
	ctx := context.Background()
	db, clk, _, secret := withKey(t)
	counted := &countingQuerier{Querier: db}
	a := apikeys.NewAuthenticator(counted, apikeys.Hasher{}, clk, 10*time.Second)
	const requests = 200
	var (
		start sync.WaitGroup
		done  sync.WaitGroup
		fails atomic.Int64
	)
	start.Add(1)
	for range requests {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			if id, err := a.Authenticate(ctx, secret); err != nil || id.Tenant != "t1" {
				fails.Add(1)
			}
		}()
	}
	start.Done()
	done.Wait()
	if n := fails.Load(); n > 0 {
		t.Fatalf("%d of %d requests were not authenticated", n, requests)
	}
	if n := counted.queries.Load(); n != 1 {
		t.Errorf("%d requests together made %d lookups; want 1", requests, n)
	}
}

// countingQuerier counts the lookups made through it on the real database.
type countingQuerier struct {
	apikeys.Querier
	queries atomic.Int64
}

func (c *countingQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.queries.Add(1)
	return c.Querier.Query(ctx, sql, args...)
}

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
