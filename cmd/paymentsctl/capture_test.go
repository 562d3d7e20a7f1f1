package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/apitest"
)

// authorize runs `pay -capture manual` and returns the payment's id.
func authorize(t *testing.T, s *apitest.Server, reference, method string) string {
	t.Helper()
	r := ctl(context.Background(), nil, flags(s, payArgs(reference, method, "-capture", "manual", "-idempotency-key", "pay-"+reference)...)...)
	r.want(t, 0)
	p := r.json(t)
	id, _ := p["paymentId"].(string)
	if p["status"] != "REQUIRES_CAPTURE" || p["captureMethod"] != "manual" || p["capturableAmount"] != "10.00" ||
		p["authorizationExpiresAt"] == nil || p["capturedAmount"] != nil || !strings.HasPrefix(id, "pay_") {
		t.Fatalf("pay -capture manual: %v, want REQUIRES_CAPTURE with capturableAmount and authorizationExpiresAt", p)
	}
	return id
}

// generatedKey returns the key paymentsctl said it generated on stderr.
func generatedKey(t *testing.T, r result) string {
	t.Helper()
	line, _, _ := strings.Cut(r.stderr, "\n")
	key, ok := strings.CutPrefix(line, "idempotency-key: ")
	if !ok || len(key) != 36 {
		t.Fatalf("stderr %q, want the generated key first", r.stderr)
	}
	return key
}

