// Package apikeys authenticates API clients. A tenant holds any number of
// keys; each is a random secret of which only a hash is stored, and each can
// be revoked for good. Secrets are long random strings, so a fast keyed hash
// is enough: there is nothing to brute-force from the hash, and the pepper
// (API_KEY_PEPPER) keeps a stolen table from confirming a guessed short
// secret, such as one configured by hand in API_KEYS.
package apikeys

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The audit log's actions on keys (package audit).
const (
	AuditCreated = "api_key.created"
	// AuditAdded: a key added at start-up from API_KEYS.
	AuditAdded   = "api_key.added"
	AuditRevoked = "api_key.revoked"
)

// ErrUnknownKey: no active key has this secret.
var ErrUnknownKey = errors.New("unknown API key")

// ErrNoSuchKey: no key has this id.
var ErrNoSuchKey = errors.New("no such API key")

// Querier is what the package needs from a pool or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
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

// Key is a stored key, without its secret.
type Key struct {
	ID         string     `json:"id"`
	Tenant     string     `json:"tenant"`
	CreatedAt  time.Time  `json:"createdAt"`
	LastUsedAt *time.Time `json:"lastUsedAt"`
	RevokedAt  *time.Time `json:"revokedAt"`
}

// secretBytes is how many random bytes a created secret holds.
const secretBytes = 32

// Create stores a new key for tenant and returns it with its secret, the
// only time the secret is known: sk_live_ then 32 random bytes in
// base64url, or sk_test_ with test.
func Create(ctx context.Context, q Querier, h Hasher, tenant string, test bool, now time.Time) (Key, string, error) {
	if strings.TrimSpace(tenant) == "" {
		return Key{}, "", errors.New("a key needs a tenant")
	}
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Key{}, "", err
	}
	prefix := "sk_live_"
	if test {
		prefix = "sk_test_"
	}
	secret := prefix + base64.RawURLEncoding.EncodeToString(b[:])
	k := Key{ID: newID(), Tenant: tenant, CreatedAt: now}
	_, err := q.Exec(ctx, `INSERT INTO tenant_api_keys (id, tenant_id, secret_hash, created_at) VALUES ($1, $2, $3, $4)`,
		k.ID, k.Tenant, h.Sum(secret), now)
	if err != nil {
		return Key{}, "", fmt.Errorf("store API key of tenant %q: %w", tenant, err)
	}
	return k, secret, nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "key_" + hex.EncodeToString(b[:])
}

// Add stores each configured pair's key if no key has its secret yet, in
// any stored form. It never replaces, revives or revokes a key: a key
// revoked once stays revoked whatever API_KEYS says. It returns the keys
// it added.
func Add(ctx context.Context, q Querier, h Hasher, pairs []Pair, now time.Time) ([]Key, error) {
	var added []Key
	for _, p := range pairs {
		k := Key{ID: newID(), Tenant: p.Tenant, CreatedAt: now}
		tag, err := q.Exec(ctx, `
			INSERT INTO tenant_api_keys (id, tenant_id, secret_hash, created_at)
			SELECT $1, $2, $3, $4
			WHERE NOT EXISTS (SELECT FROM tenant_api_keys WHERE secret_hash = ANY($5))
			ON CONFLICT (secret_hash) DO NOTHING`,
			k.ID, k.Tenant, h.Sum(p.Secret), now, h.forms(p.Secret))
		if err != nil {
			return added, fmt.Errorf("store API key of tenant %q: %w", p.Tenant, err)
		}
		if tag.RowsAffected() == 1 {
			added = append(added, k)
		}
	}
	return added, nil
}

// Count returns how many active keys are stored.
func Count(ctx context.Context, q Querier) (int, error) {
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM tenant_api_keys WHERE revoked_at IS NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count API keys: %w", err)
	}
	return n, nil
}

// List returns the keys of tenant (every tenant's when empty), oldest
// first.
func List(ctx context.Context, q Querier, tenant string) ([]Key, error) {
	rows, err := q.Query(ctx, `
		SELECT id, tenant_id, created_at, last_used_at, revoked_at FROM tenant_api_keys
		WHERE $1 = '' OR tenant_id = $1 ORDER BY tenant_id, created_at, id`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Key, error) {
		var k Key
		err := r.Scan(&k.ID, &k.Tenant, &k.CreatedAt, &k.LastUsedAt, &k.RevokedAt)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	return keys, nil
}

// Revoke revokes the key id for good; revoking a revoked key changes
// nothing. Instances that accepted it before stop within their cache's life
// (at most MaxCacheTTL).
func Revoke(ctx context.Context, q Querier, id string, now time.Time) (Key, error) {
	var k Key
	err := q.QueryRow(ctx, `
		UPDATE tenant_api_keys SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1
		RETURNING id, tenant_id, created_at, last_used_at, revoked_at`, id, now).
		Scan(&k.ID, &k.Tenant, &k.CreatedAt, &k.LastUsedAt, &k.RevokedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, ErrNoSuchKey
	}
	if err != nil {
		return Key{}, fmt.Errorf("revoke API key %s: %w", id, err)
	}
	return k, nil
}

// lastUsedGranularity is how stale last_used_at may be: it is written at
// most once a minute per key, so that authentication rarely writes.
const lastUsedGranularity = time.Minute

// Identity is who an authenticated secret is: its tenant, and the id of
// its key (what the audit and the logs name, never the secret).
type Identity struct {
	Tenant string
	KeyID  string
}

// Authenticate returns the identity of the key that has this secret, or
// ErrUnknownKey. The secret is looked up in every form it may be stored in
// (keyed and plain hash); if any row of it is revoked, it is refused, so
// that a copy of a revoked secret stored in another form cannot bring it
// back. The stored hash is compared in constant time.
func Authenticate(ctx context.Context, q Querier, h Hasher, secret string, now time.Time) (Identity, error) {
	if secret == "" {
		return Identity{}, ErrUnknownKey
	}
	forms := h.forms(secret)
	rows, err := q.Query(ctx, `
		SELECT id, tenant_id, secret_hash, revoked_at IS NOT NULL, last_used_at
		FROM tenant_api_keys WHERE secret_hash = ANY($1)`, forms)
	if err != nil {
		return Identity{}, fmt.Errorf("authenticate: %w", err)
	}
	type row struct {
		id, tenant string
		stored     []byte
		revoked    bool
		lastUsed   *time.Time
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.id, &x.tenant, &x.stored, &x.revoked, &x.lastUsed)
		return x, err
	})
	if err != nil {
		return Identity{}, fmt.Errorf("authenticate: %w", err)
	}
	var match *row
	for i := range found {
		if found[i].revoked {
			return Identity{}, ErrUnknownKey
		}
		if matchesAny(found[i].stored, forms) {
			match = &found[i]
		}
	}
	if match == nil {
		return Identity{}, ErrUnknownKey
	}
	if match.lastUsed == nil || now.Sub(*match.lastUsed) >= lastUsedGranularity {
		if _, err := q.Exec(ctx, `UPDATE tenant_api_keys SET last_used_at = $2 WHERE id = $1`, match.id, now); err != nil {
			return Identity{}, fmt.Errorf("authenticate: note the key's use: %w", err)
		}
	}
	return Identity{Tenant: match.tenant, KeyID: match.id}, nil
}

func matchesAny(stored []byte, forms [][]byte) bool {
	ok := 0
	for _, f := range forms {
		ok |= subtle.ConstantTimeCompare(stored, f)
	}
	return ok == 1
}
