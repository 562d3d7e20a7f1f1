package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/apitest"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

// hookAPI stands in for the API's webhook endpoint routes: it registers
// endpoints (or refuses them as the server's destination policy would) and
// records what it was asked.
type hookAPI struct {
	*httptest.Server
	forbid bool // answer registrations 400 WEBHOOK_URL_FORBIDDEN

	mu         sync.Mutex
	registered []hookRegistration
	deleted    []string
	ready      chan hookRegistration // each registration, once answered
}

type hookRegistration struct {
	ID, URL, Secret, Description string
	EventTypes                   []string
}

func newHookAPI(t *testing.T, forbid bool) *hookAPI {
	t.Helper()
	h := &hookAPI{forbid: forbid, ready: make(chan hookRegistration, 4)}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.Close)
	return h
}

func (h *hookAPI) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == "POST" && r.URL.Path == "/webhook-endpoints":
		if r.Header.Get("Idempotency-Key") == "" {
			http.Error(w, "no key", http.StatusBadRequest)
			return
		}
		var req struct {
			URL         string   `json:"url"`
			EventTypes  []string `json:"eventTypes"`
			Description string   `json:"description"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if h.forbid {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"type":"https://paymentsapi.dev/problems/webhook-url-forbidden","title":"Webhook URL forbidden","status":400,`+
				`"detail":"webhook destination forbidden: %s is plain http","code":"WEBHOOK_URL_FORBIDDEN"}`, req.URL)
			return
		}
		secret, err := outbound.NewSecret()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		reg := hookRegistration{URL: req.URL, Secret: secret, Description: req.Description, EventTypes: req.EventTypes}
		h.mu.Lock()
		reg.ID = fmt.Sprintf("we_%d", len(h.registered)+1)
		h.registered = append(h.registered, reg)
		h.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"endpointId": reg.ID, "url": reg.URL, "eventTypes": reg.EventTypes, "description": reg.Description,
			"status": "enabled", "secret": reg.Secret, "createdAt": "2026-01-15T09:00:00Z",
		})
		h.ready <- reg
	case r.Method == "DELETE" && strings.HasPrefix(r.URL.Path, "/webhook-endpoints/"):
		h.mu.Lock()
		h.deleted = append(h.deleted, strings.TrimPrefix(r.URL.Path, "/webhook-endpoints/"))
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

func (h *hookAPI) deletedIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.deleted)
}

// listening runs `paymentsctl listen` with args against h until the test
// calls stop, which returns the run's result.
func listening(t *testing.T, h *hookAPI, args ...string) (reg hookRegistration, stop func() result) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testio.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"-url", h.URL, "-api-key", "sk_test", "listen"}, args...), func(string) string { return "" }, &stdout, &stderr)
	}()
	stop = func() result {
		cancel()
		code := <-done
		return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	}
	select {
	case reg = <-h.ready:
	case code := <-done:
		t.Fatalf("listen ended with %d before registering\nstderr: %s", code, stderr.String())
	case <-time.After(10 * time.Second):
		stop()
		t.Fatalf("listen registered no endpoint\nstderr: %s", stderr.String())
	}
	return reg, stop
}

// deliver POSTs a delivery of body, signed with secrets, to url, as the
// service does, and returns the answer's status.
func deliver(t *testing.T, url, id string, body []byte, secrets ...string) int {
	t.Helper()
	header, err := outbound.Sign(id, time.Now(), body, secrets...)
	if err != nil {
		t.Fatal(err)
	}
	return post(t, url, header, body)
}

