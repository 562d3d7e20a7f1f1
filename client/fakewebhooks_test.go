package client_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// fakeHooks is the fake API's webhook endpoints and event log. Nothing is
// sent: each event gets one successful delivery attempt per subscribed
// endpoint on record, which is all the client reads.
type fakeHooks struct {
	endpoints []map[string]any // registration order; deleted ones removed
	events    []fakeEvent      // oldest first
}

type fakeEvent struct {
	view       map[string]any
	deliveries []map[string]any // newest first
}

var (
	endpointPath = regexp.MustCompile(`^/webhook-endpoints/([^/]+)$`)
	rotatePath   = regexp.MustCompile(`^/webhook-endpoints/([^/]+)/rotate-secret$`)
	revealPath   = regexp.MustCompile(`^/webhook-endpoints/([^/]+)/secret$`)
	eventPath    = regexp.MustCompile(`^/events/([^/]+)$`)
	deliveryPath = regexp.MustCompile(`^/events/([^/]+)/deliveries$`)
	resendPath   = regexp.MustCompile(`^/events/([^/]+)/resend$`)
)

// fakeEpoch is when the fake's events happen: a fixed time, so that the
// answers are the same on every run.
var fakeEpoch = time.Date(2026, 1, 15, 10, 30, 0, 0, time.UTC)

// handleHooks answers the webhook and event routes, and reports whether r
// was one of them; f.mu is held.
func (f *fakeAPI) handleHooks(w http.ResponseWriter, r *http.Request, body []byte) bool {
	path := r.URL.Path
	switch {
	case r.Method == "POST" && path == "/webhook-endpoints":
		f.idempotent(w, r, "create_webhook_endpoint", body, f.createEndpoint)
	case r.Method == "GET" && path == "/webhook-endpoints":
		items := []map[string]any{}
		for _, e := range slices.Backward(f.hooks.endpoints) {
			items = append(items, withoutSecret(e))
		}
		fakeJSON(w, 200, map[string]any{"items": items}, nil)
	case r.Method == "GET" && endpointPath.MatchString(path):
		if e := f.endpoint(endpointPath.FindStringSubmatch(path)[1]); e != nil {
			fakeJSON(w, 200, withoutSecret(e), nil)
			return true
		}
		fakeProblem(w, 404, "NOT_FOUND", "no such webhook endpoint", nil)
	case r.Method == "GET" && revealPath.MatchString(path):
		id := revealPath.FindStringSubmatch(path)[1]
		if e := f.endpoint(id); e != nil {
			fakeJSON(w, 200, map[string]any{"endpointId": id, "secret": e["secret"]}, nil)
			return true
		}
		fakeProblem(w, 404, "NOT_FOUND", "no such webhook endpoint", nil)
	case r.Method == "DELETE" && endpointPath.MatchString(path):
		id := endpointPath.FindStringSubmatch(path)[1]
		n := len(f.hooks.endpoints)
		f.hooks.endpoints = slices.DeleteFunc(f.hooks.endpoints, func(e map[string]any) bool { return e["endpointId"] == id })
		if len(f.hooks.endpoints) == n {
			fakeProblem(w, 404, "NOT_FOUND", "no such webhook endpoint", nil)
			return true
		}
		w.WriteHeader(http.StatusNoContent)
	case r.Method == "POST" && rotatePath.MatchString(path):
		id := rotatePath.FindStringSubmatch(path)[1]
		// The command is the endpoint, so that the same key for another
		// endpoint is another command.
		cmd := []byte(fmt.Sprintf(`{"endpointId":%q}`, id))
		f.idempotent(w, r, "rotate_webhook_secret", cmd, func(map[string]any) (int, http.Header, any) {
			e := f.endpoint(id)
			if e == nil {
				return 404, nil, problemBody{"NOT_FOUND", "no such webhook endpoint", nil}
			}
			e["secret"] = newFakeSecret()
			answer := map[string]any{"rotationId": f.nextID("wsr_")}
			for k, v := range e {
				answer[k] = v
			}
			return 200, http.Header{"Location": {"/webhook-endpoints/" + id}}, answer
		})
	case r.Method == "GET" && path == "/events":
		f.listEvents(w, r)
	case r.Method == "GET" && eventPath.MatchString(path):
		if e := f.event(eventPath.FindStringSubmatch(path)[1]); e != nil {
			fakeJSON(w, 200, e.view, nil)
			return true
		}
		fakeProblem(w, 404, "NOT_FOUND", "no such event", nil)
	case r.Method == "GET" && deliveryPath.MatchString(path):
		if e := f.event(deliveryPath.FindStringSubmatch(path)[1]); e != nil {
			fakeJSON(w, 200, map[string]any{"items": append([]map[string]any{}, e.deliveries...)}, nil)
			return true
		}
		fakeProblem(w, 404, "NOT_FOUND", "no such event", nil)
	case r.Method == "POST" && resendPath.MatchString(path):
		id := resendPath.FindStringSubmatch(path)[1]
		f.idempotent(w, r, "resend_event", body, func(cmd map[string]any) (int, http.Header, any) { return f.resend(id, cmd) })
	default:
		return false
	}
	return true
}

