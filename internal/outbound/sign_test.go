package outbound

import (
	"encoding/base64"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

func TestNewSecret(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 20 {
		s, err := NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		encoded, ok := strings.CutPrefix(s, "whsec_")
		if !ok {
			t.Fatalf("%q lacks whsec_", s)
		}
		key, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil || len(key) != 32 {
			t.Fatalf("%q: key of %d bytes, %v; want 32", s, len(key), err)
		}
		if seen[s] {
			t.Fatalf("%q repeated", s)
		}
		seen[s] = true
		if _, err := standardwebhooks.NewWebhook(s); err != nil {
			t.Fatalf("library refuses %q: %v", s, err)
		}
	}
}

// libraryVerify verifies with the Standard Webhooks library itself, as a
// merchant's receiver would.
func libraryVerify(t *testing.T, secret string, h http.Header, body []byte) error {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	return wh.Verify(body, h)
}

var signature = regexp.MustCompile(`^v1,[A-Za-z0-9+/]{43}=$`)

func TestSignOneSecret(t *testing.T) {
	t.Parallel()
	secret, _ := NewSecret()
	body := []byte(`{"type":"payment.succeeded","timestamp":"2026-01-02T03:04:05Z","data":{"paymentId":"pay_1"}}`)
	at := time.Now()
	h, err := Sign("evt_123", at, body, secret)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 3 || h.Get("webhook-id") != "evt_123" || h.Get("webhook-timestamp") != strconv.FormatInt(at.Unix(), 10) {
		t.Fatalf("headers %v", h)
	}
	if sig := h.Get("webhook-signature"); !signature.MatchString(sig) {
		t.Fatalf("signature %q, want v1,<base64 of 32 bytes>", sig)
	}
	if err := libraryVerify(t, secret, h, body); err != nil {
		t.Fatalf("library verify: %v", err)
	}
	if err := Verify(secret, h, body); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	other, _ := NewSecret()
	if err := libraryVerify(t, other, h, body); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Fatalf("another secret verified: %v", err)
	}
}

// During a rotation both secrets sign; a receiver with either verifies.
func TestSignTwoSecrets(t *testing.T) {
	t.Parallel()
	oldSecret, _ := NewSecret()
	newSecret, _ := NewSecret()
	body := []byte(`{"type":"refund.succeeded"}`)
	h, err := Sign("evt_rot", time.Now(), body, newSecret, oldSecret)
	if err != nil {
		t.Fatal(err)
	}
	sigs := strings.Split(h.Get("webhook-signature"), " ")
	if len(sigs) != 2 || sigs[0] == sigs[1] || !signature.MatchString(sigs[0]) || !signature.MatchString(sigs[1]) {
		t.Fatalf("signatures %q, want two v1 signatures", h.Get("webhook-signature"))
	}
	for _, s := range []string{oldSecret, newSecret} {
		if err := libraryVerify(t, s, h, body); err != nil {
			t.Fatalf("library verify with one of two secrets: %v", err)
		}
		if err := Verify(s, h, body); err != nil {
			t.Fatalf("Verify: %v", err)
		}
	}
	third, _ := NewSecret()
	if err := libraryVerify(t, third, h, body); err == nil {
		t.Fatal("a third secret verified")
	}
}

func TestTamperingFailsVerification(t *testing.T) {
	t.Parallel()
	secret, _ := NewSecret()
	body := []byte(`{"type":"payment.succeeded","data":{"amount":1000}}`)
	at := time.Now()
	sign := func() http.Header {
		h, err := Sign("evt_t", at, body, secret)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	tampered := []byte(`{"type":"payment.succeeded","data":{"amount":9000}}`)
	if err := libraryVerify(t, secret, sign(), tampered); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("tampered body: %v", err)
	}
	if err := Verify(secret, sign(), tampered); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("Verify tampered body: %v", err)
	}
	h := sign()
	h.Set("webhook-timestamp", strconv.FormatInt(at.Unix()+1, 10))
	if err := libraryVerify(t, secret, h, body); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("tampered timestamp: %v", err)
	}
	h = sign()
	h.Set("webhook-id", "evt_other")
	if err := libraryVerify(t, secret, h, body); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("tampered id: %v", err)
	}
	h = sign()
	h.Del("webhook-signature")
	if err := Verify(secret, h, body); !errors.Is(err, standardwebhooks.ErrRequiredHeaders) {
		t.Errorf("no signature: %v", err)
	}
	// A correctly signed but old message is refused (replay).
	old, err := Sign("evt_t", at.Add(-10*time.Minute), body, secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(secret, old, body); !errors.Is(err, standardwebhooks.ErrMessageTooOld) {
		t.Errorf("old timestamp: %v", err)
	}
}

// The Standard Webhooks specification's published example, so a change of
// library that signs differently cannot pass.
func TestSignMatchesSpecificationExample(t *testing.T) {
	t.Parallel()
	h, err := Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`),
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.Get("webhook-signature"), "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %q, want %q", got, want)
	}
}

func TestSignRefuses(t *testing.T) {
	t.Parallel()
	secret, _ := NewSecret()
	for name, call := range map[string]func() error{
		"no secret":       func() error { _, err := Sign("evt_1", time.Now(), nil); return err },
		"empty id":        func() error { _, err := Sign("", time.Now(), nil, secret); return err },
		"id with newline": func() error { _, err := Sign("evt_1\r\nX-Evil: 1", time.Now(), nil, secret); return err },
		"id with space":   func() error { _, err := Sign("evt 1", time.Now(), nil, secret); return err },
		"no prefix": func() error {
			_, err := Sign("evt_1", time.Now(), nil, strings.TrimPrefix(secret, "whsec_"))
			return err
		},
		"empty key":  func() error { _, err := Sign("evt_1", time.Now(), nil, "whsec_"); return err },
		"not base64": func() error { _, err := Sign("evt_1", time.Now(), nil, secret, "whsec_!!!"); return err },
		"verify bad secret": func() error {
			h, _ := Sign("evt_1", time.Now(), nil, secret)
			return Verify("whsec_", h, nil)
		},
	} {
		if call() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
