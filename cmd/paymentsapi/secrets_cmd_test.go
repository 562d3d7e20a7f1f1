package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/secretbox"
)

// A SECRETS_KEY rotation: `paymentsapi secrets reseal`, run with the new
// key as SECRETS_KEY and the old one in SECRETS_KEY_OTHERS, seals every
// stored secret again under the new key, so that the old key can go. A
// secret sealed under a key the command does not hold is left as it is,
// named, and the command fails, so that nobody drops a key still needed.
func TestResealMovesEveryWebhookSecretUnderTheNewKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewURL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	oldKey, newKey, lostKey := mustKey(t), mustKey(t), mustKey(t)
	sealer := func(key string) *secretbox.Box {
		t.Helper()
		b, err := secretbox.FromKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	insert := func(id string, box *secretbox.Box, secret, previous string) {
		t.Helper()
		sealed, err := box.Seal(secret, id)
		if err != nil {
			t.Fatal(err)
		}
		var previousSealed *string
		if previous != "" {
			p, err := box.Seal(previous, id)
			if err != nil {
				t.Fatal(err)
			}
			previousSealed = &p
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO webhook_endpoints (id, tenant_id, url, status, secret_id, created_at, secret_sealed, previous_secret_sealed)
			VALUES ($1, 'acme', 'https://example.com/hook', 'enabled', $1, $2, $3, $4)`,
			id, time.Now(), sealed, previousSealed); err != nil {
			t.Fatal(err)
		}
	}
	insert("we_old", sealer(oldKey), "whsec_old", "whsec_older")
	insert("we_new", sealer(newKey), "whsec_new", "")
	insert("we_lost", sealer(lostKey), "whsec_lost", "")
	stored := func(id string) (secret, previous string) {
		t.Helper()
		var p *string
		if err := pool.QueryRow(ctx, `SELECT secret_sealed, previous_secret_sealed FROM webhook_endpoints WHERE id = $1`, id).
			Scan(&secret, &p); err != nil {
			t.Fatal(err)
		}
		if p != nil {
			previous = *p
		}
		return secret, previous
	}
	newBefore, _ := stored("we_new")
	lostBefore, _ := stored("we_lost")

	env := map[string]string{"DATABASE_URL": dbURL, "LOG_LEVEL": "error", "OPERATOR_NAME": "ada",
		"SECRETS_KEY": newKey, "SECRETS_KEY_OTHERS": oldKey}
	var out bytes.Buffer
	err = secretsCommand(ctx, []string{"reseal"}, getenv(env), &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "we_lost") {
		t.Errorf("reseal with a secret no key opens: %v; want an error naming we_lost", err)
	}
	var report struct {
		Resealed   int      `json:"resealed"`
		Unreadable []string `json:"unreadable"`
	}
	if err := json.Unmarshal(out.Bytes(), &report); err != nil || report.Resealed != 1 || len(report.Unreadable) != 1 {
		t.Errorf("report %q (%v); want 1 resealed, we_lost unreadable", out.String(), err)
	}

	onlyNew := sealer(newKey)
	secret, previous := stored("we_old")
	for sealed, want := range map[string]string{secret: "whsec_old", previous: "whsec_older"} {
		if got, err := onlyNew.Open(sealed, "we_old"); err != nil || got != want {
			t.Errorf("we_old after the reseal: %q, %v; want %q under the new key alone", got, err, want)
		}
	}
	if s, _ := stored("we_new"); s != newBefore {
		t.Error("a secret already under the new key was sealed again")
	}
	if s, _ := stored("we_lost"); s != lostBefore {
		t.Error("a secret no key opens was changed")
	}
	var audited int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE action = $1 AND actor = 'operator:ada'`,
		auditSecretsResealed).Scan(&audited); err != nil || audited != 1 {
		t.Errorf("audit events of the reseal: %d, %v; want 1", audited, err)
	}

	// Once the lost endpoint is gone, a second run finds nothing to do
	// and succeeds: the old key may leave SECRETS_KEY_OTHERS.
	if _, err := pool.Exec(ctx, `DELETE FROM webhook_endpoints WHERE id = 'we_lost'`); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := secretsCommand(ctx, []string{"reseal"}, getenv(env), &out, io.Discard); err != nil || !strings.Contains(out.String(), `"resealed":0`) {
		t.Errorf("a second reseal: %q, %v; want nothing to do", out.String(), err)
	}
}

func mustKey(t *testing.T) string {
	t.Helper()
	k, err := secretbox.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
