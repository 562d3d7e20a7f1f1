package delivery_test

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/paymentsapi/paymentsapi/internal/delivery"
)

// lastAttempt is the newest attempt of the delivery log of the tenant's
// event (the log is newest first).
func (e *env) lastAttempt(apiKey, eventID string) map[string]any {
	e.t.Helper()
	log := e.deliveries(apiKey, eventID)
	if len(log) == 0 {
		e.t.Fatalf("no attempt of %s", eventID)
	}
	return log[0]
}

// view is GET /webhook-endpoints/{id} as the tenant sees it (200 expected).
func (e *env) view(apiKey, id string) map[string]any {
	e.t.Helper()
	r := e.do(apiKey, "GET", "/webhook-endpoints/"+id, "", "")
	if r.status != http.StatusOK {
		e.t.Fatalf("GET endpoint %s: %v", id, r)
	}
	v := r.json(e.t)
	if _, ok := v["secret"]; ok {
		e.t.Errorf("GET shows the secret: %v", r)
	}
	return v
}

// A failed message is retried on the schedule, each wait at least the
// schedule's and at most a tenth longer (jitter), by the fake clock, and
// not a moment before; after the schedule it has failed and is sent no
// more. Each attempt's webhook-timestamp is the clock's at the attempt.
func TestRetriesOnTheScheduleThenFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	ep := e.hook(tenantA, "/down")
	e.recv.status("/down", http.StatusInternalServerError)
	ev := e.record("tenant_a", succeeded)
	w := e.worker(delivery.Config{})
	schedule := delivery.DefaultSchedule()
	var stamps []int64
	for n := 1; n <= len(schedule)+1; n++ {
		stamps = append(stamps, e.clk.Now().Unix())
		if got := e.runOnce(w); got != 1 {
			t.Fatalf("attempt %d: claimed %d", n, got)
		}
		a := e.lastAttempt(tenantA, ev)
		if a["statusCode"] != float64(500) || !strings.Contains(a["error"].(string), "500") {
			t.Errorf("attempt %d: %v", n, a)
		}
		if n > len(schedule) {
			if a["nextAttemptAt"] != nil {
				t.Errorf("the last attempt books another: %v", a)
			}
			break
		}
		next, err := time.Parse(time.RFC3339Nano, a["nextAttemptAt"].(string))
		if err != nil {
			t.Fatalf("attempt %d: %v", n, a)
		}
		d := schedule[n-1]
		if wait := next.Sub(e.clk.Now()); wait < d || wait > d+d/10 {
			t.Errorf("after attempt %d: next in %s, want %s to %s", n, wait, d, d+d/10)
		}
		e.clk.Set(next.Add(-time.Millisecond))
		if got := e.runOnce(w); got != 0 {
			t.Fatalf("attempt %d's retry was claimed before it was due", n)
		}
		e.clk.Set(next)
	}
	if got := e.messages(ep.id); got["failed"] != 1 || len(got) != 1 {
		t.Errorf("messages %v, want one failed", got)
	}
	e.clk.Advance(30 * 24 * time.Hour)
	if got := e.runOnce(w); got != 0 {
		t.Errorf("a failed message was claimed again")
	}
	got := e.recv.receipts("/down")
	if len(got) != len(schedule)+1 {
		t.Fatalf("%d attempts received, want %d", len(got), len(schedule)+1)
	}
	for i, r := range got {
		if r.timestamp != stamps[i] {
			t.Errorf("attempt %d: webhook-timestamp %d, want the clock's %d", i+1, r.timestamp, stamps[i])
		}
	}
	if v := e.view(tenantA, ep.id); v["status"] != "enabled" {
		t.Errorf("after 3 days of failures (less than 5): %v", v)
	}
}

// A 410 Gone disables its endpoint at once: its other messages are
// abandoned, new events are not fanned out to it, and it cannot be sent a
// resend; the tenant's other endpoints go on.
func TestGoneDisablesTheEndpointAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	gone := e.hook(tenantA, "/gone")
	e.recv.status("/gone", http.StatusGone)
	e.hook(tenantA, "/ok")
	for range 3 {
		e.record("tenant_a", succeeded)
	}
	w := e.worker(delivery.Config{PerEndpoint: 1})
	for e.runOnce(w) > 0 {
	}
	if got := e.recv.receipts("/gone"); len(got) != 1 {
		t.Fatalf("the gone endpoint got %d requests, want 1", len(got))
	}
	if got := e.messages(gone.id); got["failed"] != 1 || got["abandoned"] != 2 || len(got) != 2 {
		t.Errorf("the gone endpoint's messages: %v, want 1 failed and 2 abandoned", got)
	}
	v := e.view(tenantA, gone.id)
	if v["status"] != "disabled" || !strings.Contains(v["disabledReason"].(string), "410") || v["disabledAt"] == nil {
		t.Errorf("the gone endpoint: %v", v)
	}
	later := e.record("tenant_a", succeeded)
	for e.runOnce(w) > 0 {
	}
	if got := e.messages(gone.id); got["failed"]+got["abandoned"] != 3 || got["pending"] != 0 {
		t.Errorf("a new event was fanned out to a disabled endpoint: %v", got)
	}
	if got := e.recv.ids("/ok"); len(got) != 4 {
		t.Errorf("the other endpoint got %v, want the 4 events", got)
	}
	r := e.do(tenantA, "POST", "/events/"+later+"/resend", "resend-gone", jsonBody(map[string]string{"endpointId": gone.id}))
	if r.status != http.StatusConflict || r.json(t)["code"] != "WEBHOOK_ENDPOINT_DISABLED" {
		t.Errorf("a resend to the disabled endpoint: %v", r)
	}
}

