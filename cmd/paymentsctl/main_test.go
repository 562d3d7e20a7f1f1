package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/apitest"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// result is what one run of paymentsctl did.
type result struct {
	code           int
	stdout, stderr string
}

// ctl runs paymentsctl with args and the environment env.
func ctl(ctx context.Context, env map[string]string, args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, func(k string) string { return env[k] }, &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// flags returns the global flags for s.
func flags(s *apitest.Server, args ...string) []string {
	return append([]string{"-url", s.URL, "-api-key", s.Secret}, args...)
}

func (r result) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\nstdout: %s\nstderr: %s", err, r.stdout, r.stderr)
	}
	return v
}

func (r result) want(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
}

func payArgs(reference, method string, extra ...string) []string {
	return append([]string{"pay", "-account", "acc_1", "-amount", "10.00", "-currency", "EUR", "-reference", reference, "-method", method}, extra...)
}

func TestPayGetList(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	ctx := context.Background()

	// The environment names the server; no -idempotency-key: one is
	// generated and printed on stderr.
	env := map[string]string{"PAYMENTS_URL": s.URL, "PAYMENTS_API_KEY": s.Secret}
	r := ctl(ctx, env, payArgs("inv-1", "pm_card_visa", "-description", "two books")...)
	r.want(t, 0)
	p := r.json(t)
	id, _ := p["paymentId"].(string)
	if p["status"] != "SUCCEEDED" || p["amount"] != "10.00" || p["description"] != "two books" || !strings.HasPrefix(id, "pay_") {
		t.Errorf("payment %v", p)
	}
	if !strings.HasPrefix(r.stderr, "idempotency-key: ") || len(strings.TrimSpace(strings.TrimPrefix(r.stderr, "idempotency-key: "))) != 36 {
		t.Errorf("stderr %q, want the generated key", r.stderr)
	}

	// The same command with a key of ours, twice: one payment, replayed.
	first := ctl(ctx, nil, flags(s, payArgs("inv-2", "pm_card_visa", "-idempotency-key", "order-2")...)...)
	first.want(t, 0)
	again := ctl(ctx, nil, flags(s, payArgs("inv-2", "pm_card_visa", "-idempotency-key", "order-2")...)...)
	again.want(t, 0)
	if first.stdout != again.stdout {
		t.Errorf("the same key answered two payments:\n%s\n%s", first.stdout, again.stdout)
	}
	if first.stderr != "" {
		t.Errorf("stderr %q with a key given, want nothing", first.stderr)
	}
	second, _ := first.json(t)["paymentId"].(string)
	if n := len(s.Charges(second)); n != 1 {
		t.Errorf("%d charges for the key order-2, want 1", n)
	}

	g := ctl(ctx, env, "get", id)
	g.want(t, 0)
	if got := g.json(t); got["paymentId"] != id || got["status"] != "SUCCEEDED" {
		t.Errorf("get: %v", got)
	}

	l := ctl(ctx, env, "list", "-account", "acc_1", "-limit", "1")
	l.want(t, 0)
	page := l.json(t)
	items, _ := page["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["paymentId"] != second || page["nextCursor"] == nil {
		t.Errorf("list -limit 1: %v, want the newest payment and a nextCursor", page)
	}
	all := ctl(ctx, env, "list")
	all.want(t, 0)
	if items, _ := all.json(t)["items"].([]any); len(items) != 2 {
		t.Errorf("list: %d payments, want 2", len(items))
	}

	nf := ctl(ctx, env, "get", "pay_unknown")
	nf.want(t, 1)
	if !strings.Contains(nf.stderr, "NOT_FOUND") || nf.stdout != "" {
		t.Errorf("get of an unknown payment: stdout %q, stderr %q", nf.stdout, nf.stderr)
	}
}

