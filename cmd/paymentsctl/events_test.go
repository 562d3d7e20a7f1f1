package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/apitest"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
)

// field returns v[name] as a string ("" when absent or not a string).
func field(v map[string]any, name string) string {
	s, _ := v[name].(string)
	return s
}

// listedEvents runs `events list` with args and returns the events' ids
// and types, and the page's nextCursor.
func listedEvents(t *testing.T, s *apitest.Server, args ...string) (ids, types []string, next string) {
	t.Helper()
	r := ctl(context.Background(), nil, flags(s, append([]string{"events", "list"}, args...)...)...)
	r.want(t, 0)
	page := r.json(t)
	items, _ := page["items"].([]any)
	for _, it := range items {
		e := it.(map[string]any)
		ids, types = append(ids, field(e, "eventId")), append(types, field(e, "type"))
	}
	return ids, types, field(page, "nextCursor")
}

// events list takes the filters of GET /events and pages as list does;
// events get prints one event; events resend queues it again, once per
// key, to the endpoints that take it or to the one named.
func TestEventsListGetResend(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Webhooks: outbound.Policy{AllowHTTP: true, AllowPrivate: true}})
	ctx := context.Background()
	var payments []string
	for i, method := range []string{"pm_card_visa", "pm_card_chargeDeclined", "pm_card_visa"} {
		r := ctl(ctx, nil, flags(s, payArgs(fmt.Sprintf("inv-%d", i), method, "-idempotency-key", fmt.Sprintf("k-%d", i))...)...)
		if r.code != 0 && r.code != 2 {
			r.want(t, 0)
		}
		page := ctl(ctx, nil, flags(s, "list", "-reference", fmt.Sprintf("inv-%d", i))...)
		page.want(t, 0)
		items, _ := page.json(t)["items"].([]any)
		payments = append(payments, field(items[0].(map[string]any), "paymentId"))
	}

	all, _, next := listedEvents(t, s)
	if len(all) != 6 || next != "" {
		t.Fatalf("events list: %v %q, want the 6 events of 3 payments on one page", all, next)
	}
	mine, types, _ := listedEvents(t, s, "-payment", payments[0])
	if fmt.Sprint(types) != "[payment.succeeded payment.created]" || mine[0] != all[4] || mine[1] != all[5] {
		t.Errorf("-payment %s: %v %v, want its two events, newest first, the oldest of all %v", payments[0], mine, types, all)
	}
	declined, types, _ := listedEvents(t, s, "-type", "payment.declined")
	if len(declined) != 1 || types[0] != "payment.declined" {
		t.Fatalf("-type payment.declined: %v %v", declined, types)
	}
	if both, _, _ := listedEvents(t, s, "-type", "payment.declined, payment.succeeded"); len(both) != 3 {
		t.Errorf("-type declined and succeeded: %v, want 3", both)
	}
	if none, _, _ := listedEvents(t, s, "-from", "2999-01-01"); len(none) != 0 {
		t.Errorf("-from the future: %v", none)
	}
	if none, _, _ := listedEvents(t, s, "-after", "2999-01-01T00:00:00Z"); len(none) != 0 {
		t.Errorf("-after the future: %v", none)
	}
	first, _, next := listedEvents(t, s, "-limit", "2")
	if fmt.Sprint(first) != fmt.Sprint(all[:2]) || next == "" {
		t.Fatalf("-limit 2: %v %q, want %v and a cursor", first, next, all[:2])
	}
	if second, _, _ := listedEvents(t, s, "-limit", "2", "-cursor", next); fmt.Sprint(second) != fmt.Sprint(all[2:4]) {
		t.Errorf("-cursor: %v, want %v", second, all[2:4])
	}
	if every, _, next := listedEvents(t, s, "-limit", "2", "-all"); fmt.Sprint(every) != fmt.Sprint(all) || next != "" {
		t.Errorf("-all: %v %q, want %v and no cursor", every, next, all)
	}
	bad := ctl(ctx, nil, flags(s, "events", "list", "-type", "payment.refunded")...)
	bad.want(t, 1)
	if !strings.Contains(bad.stderr, "VALIDATION_FAILED") {
		t.Errorf("an unknown type: %q", bad.stderr)
	}

	g := ctl(ctx, nil, flags(s, "events", "get", declined[0])...)
	g.want(t, 0)
	e := g.json(t)
	data, _ := e["data"].(map[string]any)
	if field(e, "eventId") != declined[0] || field(e, "type") != "payment.declined" || field(data, "paymentId") != payments[1] || field(data, "status") != "DECLINED" {
		t.Errorf("events get: %v", e)
	}
	nf := ctl(ctx, nil, flags(s, "events", "get", "019ac0b2-7f3e-7c1a-9d2b-5e4f3a2b1c0d")...)
	nf.want(t, 1)
	if !strings.Contains(nf.stderr, "NOT_FOUND") || nf.stdout != "" {
		t.Errorf("events get of an unknown event: %q %q", nf.stdout, nf.stderr)
	}

	// Resends: an endpoint that takes payment.succeeded only.
	ep := ctl(ctx, nil, flags(s, "endpoints", "create", "-url", "http://127.0.0.1:9/hooks", "-events", "payment.succeeded", "-idempotency-key", "ep-1")...)
	ep.want(t, 0)
	endpointID := field(ep.json(t), "endpointId")
	resend := func(args ...string) (result, map[string]any) {
		t.Helper()
		r := ctl(ctx, nil, flags(s, append([]string{"events", "resend"}, args...)...)...)
		r.want(t, 0)
		return r, r.json(t)
	}
	r, receipt := resend(mine[0], "-idempotency-key", "resend-1")
	if fmt.Sprint(receipt["endpointIds"]) != "["+endpointID+"]" || field(receipt, "eventId") != mine[0] || !strings.HasPrefix(field(receipt, "resendId"), "evr_") || r.stderr != "" {
		t.Errorf("resend of a payment.succeeded: %v, stderr %q; want it queued for %s", receipt, r.stderr, endpointID)
	}
	if _, again := resend(mine[0], "-idempotency-key", "resend-1"); field(again, "resendId") != field(receipt, "resendId") {
		t.Errorf("the same resend again: %v, want the replay of %v", again, receipt)
	}
	r, receipt = resend(declined[0])
	if ids, _ := receipt["endpointIds"].([]any); len(ids) != 0 || !strings.HasPrefix(r.stderr, "idempotency-key: ") {
		t.Errorf("resend of a type no endpoint takes: %v, stderr %q; want no endpoint and the generated key", receipt, r.stderr)
	}
	if _, named := resend(declined[0], "-endpoint", endpointID); fmt.Sprint(named["endpointIds"]) != "["+endpointID+"]" {
		t.Errorf("resend -endpoint %s: %v, want that endpoint", endpointID, named)
	}
	unknown := ctl(ctx, nil, flags(s, "events", "resend", declined[0], "-endpoint", "we_nope")...)
	unknown.want(t, 1)
	if !strings.Contains(unknown.stderr, "NOT_FOUND") {
		t.Errorf("resend to an unknown endpoint: %q", unknown.stderr)
	}
}