func post(t *testing.T, url string, header http.Header, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

const succeededMessage = `{"type":"payment.succeeded","timestamp":"2026-01-15T10:30:01Z",` +
	`"data":{"paymentId":"pay_1","status":"SUCCEEDED","amount":"10.00","currency":"EUR"}}`

func TestListenPrintsVerifiedDeliveries(t *testing.T) {
	t.Parallel()
	h := newHookAPI(t, false)
	reg, stop := listening(t, h, "-events", "payment.succeeded, refund.succeeded")
	if !strings.HasPrefix(reg.URL, "http://127.0.0.1:") || !slices.Equal(reg.EventTypes, []string{"payment.succeeded", "refund.succeeded"}) {
		t.Errorf("registered %+v, want a loopback URL and the two types", reg)
	}

	body := []byte(succeededMessage)
	if got := deliver(t, reg.URL, "evt-1", body, reg.Secret); got != http.StatusNoContent {
		t.Errorf("a signed delivery answered %d, want 204", got)
	}
	// A retry of the same message is shown again: listen deduplicates
	// nothing.
	if got := deliver(t, reg.URL, "evt-1", body, reg.Secret); got != http.StatusNoContent {
		t.Errorf("the same delivery again answered %d, want 204", got)
	}
	// Two signatures, as during a rotation: one matching is enough.
	other, _ := outbound.NewSecret()
	if got := deliver(t, reg.URL, "evt-2", body, other, reg.Secret); got != http.StatusNoContent {
		t.Errorf("a delivery signed by two secrets answered %d, want 204", got)
	}
	// Refused, and never printed: another secret, a tampered body, no
	// signature, a stale timestamp.
	if got := deliver(t, reg.URL, "evt-bad-1", body, other); got != http.StatusBadRequest {
		t.Errorf("a delivery signed with another secret answered %d, want 400", got)
	}
	header, _ := outbound.Sign("evt-bad-2", time.Now(), body, reg.Secret)
	tampered := bytes.Replace(body, []byte(`"10.00"`), []byte(`"99.00"`), 1)
	if got := post(t, reg.URL, header, tampered); got != http.StatusBadRequest {
		t.Errorf("a tampered delivery answered %d, want 400", got)
	}
	if got := post(t, reg.URL, http.Header{}, body); got != http.StatusBadRequest {
		t.Errorf("an unsigned delivery answered %d, want 400", got)
	}
	stale, _ := outbound.Sign("evt-bad-3", time.Now().Add(-time.Hour), body, reg.Secret)
	if got := post(t, reg.URL, stale, body); got != http.StatusBadRequest {
		t.Errorf("a delivery signed an hour ago answered %d, want 400", got)
	}

	r := stop()
	r.want(t, 0)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("stdout has %d lines, want 3 (one per verified delivery):\n%s", len(lines), r.stdout)
	}
	for i, want := range []string{"evt-1", "evt-1", "evt-2"} {
		var ev struct {
			ID, Type, Timestamp string
			Data                map[string]any
		}
		if err := json.Unmarshal([]byte(lines[i]), &ev); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i+1, err, lines[i])
		}
		if ev.ID != want || ev.Type != "payment.succeeded" || ev.Timestamp != "2026-01-15T10:30:01Z" || ev.Data["paymentId"] != "pay_1" {
			t.Errorf("line %d: %+v, want %s payment.succeeded of pay_1", i+1, ev, want)
		}
	}
	if !strings.Contains(r.stderr, reg.Secret) || !strings.Contains(r.stderr, "deleted endpoint "+reg.ID) {
		t.Errorf("stderr %q, want the secret and the deletion told", r.stderr)
	}
	if got := h.deletedIDs(); !slices.Equal(got, []string{reg.ID}) {
		t.Errorf("deleted %v, want the temporary endpoint %s", got, reg.ID)
	}
}

func TestListenForwardsWithTheSameHeaders(t *testing.T) {
	t.Parallel()
	h := newHookAPI(t, false)
	var (
		mu      sync.Mutex
		secret  string
		fail    bool
		arrived []string
	)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		// The target verifies what listen forwards as it would verify the
		// service's delivery: the signature still holds.
		if err := outbound.Verify(secret, r.Header, body); err != nil {
			t.Errorf("the forwarded delivery does not verify: %v", err)
		}
		arrived = append(arrived, r.Header.Get("webhook-id"))
		if fail {
			w.WriteHeader(http.StatusGone)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(target.Close)
	reg, stop := listening(t, h, "-forward-to", target.URL+"/hooks")
	mu.Lock()
	secret = reg.Secret
	mu.Unlock()
	if reg.EventTypes != nil {
		t.Errorf("eventTypes %v, want none sent: every type", reg.EventTypes)
	}

	if got := deliver(t, reg.URL, "evt-1", []byte(succeededMessage), reg.Secret); got != http.StatusNoContent {
		t.Errorf("a forwarded delivery answered %d, want 204", got)
	}
	// The target's failure is the delivery's: the service retries it. Its
	// 410 is not passed on, which would disable the endpoint.
	mu.Lock()
	fail = true
	mu.Unlock()
	if got := deliver(t, reg.URL, "evt-2", []byte(succeededMessage), reg.Secret); got != http.StatusBadGateway {
		t.Errorf("a delivery the target refused answered %d, want 502", got)
	}
	r := stop()
	r.want(t, 0)
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing: the deliveries were forwarded", r.stdout)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(arrived, []string{"evt-1", "evt-2"}) {
		t.Errorf("the target got %v, want evt-1 and evt-2", arrived)
	}
}

