package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

const message = `{"type":"payment.succeeded","timestamp":"2026-01-15T10:30:01Z",` +
	`"data":{"paymentId":"pay_1","status":"SUCCEEDED","amount":"10.00","currency":"EUR","updatedAt":"2026-01-15T10:30:01Z"}}`

func newSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// signed returns the headers of a delivery of body as the service sends
// it: signed by the library, with every secret given.
func signed(t *testing.T, id string, at time.Time, body []byte, secrets ...string) http.Header {
	t.Helper()
	var sigs []string
	for _, s := range secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := wh.Sign(id, at, body)
		if err != nil {
			t.Fatal(err)
		}
		sigs = append(sigs, sig)
	}
	h := http.Header{}
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, strings.Join(sigs, " "))
	h.Set("Content-Type", "application/json")
	return h
}

func send(t *testing.T, rc http.Handler, header http.Header, body []byte) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	req.Header = header
	w := httptest.NewRecorder()
	rc.ServeHTTP(w, req)
	return w.Code
}

// queued returns the events the receiver handed its worker so far.
func queued(rc *Receiver) []Event {
	var out []Event
	for {
		select {
		case ev := <-rc.Events():
			out = append(out, ev)
		default:
			return out
		}
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTestReceiver returns a quiet Receiver of a new secret, and the secret.
func newTestReceiver(t *testing.T, queueSize, rememberIDs int) (*Receiver, string) {
	t.Helper()
	secret := newSecret(t)
	rc, err := NewReceiver(secret, queueSize, rememberIDs, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return rc, secret
}

func TestReceiverVerifiesAndDeduplicates(t *testing.T) {
	t.Parallel()
	rc, secret := newTestReceiver(t, 10, 100)
	body := []byte(message)
	now := time.Now()

	if got := send(t, rc, signed(t, "evt-1", now, body, secret), body); got != http.StatusNoContent {
		t.Fatalf("a signed delivery answered %d, want 204", got)
	}
	// The retry of the same event, signed anew a moment later: answered
	// 2xx (or the sender would retry for days) and not handed on again.
	if got := send(t, rc, signed(t, "evt-1", now.Add(5*time.Second), body, secret), body); got != http.StatusNoContent {
		t.Errorf("the duplicate answered %d, want 204", got)
	}
	// During a rotation, two signatures: one matching is enough.
	if got := send(t, rc, signed(t, "evt-2", now, body, newSecret(t), secret), body); got != http.StatusNoContent {
		t.Errorf("a delivery signed by the old and the new secret answered %d, want 204", got)
	}

	// Refused with 400 and never handed on.
	header := signed(t, "evt-3", now, body, secret)
	tampered := bytes.Replace(body, []byte(`"10.00"`), []byte(`"1000.00"`), 1)
	for name, tc := range map[string]struct {
		header http.Header
		body   []byte
	}{
		"tampered body":     {header, tampered},
		"another secret":    {signed(t, "evt-4", now, body, newSecret(t)), body},
		"another id":        {func() http.Header { h := header.Clone(); h.Set("webhook-id", "evt-5"); return h }(), body},
		"stale timestamp":   {signed(t, "evt-6", now.Add(-10*time.Minute), body, secret), body},
		"no signature":      {func() http.Header { h := header.Clone(); h.Del("webhook-signature"); return h }(), body},
		"no headers":        {http.Header{"Content-Type": {"application/json"}}, body},
		"garbage signature": {func() http.Header { h := header.Clone(); h.Set("webhook-signature", "v1,AAAA"); return h }(), body},
	} {
		if got := send(t, rc, tc.header, tc.body); got != http.StatusBadRequest {
			t.Errorf("%s: answered %d, want 400", name, got)
		}
	}
	// The genuine evt-3 still gets through after its forgeries.
	if got := send(t, rc, header, body); got != http.StatusNoContent {
		t.Errorf("evt-3 answered %d, want 204", got)
	}

	events := queued(rc)
	var ids []string
	for _, ev := range events {
		ids = append(ids, ev.ID)
	}
	if strings.Join(ids, ",") != "evt-1,evt-2,evt-3" {
		t.Fatalf("handed on %v, want evt-1, evt-2, evt-3 once each", ids)
	}
	if ev := events[0]; ev.Type != "payment.succeeded" || !ev.Timestamp.Equal(time.Date(2026, 1, 15, 10, 30, 1, 0, time.UTC)) ||
		!bytes.Contains(ev.Data, []byte(`"paymentId":"pay_1"`)) {
		t.Errorf("event %+v", ev)
	}
}

func TestReceiverForgetsTheOldestIDsAndRefusesWhenBusy(t *testing.T) {
	t.Parallel()
	rc, secret := newTestReceiver(t, 1, 2)
	body := []byte(message)
	deliver := func(id string) int { return send(t, rc, signed(t, id, time.Now(), body, secret), body) }

	if got := deliver("a"); got != http.StatusNoContent {
		t.Fatalf("a: %d", got)
	}
	// The queue (of one) is full: refused so that the sender retries, and
	// not remembered, so that the retry is taken.
	if got := deliver("b"); got != http.StatusServiceUnavailable {
		t.Errorf("b with the worker behind: %d, want 503", got)
	}
	if evs := queued(rc); len(evs) != 1 || evs[0].ID != "a" {
		t.Fatalf("queued %+v, want a", evs)
	}
	for _, id := range []string{"b", "c"} {
		if got := deliver(id); got != http.StatusNoContent {
			t.Errorf("%s: %d, want 204", id, got)
		}
		queued(rc)
	}
	// Two ids are remembered: b and c. a is forgotten, so its duplicate
	// is handed on again; that is the bound, and why a real receiver keeps
	// the ids in its database.
	if got := deliver("c"); got != http.StatusNoContent || len(queued(rc)) != 0 {
		t.Errorf("the duplicate of c: %d, or handed on", got)
	}
	if got := deliver("a"); got != http.StatusNoContent || len(queued(rc)) != 1 {
		t.Errorf("a, forgotten: %d, want handed on again", got)
	}
}

func TestRunServesUntilCanceled(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // run listens on it itself
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, addr, secret, quiet()) }()

	body := []byte(message)
	var status int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", bytes.NewReader(body))
		req.Header = signed(t, "evt-1", time.Now(), body, secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue // not listening yet
		}
		_ = resp.Body.Close()
		status = resp.StatusCode
		break
	}
	if status != http.StatusNoContent {
		t.Errorf("a signed delivery to the running receiver: %d, want 204", status)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
	if err := run(context.Background(), addr, "", quiet()); err == nil || !strings.Contains(err.Error(), "WEBHOOK_SECRET") {
		t.Errorf("without a secret: %v, want an error naming WEBHOOK_SECRET", err)
	}
}
