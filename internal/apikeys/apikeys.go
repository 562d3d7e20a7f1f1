// Package apikeys authenticates API clients. Each tenant has one secret; only
// its SHA-256 hash is stored. Secrets are long random strings, so a fast hash
// is enough: there is nothing to brute-force from the hash.
package apikeys

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnknownKey: no tenant has this secret.
var ErrUnknownKey = errors.New("unknown API key")

// Querier is what the package needs from a pool or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Pair is one tenant and its secret, as configured.
type Pair struct {
	Tenant string
	Secret string
}

// ParsePairs parses API_KEYS: comma-separated tenant:secret pairs.
func ParsePairs(s string) ([]Pair, error) {
	var pairs []Pair
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		tenant, secret, ok := strings.Cut(item, ":")
		tenant, secret = strings.TrimSpace(tenant), strings.TrimSpace(secret)
		if !ok || tenant == "" || secret == "" {
			return nil, fmt.Errorf("API_KEYS: %q is not a tenant:secret pair", redact(item))
		}
		if seen[tenant] {
			return nil, fmt.Errorf("API_KEYS: tenant %q appears twice", tenant)
		}
		seen[tenant] = true
		pairs = append(pairs, Pair{Tenant: tenant, Secret: secret})
	}
	return pairs, nil
}

// redact keeps a malformed entry recognisable in an error without printing
// a secret.
func redact(item string) string {
	if tenant, _, ok := strings.Cut(item, ":"); ok {
		return tenant + ":***"
	}
	if len(item) > 4 {
		return item[:4] + "***"
	}
	return "***"
}

// Hash is the stored form of a secret.
func Hash(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// Upsert stores each pair's hashed secret, replacing the tenant's previous one.
func Upsert(ctx context.Context, q Querier, pairs []Pair, now time.Time) error {
	for _, p := range pairs {
		_, err := q.Exec(ctx, `
			INSERT INTO api_keys (tenant_id, secret_hash, created_at, updated_at)
			VALUES ($1, $2, $3, $3)
			ON CONFLICT (tenant_id) DO UPDATE
			SET secret_hash = EXCLUDED.secret_hash, updated_at = EXCLUDED.updated_at
			WHERE api_keys.secret_hash <> EXCLUDED.secret_hash`,
			p.Tenant, Hash(p.Secret), now)
		if err != nil {
			return fmt.Errorf("store API key of tenant %q: %w", p.Tenant, err)
		}
	}
	return nil
}

// Count returns how many API keys are stored.
func Count(ctx context.Context, q Querier) (int, error) {
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM api_keys`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count API keys: %w", err)
	}
	return n, nil
}

// Authenticate returns the tenant whose secret this is, or ErrUnknownKey.
// The stored hash is compared in constant time.
func Authenticate(ctx context.Context, q Querier, secret string) (string, error) {
	if secret == "" {
		return "", ErrUnknownKey
	}
	h := Hash(secret)
	var (
		tenant string
		stored []byte
	)
	err := q.QueryRow(ctx, `SELECT tenant_id, secret_hash FROM api_keys WHERE secret_hash = $1`, h).
		Scan(&tenant, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrUnknownKey
	}
	if err != nil {
		return "", fmt.Errorf("authenticate: %w", err)
	}
	if subtle.ConstantTimeCompare(stored, h) != 1 {
		return "", ErrUnknownKey
	}
	return tenant, nil
}
