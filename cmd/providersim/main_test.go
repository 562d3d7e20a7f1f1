package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

type running struct {
	url    string
	cancel context.CancelFunc
	done   chan error
	stderr *testio.SyncBuffer
}

// start runs the command in a goroutine and waits for its listening line.
func start(t *testing.T, args []string, env map[string]string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	r := &running{cancel: cancel, done: make(chan error, 1), stderr: &testio.SyncBuffer{}}
	go func() {
		err := run(ctx, args, func(k string) string { return env[k] }, pw, r.stderr)
		pw.Close()
		r.done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Error("run did not return after cancel")
		}
	})

	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatalf("run printed nothing; stderr:\n%s", r.stderr)
		}
		u, found := strings.CutPrefix(line, "providersim listening on ")
		if !found {
			t.Fatalf("first stdout line = %q, want \"providersim listening on URL\"", line)
		}
		r.url = u
	case err := <-r.done:
		t.Fatalf("run returned %v before listening; stderr:\n%s", err, r.stderr)
	case <-time.After(10 * time.Second):
		t.Fatal("run did not print its address")
	}
	return r
}

func get(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func post(t *testing.T, base, key, method string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/charges",
		strings.NewReader(`{"amountMinor":1000,"currency":"EUR","paymentMethod":"`+method+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestRunServesUntilCancelled(t *testing.T) {
	r := start(t, []string{"-addr", "127.0.0.1:0", "-hang", "50ms"}, nil)
	u, err := url.Parse(r.url)
	if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "0" || u.Port() == "" {
		t.Fatalf("listening URL = %q, want http://127.0.0.1:PORT", r.url)
	}
	if code := get(t, r.url+"/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz = %d", code)
	}
	if code := post(t, r.url, "k", "pm_card_visa"); code != http.StatusOK {
		t.Errorf("POST /v1/charges = %d", code)
	}
	if code := get(t, r.url+"/v1/refunds?idempotencyKey=k"); code != http.StatusNotFound {
		t.Errorf("GET /v1/refunds of an unknown key = %d, want 404", code)
	}
	if code := get(t, r.url+"/_sim/refunds"); code != http.StatusOK {
		t.Errorf("GET /_sim/refunds = %d", code)
	}

	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("run = %v, want nil after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	r.done <- nil // for the cleanup
	if _, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		t.Error("still listening after run returned")
	}

	// Logs are JSON lines on stderr, including the charge.
	logs := r.stderr.String()
	var sawCharge bool
	for line := range strings.Lines(logs) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("stderr line %q is not JSON: %v", line, err)
		}
		if rec["msg"] == "sim: charge created" && rec["idempotencyKey"] == "k" {
			sawCharge = true
		}
	}
	if !sawCharge {
		t.Errorf("no charge log in stderr:\n%s", logs)
	}
}

func TestRunFlagsAndEnvironment(t *testing.T) {
	// The address comes from the environment; the flag wins over the
	// variable for flaky lookups; -slow 0 means no delay.
	r := start(t, []string{"-flaky-lookups", "1", "-slow", "0"}, map[string]string{
		"PROVIDERSIM_ADDR":          "127.0.0.1:0",
		"PROVIDERSIM_FLAKY_LOOKUPS": "5",
	})
	if strings.HasSuffix(r.url, ":8081") {
		t.Fatalf("listening on %s: PROVIDERSIM_ADDR ignored", r.url)
	}
	if code := post(t, r.url, "f", "pm_sim_lookup_flaky"); code != http.StatusOK {
		t.Fatalf("create = %d", code)
	}
	lookup := r.url + "/v1/charges?idempotencyKey=f"
	if code := get(t, lookup); code != http.StatusServiceUnavailable {
		t.Errorf("first lookup = %d, want 503", code)
	}
	if code := get(t, lookup); code != http.StatusOK {
		t.Errorf("second lookup = %d, want 200 (-flaky-lookups 1)", code)
	}
	begin := time.Now()
	if code := post(t, r.url, "s", "pm_sim_slow"); code != http.StatusOK {
		t.Errorf("slow create = %d", code)
	}
	if elapsed := time.Since(begin); elapsed > time.Second {
		t.Errorf("slow create with -slow 0 took %v", elapsed)
	}
}

