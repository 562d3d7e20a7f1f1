package delivery_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/delivery"
)

// POST /webhook-endpoints is idempotent: 201 with the secret, and its replay
// the same bytes but for the secret ("secret": null); another body under
// the key is 422. GET
// and the listing never show the secret; DELETE is 204, then 404, and
// deliveries stop: the endpoint's pending messages are abandoned and new
// events are not fanned out to it.
func TestEndpointLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	body := jsonBody(map[string]any{"url": e.recv.srv.URL + "/life", "eventTypes": []string{"payment.succeeded", "refund.succeeded"},
		"description": "orders"})
	r := e.do(tenantA, "POST", "/webhook-endpoints", "ep-1", body)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %v", r)
	}
	v := r.json(t)
	id, _ := v["endpointId"].(string)
	secret, _ := v["secret"].(string)
	if !strings.HasPrefix(id, "we_") || !strings.HasPrefix(secret, "whsec_") || v["status"] != "enabled" ||
		v["description"] != "orders" || v["createdAt"] == nil || r.header.Get("Location") != "/webhook-endpoints/"+id {
		t.Fatalf("create: %v %v", r, r.header)
	}
	if types, _ := json.Marshal(v["eventTypes"]); string(types) != `["payment.succeeded","refund.succeeded"]` {
		t.Errorf("eventTypes %s", types)
	}
	replay := e.do(tenantA, "POST", "/webhook-endpoints", "ep-1", body)
	withoutSecret := bytes.Replace(r.body, []byte(`"secret":"`+secret+`"`), []byte(`"secret":null`), 1)
	if replay.status != http.StatusCreated || !bytes.Equal(replay.body, withoutSecret) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %v, want %s", replay, withoutSecret)
	}
	if other := e.do(tenantA, "POST", "/webhook-endpoints", "ep-1", jsonBody(map[string]any{"url": e.recv.srv.URL + "/x"})); other.status != http.StatusUnprocessableEntity {
		t.Errorf("another command under the key: %v", other)
	}
	all := e.do(tenantA, "POST", "/webhook-endpoints", "ep-2", jsonBody(map[string]any{"url": e.recv.srv.URL + "/all"}))
	if all.status != http.StatusCreated || all.json(t)["eventTypes"] != nil {
		t.Fatalf("an endpoint for every type: %v", all)
	}
	e.recv.expect("/all", all.json(t)["secret"].(string))
	if v := e.view(tenantA, id); v["url"] != e.recv.srv.URL+"/life" {
		t.Errorf("GET: %v", v)
	}
	list := e.do(tenantA, "GET", "/webhook-endpoints", "", "")
	if list.status != http.StatusOK || strings.Contains(string(list.body), "whsec_") || strings.Count(string(list.body), `"endpointId"`) != 2 {
		t.Errorf("list: %v", list)
	}

	e.recv.expect("/life", secret)
	e.recv.status("/life", http.StatusServiceUnavailable)
	failed := e.record("tenant_a", succeeded)
	w := e.worker(delivery.Config{})
	e.runOnce(w)                    // fails: a retry is due
	e.record("tenant_a", succeeded) // pending, not sent yet
	if r := e.do(tenantA, "DELETE", "/webhook-endpoints/"+id, "", ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %v", r)
	}
	if r := e.do(tenantA, "DELETE", "/webhook-endpoints/"+id, "", ""); r.status != http.StatusNotFound {
		t.Errorf("a second delete: %v", r)
	}
	if r := e.do(tenantA, "GET", "/webhook-endpoints/"+id, "", ""); r.status != http.StatusNotFound {
		t.Errorf("GET after delete: %v", r)
	}
	e.record("tenant_a", succeeded)
	e.clk.Advance(time.Hour) // the retry would be due
	e.runOnce(w)
	if got := e.recv.ids("/life"); len(got) != 1 {
		t.Errorf("a deleted endpoint got %v, want only the attempt before it was deleted", got)
	}
	if got := e.recv.ids("/all"); len(got) != 3 {
		t.Errorf("the other endpoint got %v, want the three events", got)
	}
	if got := e.messages(id); got["abandoned"] != 2 || len(got) != 1 {
		t.Errorf("the deleted endpoint's messages: %v, want its two pending messages abandoned", got)
	}
	for _, a := range e.deliveries(tenantA, failed) {
		if a["endpointId"] == id && a["nextAttemptAt"] != nil {
			t.Errorf("an attempt to a deleted endpoint shows a next attempt: %v", a)
		}
	}
}