func TestDeclineExits2(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	r := ctl(context.Background(), nil, flags(s, payArgs("inv-1", "pm_card_chargeDeclined")...)...)
	r.want(t, 2)
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	for _, want := range []string{"PAYMENT_DECLINED: ", "declineCode: generic_decline", "paymentId: pay_"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}

func TestStillProcessingAfterTheLastAttemptExits3(t *testing.T) {
	t.Parallel()
	// The provider charges but its answer is lost: the API answers 202
	// after 300 ms and advises a retry in 5 s, later than this command's
	// deadline, so the 202 is the last answer.
	s := apitest.Start(t, apitest.Options{ProviderTimeout: 300 * time.Millisecond, RetryAfter: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r := ctl(ctx, nil, flags(s, payArgs("inv-1", "pm_sim_timeout_after_success", "-idempotency-key", "lost-1")...)...)
	r.want(t, 3)
	if p := r.json(t); p["status"] != "PROCESSING" {
		t.Errorf("payment %v, want PROCESSING", p)
	}
	if !strings.Contains(r.stderr, "still processing") || !strings.Contains(r.stderr, "-idempotency-key lost-1") {
		t.Errorf("stderr %q, want how to learn the outcome", r.stderr)
	}
	// The same command later learns the outcome: the provider is asked by
	// the payment's key, and nothing is charged twice.
	again := ctl(context.Background(), nil, flags(s, payArgs("inv-1", "pm_sim_timeout_after_success", "-idempotency-key", "lost-1")...)...)
	again.want(t, 0)
	p := again.json(t)
	if p["status"] != "SUCCEEDED" {
		t.Errorf("retry: %v, want SUCCEEDED", p)
	}
	if c := s.Charges(p["paymentId"].(string)); len(c) != 1 || c[0].RequestCount != 1 {
		t.Errorf("charges %+v, want one, requested once", c)
	}
}

func TestAnInvalidRequestExits1(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	r := ctl(context.Background(), nil, flags(s, "pay", "-account", "acc_1", "-amount", "10.001", "-currency", "EUR", "-reference", "inv-1", "-method", "pm_card_visa")...)
	r.want(t, 1)
	for _, want := range []string{"VALIDATION_FAILED: ", "amount: "} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if r.stdout != "" {
		t.Errorf("stdout %q", r.stdout)
	}
	unauthorized := ctl(context.Background(), nil, "-url", s.URL, "-api-key", "sk_wrong", "list")
	unauthorized.want(t, 1)
	if !strings.Contains(unauthorized.stderr, "UNAUTHORIZED") {
		t.Errorf("stderr %q, want UNAUTHORIZED", unauthorized.stderr)
	}
}

func TestUsageErrorsExit1(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"charge"}, {"get"}, {"get", "pay_1", "pay_2"}, {"list", "-limit", "x"}, {"-bogus", "list"}, {"refund", "-amount", "1.00"},
		{"capture"}, {"capture", "-amount", "1.00"}, {"capture", "pay_1", "pay_2"}, {"cancel"}, {"cancel", "pay_1", "-reason"}} {
		r := ctl(context.Background(), nil, args...)
		if r.code != 1 || !strings.Contains(r.stderr, "usage:") || r.stdout != "" {
			t.Errorf("paymentsctl %q: exit %d, stdout %q, stderr %q; want 1 and the usage", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := ctl(context.Background(), nil, "-h"); r.code != 0 || !strings.Contains(r.stderr, "usage:") {
		t.Errorf("-h: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestDefaultsAreTheEnvironmentThenTheDevServer(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		got []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"items":[]}`)
	}))
	defer srv.Close()
	ctl(context.Background(), map[string]string{"PAYMENTS_URL": srv.URL}, "list").want(t, 0)
	ctl(context.Background(), map[string]string{"PAYMENTS_URL": srv.URL, "PAYMENTS_API_KEY": "sk_env"}, "list").want(t, 0)
	ctl(context.Background(), map[string]string{"PAYMENTS_URL": "http://127.0.0.1:1", "PAYMENTS_API_KEY": "sk_env"}, "-url", srv.URL, "-api-key", "sk_flag", "list").want(t, 0)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"Bearer " + devAPIKey, "Bearer sk_env", "Bearer sk_flag"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Authorization %q, want %q", got, want)
	}
}

// TestRefund runs refund against a stand-in for the refund endpoint, which
// the server does not have yet; the client's side of refunds is tested in
// package client.
func TestRefund(t *testing.T) {
	t.Parallel()
	type seen struct{ path, key, body string }
	var (
		mu       sync.Mutex
		requests []seen
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		requests = append(requests, seen{r.URL.Path, r.Header.Get("Idempotency-Key"), string(b)})
		mu.Unlock()
		if strings.Contains(r.URL.Path, "pay_declines") {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(402)
			fmt.Fprint(w, `{"type":"https://paymentsapi.dev/problems/refund-declined","title":"Refund declined","status":402,"detail":"the provider declined the refund","code":"REFUND_DECLINED","refundId":"re_2"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", r.URL.Path+"/re_1")
		w.WriteHeader(201)
		fmt.Fprint(w, `{"refundId":"re_1","paymentId":"pay_1","amount":"3.00","currency":"EUR","reason":"duplicate","status":"SUCCEEDED","createdAt":"2026-01-16T09:00:00Z","updatedAt":"2026-01-16T09:00:01Z"}`)
	}))
	defer srv.Close()
	env := map[string]string{"PAYMENTS_URL": srv.URL}

	r := ctl(context.Background(), env, "refund", "pay_1", "-amount", "3.00", "-reason", "duplicate", "-idempotency-key", "refund-1")
	r.want(t, 0)
	if got := r.json(t); got["refundId"] != "re_1" || got["status"] != "SUCCEEDED" {
		t.Errorf("refund %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := (seen{"/payments/pay_1/refunds", "refund-1", `{"amount":"3.00","reason":"duplicate"}`}); len(requests) != 1 || requests[0] != want {
		t.Errorf("requests %+v, want %+v", requests, want)
	}

	mu.Unlock()
	d := ctl(context.Background(), env, "refund", "pay_declines", "-amount", "1.00")
	mu.Lock()
	d.want(t, 2)
	if !strings.Contains(d.stderr, "idempotency-key: ") || !strings.Contains(d.stderr, "REFUND_DECLINED: the provider declined the refund") || !strings.Contains(d.stderr, "refundId: re_2") {
		t.Errorf("stderr %q", d.stderr)
	}
	if last := requests[len(requests)-1]; last.body != `{"amount":"1.00"}` {
		t.Errorf("body %s, want no reason", last.body)
	}
}

// list takes the listing's filters as flags (statuses in any case, times
// as RFC 3339 or dates), one page from -cursor, or with -all every page
// as one list; a filter the server refuses is its problem on stderr.
func TestListFiltersAndPages(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	var ids []string
	for i, method := range []string{"pm_card_visa", "pm_card_chargeDeclined", "pm_card_visa", "pm_card_visa", "pm_card_chargeDeclined"} {
		r := ctl(ctx, nil, flags(s, payArgs(fmt.Sprintf("inv-%d", i), method, "-idempotency-key", fmt.Sprintf("k-%d", i))...)...)
		if r.code != 0 && r.code != 2 {
			r.want(t, 0)
		}
		page := ctl(ctx, nil, flags(s, "list", "-reference", fmt.Sprintf("inv-%d", i))...)
		page.want(t, 0)
		items, _ := page.json(t)["items"].([]any)
		if len(items) != 1 {
			t.Fatalf("list -reference inv-%d: %v", i, items)
		}
		ids = append([]string{items[0].(map[string]any)["paymentId"].(string)}, ids...) // newest first
	}
	listed := func(args ...string) ([]string, string) {
		t.Helper()
		r := ctl(ctx, nil, flags(s, append([]string{"list"}, args...)...)...)
		r.want(t, 0)
		page := r.json(t)
		var got []string
		items, _ := page["items"].([]any)
		for _, it := range items {
			got = append(got, it.(map[string]any)["paymentId"].(string))
		}
		next, _ := page["nextCursor"].(string)
		return got, next
	}
	if got, _ := listed("-status", "declined"); fmt.Sprint(got) != fmt.Sprint([]string{ids[0], ids[3]}) {
		t.Errorf("-status declined: %v, want %v", got, []string{ids[0], ids[3]})
	}
	if got, _ := listed("-status", "SUCCEEDED,DECLINED", "-from", "2000-01-01", "-to", "2999-01-01T00:00:00Z"); len(got) != 5 {
		t.Errorf("every status, every time: %v", got)
	}
	if got, _ := listed("-from", "2999-01-01"); len(got) != 0 {
		t.Errorf("-from the future: %v", got)
	}
	first, next := listed("-limit", "2")
	if len(first) != 2 || next == "" {
		t.Fatalf("-limit 2: %v %q", first, next)
	}
	if second, _ := listed("-limit", "2", "-cursor", next); fmt.Sprint(second) != fmt.Sprint(ids[2:4]) {
		t.Errorf("-cursor: %v, want %v", second, ids[2:4])
	}
	if all, next := listed("-limit", "2", "-all"); fmt.Sprint(all) != fmt.Sprint(ids) || next != "" {
		t.Errorf("-all: %v %q, want %v and no cursor", all, next, ids)
	}

	bad := ctl(ctx, nil, flags(s, "list", "-status", "EXPLODED")...)
	bad.want(t, 1)
	if !strings.Contains(bad.stderr, "VALIDATION_FAILED") || !strings.Contains(bad.stderr, "status: must be one of") {
		t.Errorf("an unknown status: %q", bad.stderr)
	}
	ctl(ctx, nil, flags(s, "list", "-from", "yesterday")...).want(t, 1)
}
