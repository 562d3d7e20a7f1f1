package stripeprovider_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
	"github.com/paymentsapi/paymentsapi/internal/provider/stripeprovider"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

// stripeMockVersion is the stripe-mock these tests were written against;
// its fixtures decide what a confirmed PaymentIntent looks like.
const stripeMockVersion = "v0.203.0"

// repoRoot is the nearest directory above the working directory that holds
// go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// stripeMockBin finds stripe-mock: $STRIPE_MOCK_BIN, then bin/stripe-mock at
// the repository root, then PATH. It skips the test when there is none.
func stripeMockBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("STRIPE_MOCK_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("STRIPE_MOCK_BIN=%s: %v", p, err)
		}
		return p
	}
	root := repoRoot(t)
	if p := filepath.Join(root, "bin", "stripe-mock"); isExecutable(p) {
		return p
	}
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p
	}
	t.Skipf("stripe-mock not found (STRIPE_MOCK_BIN, %s/bin/stripe-mock, PATH); install it with: GOBIN=%s/bin go install github.com/stripe/stripe-mock@%s",
		root, root, stripeMockVersion)
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// startStripeMock runs stripe-mock on loopback ports that it picks itself
// (HTTPS too, since it cannot be turned off with an address flag), with
// fixtures if not empty, waits until it answers, and stops it when the test
// ends. It returns the HTTP base URL.
func startStripeMock(t *testing.T, bin, fixtures string) string {
	t.Helper()
	args := []string{"-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0"}
	if fixtures != "" {
		args = append(args, "-fixtures", fixtures)
	}
	cmd := exec.Command(bin, args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	var out testio.SyncBuffer
	addrc := make(chan string, 1)
	go func() {
		const prefix = "Listening for HTTP at address: "
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			out.Write([]byte(line + "\n"))
			if a, ok := strings.CutPrefix(line, prefix); ok {
				select {
				case addrc <- strings.TrimSpace(a):
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		pw.Close()
		if t.Failed() {
			t.Logf("stripe-mock output:\n%s", out.String())
		}
	})

	var base string
	select {
	case a := <-addrc:
		base = "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatalf("stripe-mock did not say where it listens within 30s; output:\n%s", out.String())
	}
	// Poll until it answers a real API request.
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/payment_intents/pi_readiness", nil)
		req.Header.Set("Authorization", "Bearer sk_test_readiness")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock at %s not ready within 30s (last: %v); output:\n%s", base, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// recordingTransport records each request it forwards.
type recordingTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	reqs []request
}

func (rt *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var form url.Values
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		form, _ = url.ParseQuery(string(b))
		// Forward a copy with a fresh body; the caller's request stays its own.
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	rt.mu.Lock()
	rt.reqs = append(rt.reqs, request{req.Method, req.URL.Path, req.URL.Query(), form, req.Header.Clone()})
	rt.mu.Unlock()
	return rt.next.RoundTrip(req)
}

func (rt *recordingTransport) requests() []request {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]request(nil), rt.reqs...)
}