func TestRunRejectsBadConfiguration(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"unknown flag", []string{"-nope"}, nil},
		{"extra argument", []string{"-addr", "127.0.0.1:0", "extra"}, nil},
		{"negative slow", []string{"-addr", "127.0.0.1:0", "-slow", "-1s"}, nil},
		{"zero key ttl", []string{"-addr", "127.0.0.1:0", "-key-ttl", "0"}, nil},
		{"negative flaky", []string{"-addr", "127.0.0.1:0", "-flaky-lookups", "-1"}, nil},
		{"negative hang", []string{"-addr", "127.0.0.1:0", "-hang", "-1s"}, nil},
		{"bad env duration", []string{"-addr", "127.0.0.1:0"}, map[string]string{"PROVIDERSIM_SLOW": "soon"}},
		{"bad env count", []string{"-addr", "127.0.0.1:0"}, map[string]string{"PROVIDERSIM_FLAKY_LOOKUPS": "two"}},
		{"bad address", []string{"-addr", "127.0.0.1:notaport"}, nil},
		{"webhook url without secret", []string{"-addr", "127.0.0.1:0", "-webhook-url", "http://127.0.0.1:1/webhooks/stripe"}, nil},
		{"webhook secret without url", []string{"-addr", "127.0.0.1:0"}, map[string]string{"PROVIDERSIM_WEBHOOK_SECRET": "whsec_x"}},
		{"webhook secret not whsec_", []string{"-addr", "127.0.0.1:0", "-webhook-url", "http://127.0.0.1:1/"},
			map[string]string{"PROVIDERSIM_WEBHOOK_SECRET": "secret"}},
		{"webhook url not absolute", []string{"-addr", "127.0.0.1:0"},
			map[string]string{"PROVIDERSIM_WEBHOOK_URL": "/webhooks/stripe", "PROVIDERSIM_WEBHOOK_SECRET": "whsec_x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := run(ctx, tt.args, func(k string) string { return tt.env[k] }, &stdout, &stderr)
			if err == nil {
				t.Fatal("run = nil, want an error")
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
		})
	}
}

func TestRunAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"-addr", ln.Addr().String()}, func(string) string { return "" }, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("run = %v, want a listen error", err)
	}
}

func TestRunMethods(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-methods"}, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatalf("run -methods = %v, want nil", err)
	}
	if stdout.String() != sim.MethodsMarkdown() {
		t.Errorf("stdout = %q, want the behaviour table", stdout.String())
	}
	for _, m := range []string{"`pm_sim_refund_timeout_after_success`", "`pm_sim_capture_declined`", "`pm_sim_capture_timeout_after_success`"} {
		if !strings.Contains(stdout.String(), m) {
			t.Errorf("the table lacks %s:\n%s", m, stdout.String())
		}
	}
}

func TestRunHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatalf("run -h = %v, want nil", err)
	}
	if !strings.Contains(stderr.String(), "-flaky-lookups") {
		t.Errorf("usage on stderr = %q, want the flags listed", stderr.String())
	}
}

// With -webhook-url (and the secret from the environment) the customer's
// choice on a challenge page is announced there, signed with the secret,
// and the secret never shows in the logs.
func TestRunAnnouncesChallengesToTheWebhookURL(t *testing.T) {
	const secret = "whsec_providersim_test_secret"
	got := make(chan string, 1)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ts int64
		if _, err := fmt.Sscanf(r.Header.Get("Stripe-Signature"), "t=%d,", &ts); err != nil ||
			r.Header.Get("Stripe-Signature") != sim.StripeSignature(body, secret, time.Unix(ts, 0)) {
			t.Errorf("a webhook not signed with the secret: %q", r.Header.Get("Stripe-Signature"))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var ev struct{ Type string }
		_ = json.Unmarshal(body, &ev)
		got <- ev.Type
	}))
	defer receiver.Close()
	r := start(t, []string{"-addr", "127.0.0.1:0", "-webhook-url", receiver.URL + "/webhooks/stripe"},
		map[string]string{"PROVIDERSIM_WEBHOOK_SECRET": secret})

	req, err := http.NewRequest(http.MethodPost, r.url+"/v1/charges",
		strings.NewReader(`{"amountMinor":1000,"currency":"EUR","paymentMethod":"pm_card_threeDSecureRequired"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "3ds")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var charge struct{ Status, NextActionURL string }
	err = json.NewDecoder(resp.Body).Decode(&charge)
	resp.Body.Close()
	if err != nil || charge.Status != "requires_action" || charge.NextActionURL == "" {
		t.Fatalf("charge %+v (%v), want requires_action with a nextActionUrl", charge, err)
	}
	resp, err = http.PostForm(charge.NextActionURL, url.Values{"action": {"approve"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case typ := <-got:
		if typ != "payment_intent.succeeded" {
			t.Errorf("event %q, want payment_intent.succeeded", typ)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no webhook reached -webhook-url")
	}
	if strings.Contains(r.stderr.String(), secret) {
		t.Errorf("the webhook secret is in the logs:\n%s", r.stderr)
	}
}
