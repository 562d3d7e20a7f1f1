package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/proctest"
)

// A payment whose card needs 3-D Secure, through the Stripe adapter against
// stripe-mock answering with a PaymentIntent in requires_action whose next
// action is a redirect: POST /payments answers 201 REQUIRES_ACTION with
// nextAction {type: redirect, url: the redirect's url}, and the create that
// reached stripe-mock carried the payment's return route (under PUBLIC_URL)
// as return_url. stripe-mock is stateless, so its listing never finds this
// payment's key: the customer's return and the reconciler are tested on the
// simulator and in package stripeprovider.
func TestStripeRequiresActionAnswersTheRedirect(t *testing.T) {
	const challenge = "https://hooks.stripe.com/3d_secure_2/hosted?merchant=acct_1&payment_intent=pi_3ds"
	mock := stripeMockBin(t)
	fixtures, err := json.Marshal(map[string]any{"resources": map[string]any{"payment_intent": map[string]any{
		"id": "pi_fixture3ds", "object": "payment_intent", "amount": 1, "currency": "eur", "created": 1700000000,
		"livemode": false, "status": "requires_action", "amount_received": 0, "capture_method": "automatic",
		"next_action": map[string]any{"type": "redirect_to_url", "redirect_to_url": map[string]any{"url": challenge}},
		"metadata":    map[string]string{},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	fixturesFile := filepath.Join(t.TempDir(), "fixtures.json")
	if err := os.WriteFile(fixturesFile, fixtures, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mock, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0", "-fixtures", fixturesFile)
	out := proctest.NewLineWatcher()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	mockAddr, _ := out.Await(t, regexp.MustCompile(`Listening for HTTP at address: (\S+)`), 30*time.Second)

	// A proxy in front of stripe-mock records the forms of the creates.
	target, _ := url.Parse("http://" + mockAddr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var (
		mu      sync.Mutex
		creates []url.Values
	)
	recorder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents" {
			b, _ := io.ReadAll(r.Body)
			form, _ := url.ParseQuery(string(b))
			mu.Lock()
			creates = append(creates, form)
			mu.Unlock()
			r.Body = io.NopCloser(strings.NewReader(string(b)))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(recorder.Close)

	const publicURL = "https://pay.example"
	env := map[string]string{
		"DATABASE_URL": pgtest.NewURL(t), "API_KEYS": "demo:sk_demo", "PROVIDER": "stripe",
		"STRIPE_API_KEY": "sk_test_123demo", "STRIPE_API_BASE": recorder.URL,
		"PUBLIC_URL": publicURL, "LOG_LEVEL": "warn",
	}
	base, stderr := startServer(t, env)

	const shop = "https://shop.example/checkout/done?order=7781"
	paid := call(t, "POST", base+"/payments", "sk_demo", "3ds-1",
		`{"accountId":"acc_1","amount":"25.00","currency":"EUR","merchantReference":"inv-3ds","paymentMethod":"pm_card_threeDSecure2Required","returnUrl":"`+shop+`"}`)
	if paid.status != http.StatusCreated {
		t.Fatalf("pay: %d %s\nlog:\n%s", paid.status, paid.body, drain(stderr))
	}
	var body struct {
		PaymentID  string `json:"paymentId"`
		Status     string `json:"status"`
		ReturnURL  string `json:"returnUrl"`
		NextAction *struct {
			Type string `json:"type"`
			URL  string `json:"url"`
		} `json:"nextAction"`
	}
	if err := json.Unmarshal(paid.body, &body); err != nil {
		t.Fatalf("pay: %v: %s", err, paid.body)
	}
	if body.Status != "REQUIRES_ACTION" || body.NextAction == nil || body.NextAction.Type != "redirect" ||
		body.NextAction.URL != challenge || body.ReturnURL != shop {
		t.Errorf("pay: %s\nwant REQUIRES_ACTION, nextAction {redirect, %s}, returnUrl %s", paid.body, challenge, shop)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(creates) != 1 {
		t.Fatalf("%d creates reached stripe-mock, want 1", len(creates))
	}
	form := creates[0]
	for k, want := range map[string]string{
		"return_url": publicURL + payments.ReturnPath(body.PaymentID),
		"automatic_payment_methods[allow_redirects]": "always",
		"payment_method":            "pm_card_threeDSecure2Required",
		"metadata[payment_id]":      body.PaymentID,
		"metadata[idempotency_key]": payments.ProviderKey(body.PaymentID),
	} {
		if got := form.Get(k); got != want {
			t.Errorf("create: %s = %q, want %q", k, got, want)
		}
	}
}