func stripeMockProvider(t *testing.T, base string) (*stripeprovider.Provider, *recordingTransport) {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	rec := &recordingTransport{next: tr}
	p, err := stripeprovider.New(stripeprovider.Config{
		APIKey:     "sk_test_stripemock",
		BaseURL:    base,
		HTTPClient: &http.Client{Transport: rec},
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p, rec
}

// checkCreateWireFormat asserts what Charge put on the wire.
func checkCreateWireFormat(t *testing.T, r request, req provider.ChargeRequest) {
	t.Helper()
	if r.Method != http.MethodPost || r.Path != "/v1/payment_intents" {
		t.Errorf("request = %s %s, want POST /v1/payment_intents", r.Method, r.Path)
	}
	for h, want := range map[string]string{
		"Idempotency-Key": req.IdempotencyKey,
		"Authorization":   "Bearer sk_test_stripemock",
		"Content-Type":    "application/x-www-form-urlencoded",
	} {
		if got := r.Header.Get(h); got != want {
			t.Errorf("header %s = %q, want %q", h, got, want)
		}
	}
	if r.Header.Get("Stripe-Version") == "" {
		t.Error("no Stripe-Version header")
	}
	want := url.Values{
		"amount":                             {"1234"},
		"currency":                           {"eur"},
		"payment_method":                     {"pm_card_visa"},
		"confirm":                            {"true"},
		"automatic_payment_methods[enabled]": {"true"},
		"automatic_payment_methods[allow_redirects]": {"never"},
		"description":               {"order 7"},
		"metadata[idempotency_key]": {req.IdempotencyKey},
		"metadata[payment_id]":      {req.PaymentID},
	}
	for k, v := range want {
		if got := r.Form[k]; len(got) != 1 || got[0] != v[0] {
			t.Errorf("form %s = %q, want %q", k, got, v)
		}
	}
	for k := range r.Form {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected form field %s = %q", k, r.Form[k])
		}
	}
}

// TestStripeMockWireFormat runs the Provider against a real stripe-mock.
// stripe-mock validates requests against Stripe's OpenAPI spec but is
// stateless and ignores idempotency keys, so this checks the wire format and
// the decoding of its answers, not Stripe's behaviour.
func TestStripeMockWireFormat(t *testing.T) {
	bin := stripeMockBin(t)
	req := chargeReq()
	req.AmountMinor = 1234

	// stripe-mock v0.203.0's bundled fixture for a PaymentIntent is in
	// requires_payment_method with last_payment_error {"type":
	// "idempotency_error"} and empty metadata, whatever was sent: it
	// reflects amount, currency and description from the request and makes
	// up an id, but not metadata or status. So a confirmed create decodes
	// as a decline without a code, and the listing (of that one fixture,
	// has_more false) carries no key: a complete listing without the key,
	// which is ErrNotFound.
	bundled := startStripeMock(t, bin, "")
	t.Run("bundled fixtures", func(t *testing.T) {
		p, rec := stripeMockProvider(t, bundled)
		ctx := providertest.Context(t, 10*time.Second)

		ch, err := p.Charge(ctx, req)
		if err != nil {
			t.Fatalf("Charge: %v", err)
		}
		if !strings.HasPrefix(ch.ID, "pi_") || ch.Status != provider.StatusDeclined ||
			ch.DeclineCode != "payment_intent_payment_attempt_failed" ||
			ch.AmountMinor != 1234 || ch.Currency != "EUR" || ch.IdempotencyKey != req.IdempotencyKey {
			t.Errorf("Charge = %+v, want stripe-mock's fixture: a declined pi_... of 1234 EUR", ch)
		}
		lookup := provider.ChargeLookup{IdempotencyKey: req.IdempotencyKey, NotBefore: time.Now().Add(-time.Hour)}
		_, err = p.Lookup(ctx, lookup)
		providertest.WantOnly(t, "Lookup (the fixture's metadata has no key)", err, provider.ErrNotFound)

		reqs := rec.requests()
		if len(reqs) != 2 {
			t.Fatalf("%d requests, want a create and a listing", len(reqs))
		}
		checkCreateWireFormat(t, reqs[0], req)
		checkListWireFormat(t, reqs[1], lookup.NotBefore, "")
	})

	// With a fixture of a succeeded PaymentIntent that carries the key,
	// stripe-mock answers the create with it (id made up, amount and
	// currency reflected, amount_received the fixture's) and lists the
	// fixture itself. The same
	// stripe-mock holds a refund fixture for the refund subtest. (A fixtures
	// file without a PaymentIntent would break the readiness probe.)
	fixtures := startStripeMock(t, bin, writeFixtures(t, map[string]any{
		"payment_intent": map[string]any{
			"id":                 "pi_fixturesucceeded",
			"object":             "payment_intent",
			"amount":             1,
			"currency":           "usd",
			"created":            1700000000,
			"livemode":           false,
			"status":             "succeeded",
			"amount_received":    1,
			"capture_method":     "automatic",
			"last_payment_error": nil,
			"metadata":           map[string]string{"idempotency_key": req.IdempotencyKey, "payment_id": req.PaymentID},
		},
		"refund": map[string]any{
			"id":             "re_fixture",
			"object":         "refund",
			"amount":         1,
			"currency":       "eur",
			"created":        1700000000,
			"status":         "succeeded",
			"payment_intent": "pi_1",
			"metadata":       map[string]string{"idempotency_key": refundKey, "refund_id": "re_1"},
		},
	}))
	t.Run("succeeded fixture", func(t *testing.T) {
		p, rec := stripeMockProvider(t, fixtures)
		ctx := providertest.Context(t, 10*time.Second)

		ch, err := p.Charge(ctx, req)
		if err != nil {
			t.Fatalf("Charge: %v", err)
		}
		if !strings.HasPrefix(ch.ID, "pi_") || ch.Status != provider.StatusSucceeded ||
			ch.AmountMinor != 1234 || ch.Currency != "EUR" || ch.DeclineCode != "" || ch.AmountCapturedMinor != 1 {
			t.Errorf("Charge = %+v, want a succeeded pi_... of 1234 EUR (1 received, as the fixture says)", ch)
		}

		lookup := provider.ChargeLookup{IdempotencyKey: req.IdempotencyKey, NotBefore: time.Now().Add(-time.Hour)}
		found, err := p.Lookup(ctx, lookup)
		want := provider.Charge{ID: "pi_fixturesucceeded", IdempotencyKey: req.IdempotencyKey, Status: provider.StatusSucceeded, AmountMinor: 1, Currency: "USD", AmountCapturedMinor: 1}
		if err != nil || found != want {
			t.Errorf("Lookup = %+v, %v; want %+v", found, err, want)
		}

		reqs := rec.requests()
		if len(reqs) != 2 {
			t.Fatalf("%d requests, want a create and a listing (no retrieve)", len(reqs))
		}
		checkCreateWireFormat(t, reqs[0], req)
		checkListWireFormat(t, reqs[1], lookup.NotBefore, "")
	})

	// Refunds with the bundled fixtures: stripe-mock reflects amount,
	// payment_intent and reason and makes up an id, answers succeeded in
	// usd (we send no currency), and lists one refund without metadata.
	t.Run("refund, bundled fixtures", func(t *testing.T) {
		p, rec := stripeMockProvider(t, bundled)
		ctx := providertest.Context(t, 10*time.Second)
		rreq := refundReq()

		rf, err := p.Refund(ctx, rreq)
		if err != nil {
			t.Fatalf("Refund: %v", err)
		}
		if !strings.HasPrefix(rf.ID, "re_") || rf.Status != provider.StatusSucceeded || rf.AmountMinor != 300 ||
			rf.ChargeID != rreq.ChargeID || rf.IdempotencyKey != rreq.IdempotencyKey {
			t.Errorf("Refund = %+v, want stripe-mock's fixture: a succeeded re_... of 300", rf)
		}
		_, err = p.LookupRefund(ctx, refundLookup)
		providertest.WantOnly(t, "LookupRefund (the fixture's metadata has no key)", err, provider.ErrNotFound)

		reqs := rec.requests()
		if len(reqs) != 2 {
			t.Fatalf("%d requests, want a create and a list", len(reqs))
		}
		checkRefundWireFormat(t, reqs[0], rreq, "Bearer sk_test_stripemock")
		checkRefundListWireFormat(t, reqs[1], rreq.ChargeID)
	})

	// With the fixture of a refund that carries the key, stripe-mock answers
	// the create with it (id made up, amount reflected) and lists it.
	t.Run("refund fixture", func(t *testing.T) {
		p, rec := stripeMockProvider(t, fixtures)
		ctx := providertest.Context(t, 10*time.Second)

		rf, err := p.Refund(ctx, refundReq())
		if err != nil || !strings.HasPrefix(rf.ID, "re_") || rf.Status != provider.StatusSucceeded || rf.AmountMinor != 300 || rf.Currency != "EUR" {
			t.Errorf("Refund = %+v, %v; want a succeeded re_... of 300 EUR", rf, err)
		}
		found, err := p.LookupRefund(ctx, refundLookup)
		want := provider.Refund{ID: "re_fixture", IdempotencyKey: refundKey, ChargeID: "pi_1", Status: provider.StatusSucceeded, AmountMinor: 1, Currency: "EUR"}
		if err != nil || found != want {
			t.Errorf("LookupRefund = %+v, %v; want %+v", found, err, want)
		}
		if n := len(rec.requests()); n != 2 {
			t.Errorf("%d requests, want a create and a list", n)
		}
	})

	// stripe-mock refuses a key that does not look like a test key with a
	// 401 invalid_request_error: a plain error, neither sentinel.
	t.Run("rejected key", func(t *testing.T) {
		p, err := stripeprovider.New(stripeprovider.Config{APIKey: "not_a_key", BaseURL: bundled, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx := providertest.Context(t, 10*time.Second)
		_, err = p.Charge(ctx, req)
		providertest.WantOnly(t, "Charge", err, nil)
		var apiErr *stripeprovider.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized || apiErr.Type != "invalid_request_error" {
			t.Errorf("err = %v, want an *APIError 401 invalid_request_error", err)
		}
		for _, call := range providertest.Calls(p, req.IdempotencyKey, "pi_1") {
			err := call.Do(ctx)
			providertest.WantOnly(t, call.Name, err, nil)
			var apiErr *stripeprovider.APIError
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s: err = %v, want an *APIError 401", call.Name, err)
			}
		}
	})
}

// writeFixtures writes a stripe-mock fixtures file with resources and
// returns its path.
func writeFixtures(t *testing.T, resources map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"resources": resources})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "fixtures.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