// endpoints create prints the endpoint with its secret, once per key;
// list shows the endpoints without secrets; delete removes one.
func TestEndpointsListCreateDelete(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Webhooks: outbound.Policy{AllowHTTP: true, AllowPrivate: true}})
	ctx := context.Background()
	listed := func() []map[string]any {
		t.Helper()
		r := ctl(ctx, nil, flags(s, "endpoints", "list")...)
		r.want(t, 0)
		var out []map[string]any
		items, _ := r.json(t)["items"].([]any)
		for _, it := range items {
			out = append(out, it.(map[string]any))
		}
		return out
	}
	if got := listed(); len(got) != 0 {
		t.Fatalf("endpoints before any: %v", got)
	}

	args := []string{"endpoints", "create", "-url", "http://127.0.0.1:9/hooks", "-events", "payment.succeeded,refund.succeeded", "-description", "orders"}
	c := ctl(ctx, nil, flags(s, args...)...)
	c.want(t, 0)
	e := c.json(t)
	id, secret := field(e, "endpointId"), field(e, "secret")
	if !strings.HasPrefix(id, "we_") || !strings.HasPrefix(secret, "whsec_") || field(e, "url") != "http://127.0.0.1:9/hooks" ||
		field(e, "description") != "orders" || field(e, "status") != "enabled" || fmt.Sprint(e["eventTypes"]) != "[payment.succeeded refund.succeeded]" {
		t.Errorf("endpoints create: %v", e)
	}
	key, ok := strings.CutPrefix(strings.TrimSpace(c.stderr), "idempotency-key: ")
	if !ok || len(key) != 36 {
		t.Fatalf("stderr %q, want the generated key", c.stderr)
	}
	// The same command with its key: the same endpoint and secret, no
	// second endpoint.
	again := ctl(ctx, nil, flags(s, append(args, "-idempotency-key", key)...)...)
	again.want(t, 0)
	if a := again.json(t); field(a, "endpointId") != id || field(a, "secret") != secret {
		t.Errorf("the same create again: %v, want %s with its secret", a, id)
	}
	// Every type by default.
	other := ctl(ctx, nil, flags(s, "endpoints", "create", "-url", "http://127.0.0.1:9/all")...)
	other.want(t, 0)
	otherID := field(other.json(t), "endpointId")
	got := listed()
	if len(got) != 2 || field(got[0], "endpointId") != otherID || field(got[1], "endpointId") != id {
		t.Fatalf("endpoints list: %v, want %s then %s", got, otherID, id)
	}
	for _, g := range got {
		if _, shown := g["secret"]; shown {
			t.Errorf("endpoints list shows a secret: %v", g)
		}
		if _, shown := g["disabledAt"]; shown {
			t.Errorf("endpoints list shows disabledAt for an enabled endpoint: %v", g)
		}
	}
	if _, shown := e["disabledAt"]; shown {
		t.Errorf("endpoints create shows disabledAt for an enabled endpoint: %v", e)
	}

	refused := ctl(ctx, nil, flags(s, "endpoints", "create", "-url", "http://127.0.0.1:9/", "-events", "payment.refunded")...)
	refused.want(t, 1)
	if !strings.Contains(refused.stderr, "VALIDATION_FAILED") || !strings.Contains(refused.stderr, "eventTypes") || refused.stdout != "" {
		t.Errorf("an unknown type: %q %q", refused.stdout, refused.stderr)
	}

	d := ctl(ctx, nil, flags(s, "endpoints", "delete", id)...)
	d.want(t, 0)
	if d.stdout != "" || !strings.Contains(d.stderr, id) {
		t.Errorf("delete: stdout %q, stderr %q", d.stdout, d.stderr)
	}
	if got := listed(); len(got) != 1 || field(got[0], "endpointId") != otherID {
		t.Errorf("after the delete: %v, want %s only", got, otherID)
	}
	gone := ctl(ctx, nil, flags(s, "endpoints", "delete", id)...)
	gone.want(t, 1)
	if !strings.Contains(gone.stderr, "NOT_FOUND") {
		t.Errorf("delete again: %q", gone.stderr)
	}
}