// A malformed body, an unknown event type or a URL that is no URL is 400
// VALIDATION_FAILED, naming the field, and writes nothing.
func TestEndpointValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	for name, tc := range map[string]struct {
		body, code, field string
	}{
		"no url":             {`{}`, "VALIDATION_FAILED", "url"},
		"not a url":          {`{"url":"not a url"}`, "VALIDATION_FAILED", "url"},
		"ftp":                {`{"url":"ftp://example.com/"}`, "VALIDATION_FAILED", "url"},
		"userinfo":           {`{"url":"https://u:p@example.com/"}`, "VALIDATION_FAILED", "url"},
		"unknown type":       {`{"url":"https://example.com/","eventTypes":["payment.exploded"]}`, "VALIDATION_FAILED", "eventTypes"},
		"outbox type":        {`{"url":"https://example.com/","eventTypes":["PaymentSucceeded"]}`, "VALIDATION_FAILED", "eventTypes"},
		"no types":           {`{"url":"https://example.com/","eventTypes":[]}`, "VALIDATION_FAILED", "eventTypes"},
		"long description":   {`{"url":"https://example.com/","description":"` + strings.Repeat("x", 257) + `"}`, "VALIDATION_FAILED", "description"},
		"unknown field":      {`{"url":"https://example.com/","secret":"whsec_mine"}`, "VALIDATION_FAILED", ""},
		"malformed":          {`{"url":`, "MALFORMED_JSON", ""},
		"types not an array": {`{"url":"https://example.com/","eventTypes":"payment.succeeded"}`, "", ""},
	} {
		r := e.do(tenantA, "POST", "/webhook-endpoints", "bad-"+name, tc.body)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %v, want 400", name, r)
			continue
		}
		if tc.code != "" && r.json(t)["code"] != tc.code {
			t.Errorf("%s: %v, want %s", name, r, tc.code)
		}
		if tc.field != "" && !strings.Contains(string(r.body), `"field":"`+tc.field+`"`) {
			t.Errorf("%s: %v does not name %s", name, r, tc.field)
		}
	}
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_endpoints`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d endpoints written (%v)", n, err)
	}
}

// Every route sees the tenant's own endpoints and events only: another
// tenant's are 404, and never listed.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	a := e.hook(tenantA, "/a")
	ev := e.record("tenant_a", succeeded)
	e.runOnce(e.worker(delivery.Config{}))
	evB := e.record("tenant_b", succeeded)

	for _, tc := range []struct{ method, path, key, body string }{
		{"GET", "/webhook-endpoints/" + a.id, "", ""},
		{"DELETE", "/webhook-endpoints/" + a.id, "", ""},
		{"POST", "/webhook-endpoints/" + a.id + "/rotate-secret", "b-rotate", ""},
		{"GET", "/events/" + ev + "/deliveries", "", ""},
		{"POST", "/events/" + ev + "/resend", "b-resend", ""},
		{"POST", "/events/" + evB + "/resend", "b-resend-a", jsonBody(map[string]string{"endpointId": a.id})},
		{"GET", "/events/" + ev, "", ""},
	} {
		if r := e.do(tenantB, tc.method, tc.path, tc.key, tc.body); r.status != http.StatusNotFound {
			t.Errorf("tenant B: %s %s: %v, want 404", tc.method, tc.path, r)
		}
	}
	if r := e.do(tenantB, "GET", "/webhook-endpoints", "", ""); r.status != http.StatusOK || string(r.body) != `{"items":[]}`+"\n" && string(r.body) != `{"items":[]}` {
		t.Errorf("tenant B's listing: %v", r)
	}
	// A's endpoint is untouched, and A still sees its deliveries.
	if v := e.view(tenantA, a.id); v["status"] != "enabled" {
		t.Errorf("A's endpoint: %v", v)
	}
	if log := e.deliveries(tenantA, ev); len(log) != 1 {
		t.Errorf("A's deliveries: %v", log)
	}
	for _, path := range []string{"/events/not-a-uuid/deliveries", "/events/01900000-0000-7000-8000-000000000000/deliveries"} {
		if r := e.do(tenantA, "GET", path, "", ""); r.status != http.StatusNotFound {
			t.Errorf("GET %s: %v", path, r)
		}
	}
}

// POST /events/{eventId}/resend (idempotent) sends the event again, now, to
// every endpoint that takes it, or to the one named; the delivery log shows
// both attempts.
func TestResend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	one := e.hook(tenantA, "/one")
	e.hook(tenantA, "/two")
	e.hook(tenantA, "/created-only", "payment.created")
	ev := e.record("tenant_a", succeeded)
	w := e.worker(delivery.Config{})
	e.runOnce(w)

	r := e.do(tenantA, "POST", "/events/"+ev+"/resend", "resend-1", "")
	if r.status != http.StatusAccepted {
		t.Fatalf("resend: %v", r)
	}
	v := r.json(t)
	if ids, _ := v["endpointIds"].([]any); len(ids) != 2 || v["eventId"] != ev || !strings.HasPrefix(v["resendId"].(string), "evr_") {
		t.Errorf("resend: %v", r)
	}
	if replay := e.do(tenantA, "POST", "/events/"+ev+"/resend", "resend-1", ""); !bytes.Equal(replay.body, r.body) ||
		replay.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %v", replay)
	}
	if n := e.runOnce(w); n != 2 {
		t.Fatalf("after the resend, claimed %d, want 2", n)
	}
	named := e.do(tenantA, "POST", "/events/"+ev+"/resend", "resend-2", jsonBody(map[string]string{"endpointId": one.id}))
	if named.status != http.StatusAccepted {
		t.Fatalf("resend to one: %v", named)
	}
	if n := e.runOnce(w); n != 1 {
		t.Fatalf("after the resend to one, claimed %d, want 1", n)
	}
	if got := e.recv.ids("/one"); len(got) != 3 || got[0] != ev || got[2] != ev {
		t.Errorf("/one got %v, want the event 3 times, with its own id", got)
	}
	if got := e.recv.ids("/two"); len(got) != 2 {
		t.Errorf("/two got %v, want the event twice", got)
	}
	if got := e.recv.ids("/created-only"); len(got) != 0 {
		t.Errorf("an endpoint that does not take the type got %v", got)
	}
	if log := e.deliveries(tenantA, ev); len(log) != 5 {
		t.Errorf("delivery log: %v, want 5 attempts", log)
	}
	if r := e.do(tenantA, "POST", "/events/"+ev+"/resend", "resend-nul", `{"endpointId":"we_\u0000"}`); r.status != http.StatusBadRequest {
		t.Errorf("an endpointId PostgreSQL cannot hold: %v", r)
	}
	for _, tc := range []struct{ key, body string }{
		{"resend-none", jsonBody(map[string]string{"endpointId": "we_nope"})},
		{"resend-unknown-event", ""},
	} {
		path := "/events/" + ev + "/resend"
		if tc.key == "resend-unknown-event" {
			path = "/events/01900000-0000-7000-8000-000000000000/resend"
		}
		if r := e.do(tenantA, "POST", path, tc.key, tc.body); r.status != http.StatusNotFound {
			t.Errorf("%s: %v", tc.key, r)
		}
	}
}