// An endpoint with no success for five days is disabled by its next
// failure; a success in between starts the count again.
func TestFiveDaysWithoutSuccessDisable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	down := e.hook(tenantA, "/down")
	e.recv.status("/down", http.StatusServiceUnavailable)
	flaky := e.hook(tenantA, "/flaky")
	e.recv.status("/flaky", http.StatusServiceUnavailable)
	w := e.worker(delivery.Config{})
	pass := func() {
		t.Helper()
		for e.runOnce(w) > 0 {
		}
	}
	e.record("tenant_a", succeeded)
	pass() // both fail: failing since now

	e.clk.Advance(3 * 24 * time.Hour)
	e.recv.status("/flaky", http.StatusNoContent)
	e.record("tenant_a", succeeded)
	pass() // down fails again; flaky succeeds
	for _, ep := range []endpoint{down, flaky} {
		if v := e.view(tenantA, ep.id); v["status"] != "enabled" {
			t.Fatalf("after 3 days: %v", v)
		}
	}

	e.clk.Advance(2*24*time.Hour + time.Minute)
	e.recv.status("/flaky", http.StatusServiceUnavailable)
	e.record("tenant_a", succeeded)
	pass()
	if v := e.view(tenantA, down.id); v["status"] != "disabled" || v["disabledReason"] != "no delivery succeeded for 5 days" {
		t.Errorf("after 5 days without a success: %v", v)
	}
	if got := e.messages(down.id); got["pending"] != 0 || got["abandoned"] == 0 {
		t.Errorf("the disabled endpoint's messages: %v", got)
	}
	if v := e.view(tenantA, flaky.id); v["status"] != "enabled" {
		t.Errorf("an endpoint that succeeded 2 days ago: %v", v)
	}
}

// A rotation (idempotent: a replay answers the same endpoint, without the
// secret) gives the endpoint a new secret; by default for 24 hours both
// sign every message (two signatures, each verified by the library), then
// only the new one.
func TestRotationSignsWithBothSecretsFor24Hours(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	ep := e.hook(tenantA, "/rot")
	path := "/webhook-endpoints/" + ep.id + "/rotate-secret"
	r := e.do(tenantA, "POST", path, "rotate-1", "")
	if r.status != http.StatusOK {
		t.Fatalf("rotate: %v", r)
	}
	v := r.json(t)
	newSecret, _ := v["secret"].(string)
	if !strings.HasPrefix(newSecret, "whsec_") || newSecret == ep.secret || v["endpointId"] != ep.id || v["rotationId"] == nil {
		t.Fatalf("rotate: %v", r)
	}
	replay := e.do(tenantA, "POST", path, "rotate-1", "")
	withoutSecret := bytes.Replace(r.body, []byte(`"secret":"`+newSecret+`"`), []byte(`"secret":null`), 1)
	if replay.status != http.StatusOK || !bytes.Equal(replay.body, withoutSecret) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay of the rotation: %v (%v), want %s", replay, replay.header, withoutSecret)
	}
	e.view(tenantA, ep.id) // never the secret

	e.recv.expect("/rot", ep.secret, newSecret) // each must verify
	w := e.worker(delivery.Config{})
	e.record("tenant_a", succeeded)
	e.runOnce(w)
	got := e.recv.receipts("/rot")
	if len(got) != 1 || len(got[0].sigs) != 2 {
		t.Fatalf("during the rotation: %d receipts, signatures %v; want one with two", len(got), got)
	}

	e.clk.Advance(24*time.Hour + time.Second)
	e.recv.expect("/rot", newSecret)
	e.record("tenant_a", succeeded)
	e.runOnce(w)
	got = e.recv.receipts("/rot")
	if len(got) != 2 || len(got[1].sigs) != 1 {
		t.Fatalf("after 24 hours: %d receipts, signatures %v; want a second with one", len(got), got)
	}
	old, err := standardwebhooks.NewWebhook(ep.secret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", got[1].id)
	h.Set("webhook-timestamp", strconv.FormatInt(got[1].timestamp, 10))
	h.Set("webhook-signature", strings.Join(got[1].sigs, " "))
	if err := old.VerifyIgnoringTimestamp(got[1].body, h); err == nil {
		t.Error("the old secret still verifies after 24 hours")
	}

	// Another tenant's endpoint, or none, cannot be rotated.
	for _, tc := range []struct{ apiKey, path string }{
		{tenantB, path}, {tenantA, "/webhook-endpoints/we_nope/rotate-secret"},
	} {
		if r := e.do(tc.apiKey, "POST", tc.path, "rotate-x", ""); r.status != http.StatusNotFound {
			t.Errorf("rotate %s as another tenant or of no endpoint: %v", tc.path, r)
		}
	}
}

// An endpoint that does not answer within the timeout fails the attempt,
// with no status, and is retried.
func TestTimeoutFailsTheAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	e.hook(tenantA, "/silent")
	e.recv.answer("/silent", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // until the sender gives up
	})
	ev := e.record("tenant_a", succeeded)
	e.runOnce(e.worker(delivery.Config{Timeout: 200 * time.Millisecond}))
	a := e.lastAttempt(tenantA, ev)
	if a["statusCode"] != nil || a["error"] != "timeout after 200ms" || a["nextAttemptAt"] == nil || a["durationMs"].(float64) < 200 {
		t.Errorf("attempt %v, want a timeout, retried", a)
	}
}
