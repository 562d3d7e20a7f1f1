package payments_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// Merchant references are compared in Unicode's composed form (NFC): "é"
// as one code point and as "e" with a combining accent are one reference.
// The same key with either spelling is one command (a replay), another key
// with the other spelling is a duplicate reference, and the reference is
// stored composed. (Before, the decomposed spelling was another command:
// 422 under the same key, a second payment under another.)
func TestMerchantReferencesAreComparedComposed(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	composed, decomposed := `"caf\u00e9-7781"`, `"cafe\u0301-7781"`
	first := e.Post("k-nfc", servicetest.Body("merchantReference", decomposed))
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	again := e.Post("k-nfc", servicetest.Body("merchantReference", composed))
	if again.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" ||
		again.JSON(t)["paymentId"] != first.JSON(t)["paymentId"] {
		t.Errorf("the same key with the composed spelling: %d replayed=%q %s, want the first payment replayed",
			again.Status, again.Header.Get("Idempotent-Replayed"), again.Body)
	}
	other := e.Post("k-nfc-2", servicetest.Body("merchantReference", composed))
	if other.Status != http.StatusConflict || other.JSON(t)["code"] != "DUPLICATE_MERCHANT_REFERENCE" {
		t.Errorf("another key with the composed spelling: %d %s, want 409 DUPLICATE_MERCHANT_REFERENCE", other.Status, other.Body)
	}
	if n := e.Count("payments WHERE merchant_reference = $1", "caf\u00e9-7781"); n != 1 || e.Count("payments") != 1 {
		t.Errorf("%d payments with the composed reference, %d in all; want the one, stored composed", n, e.Count("payments"))
	}
}

// What the spec says of the payments' identifiers holds: GET /payments
// refuses an accountId that POST /payments would (empty, over-long, not
// printable), and a 128-character limit counts characters, not bytes.
func TestIdentifierLimitsCountCharacters(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	for _, q := range []string{"accountId=", "accountId=" + strings.Repeat("a", 129), "accountId=acc%091", "accountId=acc%00", "accountId=%ff"} {
		if r := e.Get(servicetest.SecretA, "/payments?"+q); r.Status != http.StatusBadRequest || r.JSON(t)["code"] != "VALIDATION_FAILED" {
			t.Errorf("GET /payments?%.20s...: %d %s, want 400", q, r.Status, r.Body)
		}
	}
	if r := e.Get(servicetest.SecretA, "/payments?accountId="+url.QueryEscape(strings.Repeat("é", 128))); r.Status != http.StatusOK {
		t.Errorf("128 é: %d %s, want 200", r.Status, r.Body)
	}
	if r := e.Post("k-chars", servicetest.Body("accountId", `"`+strings.Repeat("é", 100)+`"`)); r.Status != http.StatusCreated {
		t.Errorf("an accountId of 100 é (200 bytes): %d %s, want 201", r.Status, r.Body)
	}
	if r := e.Post("k-chars-2", servicetest.Body("accountId", `"`+strings.Repeat("é", 129)+`"`)); r.Status != http.StatusBadRequest {
		t.Errorf("an accountId of 129 é: %d %s, want 400", r.Status, r.Body)
	}
}
