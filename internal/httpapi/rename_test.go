package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
)

// The payments' key scope was renamed ('payments.create' to
// 'create_payment', docs/operations.md): this release writes keys under the
// new name, and a key the release before it stored under the old one (while
// a rolling upgrade runs both, after migration 00027 moved the rest) is
// this release's too. Its retry replays the stored answer byte for byte, a
// different command under it is 422, and nothing is charged again; the
// same key is never claimed again under the new name (issue 16).
func TestAPaymentKeyUnderTheOldScopeNameReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.post("renamed", body())
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	var operation string
	if err := e.pool.QueryRow(context.Background(), `SELECT operation FROM idempotency_keys`).Scan(&operation); err != nil || operation != "create_payment" {
		t.Fatalf("the key is stored under %q (%v), want create_payment", operation, err)
	}
	// As the release before this one writes it.
	if _, err := e.pool.Exec(context.Background(), `UPDATE idempotency_keys SET operation = 'payments.create'`); err != nil {
		t.Fatal(err)
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