func TestListenExplainsAForbiddenURL(t *testing.T) {
	t.Parallel()
	h := newHookAPI(t, true)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-url", h.URL, "listen"}, func(string) string { return "" }, &stdout, &stderr)
	if code != exitError || !strings.Contains(stderr.String(), "WEBHOOK_ALLOW_HTTP=true") || !strings.Contains(stderr.String(), "WEBHOOK_ALLOW_PRIVATE=true") {
		t.Errorf("exit %d, stderr %q; want 1 and the hint", code, stderr.String())
	}
	for _, bad := range [][]string{{"listen", "-events", "payment.succeeded,,refund.succeeded"}, {"listen", "-forward-to", "ftp://x"}, {"listen", "extra"}} {
		stderr.Reset()
		if code := run(context.Background(), append([]string{"-url", h.URL}, bad...), func(string) string { return "" }, &stdout, &stderr); code != exitError {
			t.Errorf("%v: exit %d, want 1", bad, code)
		}
	}
}

// TestListenAgainstTheServer registers and deletes the temporary endpoint
// through the real API (apitest runs no delivery worker: the test delivers
// as the service would), and shows the hint when the server's policy is
// production's.
func TestListenAgainstTheServer(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Webhooks: outbound.Policy{AllowHTTP: true, AllowPrivate: true}})
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testio.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, flags(s, "listen", "-events", "payment.succeeded"), func(string) string { return "" }, &stdout, &stderr)
	}()
	// Registered, and the secret told, which listen does once the
	// registration answered.
	var (
		endpoint map[string]any
		secret   string
	)
	for deadline := time.Now().Add(10 * time.Second); endpoint == nil || secret == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no endpoint registered and told; stderr: %s", stderr.String())
		}
		endpoint = registeredEndpoint(t, s)
		secret = strings.TrimSpace(strings.TrimPrefix(lineWith(stderr.String(), "webhook signing secret: "), "webhook signing secret: "))
	}
	url, _ := endpoint["url"].(string)
	id, _ := endpoint["endpointId"].(string)
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("endpoint %v, secret %q", endpoint, secret)
	}
	if got := deliver(t, url, "evt-1", []byte(succeededMessage), secret); got != http.StatusNoContent {
		t.Errorf("a delivery signed with the printed secret answered %d, want 204", got)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("listen exited %d; stderr: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), `"id":"evt-1"`) {
		t.Errorf("stdout %q, want the event", stdout.String())
	}
	if registeredEndpoint(t, s) != nil {
		t.Errorf("endpoint %s is still registered after listen stopped", id)
	}

	strict := apitest.Start(t, apitest.Options{})
	r := ctl(context.Background(), nil, flags(strict, "listen")...)
	r.want(t, exitError)
	if !strings.Contains(r.stderr, "WEBHOOK_ALLOW_HTTP=true and WEBHOOK_ALLOW_PRIVATE=true") {
		t.Errorf("stderr %q, want the hint", r.stderr)
	}
}

// registeredEndpoint returns the tenant's one webhook endpoint, nil when
// it has none.
func registeredEndpoint(t *testing.T, s *apitest.Server) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/webhook-endpoints", nil)
	req.Header.Set("Authorization", "Bearer "+s.Secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Items []map[string]any }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) > 1 {
		t.Fatalf("%d endpoints, want at most one", len(list.Items))
	}
	if len(list.Items) == 0 {
		return nil
	}
	return list.Items[0]
}

// lineWith returns the first line of text that starts with prefix.
func lineWith(text, prefix string) string {
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}