func TestCaptureInFullAndInPart(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	ctx := context.Background()

	// The whole amount, with a generated key.
	full := authorize(t, s, "inv-1", "pm_card_visa")
	r := ctl(ctx, nil, flags(s, "capture", full)...)
	r.want(t, 0)
	if p := r.json(t); p["paymentId"] != full || p["status"] != "SUCCEEDED" || p["capturedAmount"] != "10.00" || p["capturableAmount"] != nil {
		t.Errorf("capture: %v, want SUCCEEDED with capturedAmount 10.00", p)
	}
	key := generatedKey(t, r)
	// Run again with the key it printed: the stored answer, nothing new
	// at the provider.
	again := ctl(ctx, nil, flags(s, "capture", full, "-idempotency-key", key)...)
	again.want(t, 0)
	if again.stdout != r.stdout || again.stderr != "" {
		t.Errorf("the same capture again answered\n%s\nstderr %q; want\n%s", again.stdout, again.stderr, r.stdout)
	}
	if c := s.Charges(full); len(c) != 1 || c[0].CaptureRequestCount != 1 || c[0].AmountCaptured != "10.00" {
		t.Errorf("provider charges %+v, want one, captured once, in full", c)
	}

	// A part: the flags after the id or before it.
	part := authorize(t, s, "inv-2", "pm_card_mastercard")
	r = ctl(ctx, nil, flags(s, "capture", "-amount", "8.00", "-idempotency-key", "cap-2", part)...)
	r.want(t, 0)
	if p := r.json(t); p["status"] != "SUCCEEDED" || p["capturedAmount"] != "8.00" || p["amount"] != "10.00" {
		t.Errorf("capture -amount 8.00: %v", p)
	}
	if r.stderr != "" {
		t.Errorf("stderr %q with a key given, want nothing", r.stderr)
	}
	g := ctl(ctx, nil, flags(s, "get", part)...)
	g.want(t, 0)
	if p := g.json(t); p["capturedAmount"] != "8.00" || p["captureMethod"] != "manual" {
		t.Errorf("get after the capture: %v", p)
	}

	// Past the capturable amount.
	over := authorize(t, s, "inv-3", "pm_card_visa")
	r = ctl(ctx, nil, flags(s, "capture", over, "-amount", "10.01")...)
	r.want(t, 1)
	for _, want := range []string{"CAPTURE_EXCEEDS_CAPTURABLE: ", "capturableAmount: 10.00"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if r.stdout != "" {
		t.Errorf("stdout %q", r.stdout)
	}
}

func TestCaptureDeclinedExits2(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	id := authorize(t, s, "inv-1", "pm_sim_capture_declined")
	r := ctl(context.Background(), nil, flags(s, "capture", id)...)
	r.want(t, 2)
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	generatedKey(t, r)
	for _, want := range []string{"CAPTURE_DECLINED: ", "paymentId: " + id, "declineCode: "} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}

func TestCancelThenCaptureExits1(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	id := authorize(t, s, "inv-1", "pm_card_visa")

	r := ctl(ctx, nil, flags(s, "cancel", id, "-reason", "requested_by_customer")...)
	r.want(t, 0)
	if p := r.json(t); p["paymentId"] != id || p["status"] != "CANCELED" || p["capturableAmount"] != nil || p["capturedAmount"] != nil {
		t.Errorf("cancel: %v, want CANCELED", p)
	}
	generatedKey(t, r)
	if c := s.Charges(id); len(c) != 1 || c[0].Status != "canceled" || c[0].AmountCapturedMinor != 0 {
		t.Errorf("provider charges %+v, want one, canceled, nothing captured", c)
	}

	c := ctl(ctx, nil, flags(s, "capture", id)...)
	c.want(t, 1)
	if !strings.Contains(c.stderr, "PAYMENT_NOT_CAPTURABLE: ") || c.stdout != "" {
		t.Errorf("capture after cancel: stdout %q, stderr %q; want PAYMENT_NOT_CAPTURABLE", c.stdout, c.stderr)
	}
	twice := ctl(ctx, nil, flags(s, "cancel", id)...)
	twice.want(t, 1)
	if !strings.Contains(twice.stderr, "PAYMENT_NOT_CANCELABLE: ") {
		t.Errorf("cancel after cancel: stderr %q, want PAYMENT_NOT_CANCELABLE", twice.stderr)
	}
	bad := ctl(ctx, nil, flags(s, "cancel", id, "-reason", "because")...)
	bad.want(t, 1)
	if !strings.Contains(bad.stderr, "VALIDATION_FAILED: ") || !strings.Contains(bad.stderr, "reason: ") {
		t.Errorf("cancel -reason because: stderr %q, want VALIDATION_FAILED on reason", bad.stderr)
	}

	// An automatic payment is not capturable.
	auto := ctl(ctx, nil, flags(s, payArgs("inv-2", "pm_card_visa", "-capture", "automatic")...)...)
	auto.want(t, 0)
	p := auto.json(t)
	if p["status"] != "SUCCEEDED" || p["captureMethod"] != "automatic" || p["capturedAmount"] != "10.00" || p["authorizationExpiresAt"] != nil {
		t.Errorf("pay -capture automatic: %v", p)
	}
	na := ctl(ctx, nil, flags(s, "capture", p["paymentId"].(string))...)
	na.want(t, 1)
	if !strings.Contains(na.stderr, "PAYMENT_NOT_CAPTURABLE: ") {
		t.Errorf("capture of an automatic payment: stderr %q", na.stderr)
	}
}

func TestCaptureStillProcessingAfterTheLastAttemptExits3(t *testing.T) {
	t.Parallel()
	// The provider captures but its answer is lost: the API answers 202
	// after 300 ms and advises a retry in 5 s, later than this command's
	// deadline, so the 202 is the last answer.
	s := apitest.Start(t, apitest.Options{ProviderTimeout: 300 * time.Millisecond, RetryAfter: 5 * time.Second})
	id := authorize(t, s, "inv-1", "pm_sim_capture_timeout_after_success")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r := ctl(ctx, nil, flags(s, "capture", id, "-idempotency-key", "lost-cap")...)
	r.want(t, 3)
	if p := r.json(t); p["status"] != "PROCESSING" {
		t.Errorf("payment %v, want PROCESSING", p)
	}
	if !strings.Contains(r.stderr, "still processing") || !strings.Contains(r.stderr, "-idempotency-key lost-cap") {
		t.Errorf("stderr %q, want how to learn the outcome", r.stderr)
	}
	// The same command later learns the outcome, and nothing is captured
	// twice.
	again := ctl(context.Background(), nil, flags(s, "capture", id, "-idempotency-key", "lost-cap")...)
	again.want(t, 0)
	if p := again.json(t); p["status"] != "SUCCEEDED" || p["capturedAmount"] != "10.00" {
		t.Errorf("retry: %v, want SUCCEEDED", p)
	}
	if c := s.Charges(id); len(c) != 1 || c[0].CaptureRequestCount != 1 {
		t.Errorf("charges %+v, want one, captured once", c)
	}
}
