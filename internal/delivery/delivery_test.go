package delivery_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

// Every event the log records goes, once, to each enabled endpoint of its
// tenant that takes its type, signed (verified by the receiver with the
// Standard Webhooks library), with the event's id as webhook-id and the
// attempt's time as webhook-timestamp; a second recording sends nothing
// more, and another tenant's endpoint gets nothing.
func TestDeliversEachEventToItsTenantsEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	all := e.hook(tenantA, "/a-all")
	onlySucceeded := e.hook(tenantA, "/a-succeeded", "payment.succeeded")
	other := e.hook(tenantB, "/b-all")

	a1, a2 := e.event("tenant_a", created), e.event("tenant_a", succeeded)
	b1 := e.event("tenant_b", succeeded)
	// Recorded through the relay's publisher, twice, as a relay that
	// crashed before marking them would.
	pub := e.core.EventLog.Publisher(outbox.NewLogPublisher(nopWriter{}))
	for range 2 {
		for i, err := range pub.PublishBatch(context.Background(), []outbox.Event{a1, a2, b1}) {
			if err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
	for _, tc := range []struct {
		ep   endpoint
		want map[string]string // status by count
	}{{all, map[string]string{"pending": "2"}}, {onlySucceeded, map[string]string{"pending": "1"}}, {other, map[string]string{"pending": "1"}}} {
		if got := e.messages(tc.ep.id); strconv.Itoa(got["pending"]) != tc.want["pending"] || len(got) != 1 {
			t.Errorf("endpoint %s: messages %v, want %v", tc.ep.path, got, tc.want)
		}
	}

	w := e.worker(delivery.Config{})
	if n := e.runOnce(w); n != 4 {
		t.Fatalf("claimed %d, want 4", n)
	}
	if n := e.runOnce(w); n != 0 {
		t.Fatalf("a second pass claimed %d", n)
	}
	for path, want := range map[string][]string{
		"/a-all": {a1.ID, a2.ID}, "/a-succeeded": {a2.ID}, "/b-all": {b1.ID},
	} {
		got := e.recv.ids(path)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s got %v, want %v", path, got, want)
		}
	}
	for _, r := range e.recv.receipts("/a-succeeded") {
		var msg struct {
			Type      string    `json:"type"`
			Timestamp time.Time `json:"timestamp"`
			Data      struct {
				PaymentID string `json:"paymentId"`
			} `json:"data"`
		}
		if err := json.Unmarshal(r.body, &msg); err != nil {
			t.Fatal(err)
		}
		if msg.Type != "payment.succeeded" || !msg.Timestamp.Equal(a2.OccurredAt) || msg.Data.PaymentID != a2.AggregateID {
			t.Errorf("body %s", r.body)
		}
		if r.timestamp != e.clk.Now().Unix() || len(r.sigs) != 1 {
			t.Errorf("webhook-timestamp %d (want %d), signatures %v", r.timestamp, e.clk.Now().Unix(), r.sigs)
		}
	}
	for _, ep := range []endpoint{all, onlySucceeded, other} {
		if got := e.messages(ep.id); got["delivered"] == 0 || got["pending"] != 0 {
			t.Errorf("endpoint %s: messages %v, want all delivered", ep.path, got)
		}
	}

	// The delivery log: every attempt, per endpoint; another tenant's
	// event is not found.
	log := e.deliveries(tenantA, a2.ID)
	if len(log) != 2 {
		t.Fatalf("deliveries of %s: %v", a2.ID, log)
	}
	for _, a := range log {
		if a["statusCode"] != float64(200) || a["error"] != nil || a["nextAttemptAt"] != nil || a["attemptedAt"] == nil ||
			(a["endpointId"] != all.id && a["endpointId"] != onlySucceeded.id) {
			t.Errorf("attempt %v", a)
		}
	}
	if r := e.do(tenantB, "GET", "/events/"+a2.ID+"/deliveries", "", ""); r.status != http.StatusNotFound {
		t.Errorf("another tenant's deliveries: %v", r)
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
