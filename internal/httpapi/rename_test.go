package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
)

// The payments' key scope is being renamed ('payments.create' to
// 'create_payment', docs/operations.md): a key the next release stored, or
// moved, under the new name is this release's too. Its retry replays the
// stored answer byte for byte, a different command under it is 422, and
// nothing is charged again (issue 16).
func TestAPaymentKeyUnderTheNewScopeNameReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.post("renamed", body())
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	// What the next release's migration does (the pending step
	// create_payment_scope_move): one scope of both names, then every
	// stored key moved to the new name.
	for _, stmt := range []string{
		`CREATE UNIQUE INDEX idempotency_keys_create_payment_scope_key ON idempotency_keys (tenant_id, idempotency_key)
		 WHERE operation IN ('payments.create', 'create_payment')`,
		`UPDATE idempotency_keys SET operation = 'create_payment' WHERE operation = 'payments.create'`,
	} {
		if _, err := e.pool.Exec(context.Background(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	retry := e.post("renamed", body())
	if retry.Status != first.Status || !bytes.Equal(retry.Body, first.Body) || retry.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s (replayed %q); want the first answer replayed", retry.Status, retry.Body, retry.Header.Get("Idempotent-Replayed"))
	}
	if r := e.post("renamed", body("amount", `"99.00"`)); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("another command under the key: %d %s, want 422", r.Status, r.Body)
	}
	if n := e.count("payments"); n != 1 {
		t.Fatalf("%d payments, want 1", n)
	}
	if n := e.count("idempotency_keys"); n != 1 {
		t.Fatalf("%d keys, want 1", n)
	}
}