// createEndpoint registers the endpoint of cmd.
func (f *fakeAPI) createEndpoint(cmd map[string]any) (int, http.Header, any) {
	raw, _ := cmd["url"].(string)
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return 400, nil, problemBody{"VALIDATION_FAILED", "invalid url", map[string]any{"errors": []map[string]string{{"field": "url", "message": "must be an absolute http(s) URL"}}}}
	}
	// The fake's stand-in for the server's destination policy: one name
	// is "private".
	if u.Hostname() == "internal.example" {
		return 400, nil, problemBody{"WEBHOOK_URL_FORBIDDEN", `webhook destination forbidden: "internal.example" resolves to an address that is not public`, nil}
	}
	types, _ := cmd["eventTypes"].([]any) // nil (JSON null): every type
	description, _ := cmd["description"].(string)
	e := map[string]any{
		"endpointId": f.nextID("we_"), "url": raw, "eventTypes": types, "description": description,
		"status": "enabled", "secret": newFakeSecret(), "secretShownOnce": true, "createdAt": fakeEpoch.Format(time.RFC3339),
	}
	f.hooks.endpoints = append(f.hooks.endpoints, e)
	return 201, http.Header{"Location": {"/webhook-endpoints/" + e["endpointId"].(string)}}, e
}

func (f *fakeAPI) endpoint(id string) map[string]any {
	for _, e := range f.hooks.endpoints {
		if e["endpointId"] == id {
			return e
		}
	}
	return nil
}

func withoutSecret(e map[string]any) map[string]any {
	out := make(map[string]any, len(e))
	for k, v := range e {
		if k != "secret" && k != "secretShownOnce" {
			out[k] = v
		}
	}
	return out
}

// newFakeSecret returns a secret of the server's form.
func newFakeSecret() string {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// recordEvent logs an event of data (a copy: the resource changes later)
// and a delivery attempt to each endpoint subscribed to its type.
func (f *fakeAPI) recordEvent(typ string, data map[string]any) {
	snapshot := make(map[string]any, len(data))
	for k, v := range data {
		snapshot[k] = v
	}
	n := len(f.hooks.events)
	at := fakeEpoch.Add(time.Duration(n) * time.Second)
	e := fakeEvent{view: map[string]any{
		"eventId": fmt.Sprintf("019ac0b2-7f3e-7c1a-9d2b-%012d", n+1), "type": typ,
		"createdAt": at.Format(time.RFC3339), "data": snapshot,
	}}
	for _, ep := range f.hooks.endpoints {
		if subscribed(ep, typ) {
			e.deliveries = append(e.deliveries, fakeDelivery(ep["endpointId"].(string), at))
		}
	}
	f.hooks.events = append(f.hooks.events, e)
}

func subscribed(endpoint map[string]any, typ string) bool {
	types, _ := endpoint["eventTypes"].([]any)
	return endpoint["status"] == "enabled" && (len(types) == 0 || slices.Contains(types, any(typ)))
}

func fakeDelivery(endpointID string, at time.Time) map[string]any {
	return map[string]any{"endpointId": endpointID, "attemptedAt": at.Format(time.RFC3339), "statusCode": 200, "durationMs": 3,
		"error": nil, "nextAttemptAt": nil}
}

func (f *fakeAPI) event(id string) *fakeEvent {
	for i := range f.hooks.events {
		if f.hooks.events[i].view["eventId"] == id {
			return &f.hooks.events[i]
		}
	}
	return nil
}

// listEvents pages the events newest first; the cursor is the index of
// the next one.
func (f *fakeAPI) listEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, start := 20, len(f.hooks.events)-1
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			fakeProblem(w, 400, "VALIDATION_FAILED", "invalid limit", map[string]any{"errors": []map[string]string{{"field": "limit", "message": "must be an integer from 1 to 100"}}})
			return
		}
		limit = n
	}
	if s := q.Get("cursor"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n >= len(f.hooks.events) {
			fakeProblem(w, 400, "VALIDATION_FAILED", "invalid cursor", map[string]any{"errors": []map[string]string{{"field": "cursor", "message": "is not a cursor from this API"}}})
			return
		}
		start = n
	}
	page := map[string]any{}
	items := []map[string]any{}
	for i := start; i >= 0; i-- {
		e := f.hooks.events[i].view
		if typ := q.Get("type"); typ != "" && e["type"] != typ {
			continue
		}
		if len(items) == limit {
			page["nextCursor"] = strconv.Itoa(i)
			break
		}
		items = append(items, e)
	}
	page["items"] = items
	fakeJSON(w, 200, page, nil)
}

func (f *fakeAPI) resend(eventID string, cmd map[string]any) (int, http.Header, any) {
	e := f.event(eventID)
	if e == nil {
		return 404, nil, problemBody{"NOT_FOUND", "no such event", nil}
	}
	at := fakeEpoch.Add(time.Hour)
	ids := []string{}
	if id, ok := cmd["endpointId"].(string); ok {
		if f.endpoint(id) == nil {
			return 404, nil, problemBody{"NOT_FOUND", "no such webhook endpoint", nil}
		}
		ids = append(ids, id)
	} else {
		for _, ep := range f.hooks.endpoints {
			if subscribed(ep, e.view["type"].(string)) {
				ids = append(ids, ep["endpointId"].(string))
			}
		}
	}
	for _, id := range ids {
		e.deliveries = append([]map[string]any{fakeDelivery(id, at)}, e.deliveries...)
	}
	return 202, http.Header{"Location": {"/events/" + eventID + "/deliveries"}},
		map[string]any{"resendId": f.nextID("evr_"), "eventId": eventID, "endpointIds": ids}
}
