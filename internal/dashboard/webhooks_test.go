package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// endpoint creates a webhook endpoint of the tenant through the API.
func (e *env) endpoint(secret, key, target string) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.url+"/webhook-endpoints", strings.NewReader(`{"url":"`+target+`","description":"orders"}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("POST /webhook-endpoints: %d %s", resp.StatusCode, b)
	}
}

var resendForm = regexp.MustCompile(`name="key" value="([^"]+)"><input type="hidden" name="eventId" value="([^"]+)"`)

func TestTheWebhooksPageAndAResend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	b := e.browser()
	b.login(secretA)
	golden(t, "webhooks-empty", b.get("/dashboard/webhooks"))

	e.endpoint(secretA, "we-1", "http://127.0.0.1:9/hooks")
	e.pay(secretA, "k-1", payment("acc_1", "inv-1", "10.00", "pm_card_visa", "automatic"))
	p := b.get("/dashboard/webhooks")
	mustStatus(t, p, 200)
	golden(t, "webhooks", p)

	m := resendForm.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no resend form:\n%s", p.body)
	}
	form := url.Values{"csrf": {b.csrf()}, "key": {m[1]}, "eventId": {m[2]}}
	p = b.post("/dashboard/webhooks/resend", form)
	mustStatus(t, p, 200)
	if !strings.Contains(p.body, "Resend event "+m[2]+": 202 Accepted") || !strings.Contains(p.body, "Idempotency-Key: "+m[1]) {
		t.Errorf("the resend's page:\n%s", p.body)
	}
	var due int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_messages
		WHERE event_id = $1::uuid AND status = 'pending'`, m[2]).Scan(&due); err != nil || due != 1 {
		t.Errorf("the resend made %d messages due (%v), want 1", due, err)
	}
	// The same form again replays the first answer.
	p = b.post("/dashboard/webhooks/resend", form)
	if !strings.Contains(p.body, "This answer is a replay") {
		t.Errorf("the resend sent again:\n%s", p.body)
	}

	// Another tenant sees none of it, and cannot resend it.
	other := e.browser()
	other.login(secretB)
	if p := other.get("/dashboard/webhooks"); strings.Contains(p.body, m[2]) || strings.Contains(p.body, "127.0.0.1:9") {
		t.Errorf("tenant_b's webhooks show tenant_a's:\n%s", p.body)
	}
	p = other.post("/dashboard/webhooks/resend", url.Values{"csrf": {other.csrf()}, "key": {"x-1"}, "eventId": {m[2]}})
	if p.status != http.StatusNotFound {
		t.Errorf("tenant_b resending tenant_a's event: %d\n%.1500s", p.status, p.body)
	}
}