func TestEventsAndEndpointsUsageErrorsExit1(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"events"}, {"events", "bogus"}, {"events", "get"}, {"events", "get", "a", "b"}, {"events", "resend"},
		{"events", "list", "x"}, {"events", "list", "-type", "payment.succeeded,"}, {"events", "list", "-from", "yesterday"},
		{"endpoints"}, {"endpoints", "remove"}, {"endpoints", "create"}, {"endpoints", "create", "-url", "https://x.example", "-events", ","},
		{"endpoints", "delete"}, {"endpoints", "list", "we_1"}} {
		r := ctl(context.Background(), map[string]string{"PAYMENTS_URL": "http://127.0.0.1:1"}, args...)
		if r.code != 1 || !strings.Contains(r.stderr, "usage:") || r.stdout != "" {
			t.Errorf("paymentsctl %q: exit %d, stdout %q, stderr %q; want 1 and the usage", args, r.code, r.stdout, r.stderr)
		}
	}
	for _, args := range [][]string{{"-h"}, {"events", "-h"}, {"endpoints", "-h"}} {
		r := ctl(context.Background(), nil, args...)
		if r.code != 0 || !strings.Contains(r.stderr, "paymentsctl events list") || !strings.Contains(r.stderr, "paymentsctl endpoints create") {
			t.Errorf("paymentsctl %q: exit %d, stderr %q; want 0 and a usage that lists events and endpoints", args, r.code, r.stderr)
		}
	}
}
