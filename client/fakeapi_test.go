package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/paymentsapi/paymentsapi/api"
)

// fakeAPI speaks the contract of payments (automatic capture only),
// refunds, and webhook endpoints and events (fakewebhooks_test.go) from
// memory, in EUR only, for the calls the real server cannot answer yet and
// for the package example. Every answer it gives is checked against
// api/openapi.yaml, so that the fake cannot drift from the contract.
type fakeAPI struct {
	*httptest.Server
	report func(format string, args ...any) // a conformance failure
	router routers.Router

	mu       sync.Mutex
	n        int // ids handed out
	payments map[string]*fakePayment
	answers  map[string]fakeAnswer // by operation and idempotency key
	hooks    fakeHooks             // webhook endpoints and events
	dropNext int                   // answers to lose after doing the work
	requests []*http.Request
}

type fakePayment struct {
	view    map[string]any
	method  string
	amount  int64 // cents
	refunds []map[string]any
}

// fakeAnswer is a stored answer and the command it answered.
type fakeAnswer struct {
	command string
	status  int
	header  http.Header
	body    []byte
}

const fakeSecret = "sk_test_demo"

// newFakeAPI starts a fakeAPI for t, stopped when t ends.
func newFakeAPI(t testing.TB) *fakeAPI {
	t.Helper()
	f, err := startFakeAPI(t.Errorf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// startFakeAPI starts a fakeAPI that calls report when one of its answers
// does not conform to the spec.
func startFakeAPI(report func(format string, args ...any)) (*fakeAPI, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, err
	}
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	f := &fakeAPI{report: report, router: router, payments: map[string]*fakePayment{}, answers: map[string]fakeAnswer{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	f.Config.SetKeepAlivesEnabled(false) // see newScripted
	return f, nil
}

// drop makes the fake do the work of the next n requests and then close
// the connection without answering, as a proxy that lost the answer would.
func (f *fakeAPI) drop(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropNext = n
}

func (f *fakeAPI) keys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for _, r := range f.requests {
		keys = append(keys, r.Header.Get("Idempotency-Key"))
	}
	return keys
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	f.mu.Lock()
	f.requests = append(f.requests, r.Clone(context.Background()))
	f.handle(rec, r, body)
	drop := f.dropNext > 0
	if drop {
		f.dropNext--
	}
	f.mu.Unlock()
	f.conform(r, body, rec)
	if drop {
		dropConnection(w, r)
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// conform fails the test if the answer is not one the spec documents.
func (f *fakeAPI) conform(r *http.Request, body []byte, rec *httptest.ResponseRecorder) {
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := f.router.FindRoute(req)
	if err != nil {
		f.report("fake API: %s %s is not in the spec: %v", r.Method, r.URL.Path, err)
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
		Body:    io.NopCloser(bytes.NewReader(rec.Body.Bytes())),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}); err != nil {
		f.report("fake API: its answer to %s %s does not conform to the spec: %v\n%s", r.Method, r.URL.Path, err, rec.Body.Bytes())
	}
}

var (
	refundsPath = regexp.MustCompile(`^/payments/([^/]+)/refunds$`)
	refundPath  = regexp.MustCompile(`^/payments/([^/]+)/refunds/([^/]+)$`)
	paymentPath = regexp.MustCompile(`^/payments/([^/]+)$`)
	amountRE    = regexp.MustCompile(`^([0-9]+)(?:\.([0-9]{1,2}))?$`)
)

// handle answers r; f.mu is held.
func (f *fakeAPI) handle(w http.ResponseWriter, r *http.Request, body []byte) {
	if r.Header.Get("Authorization") != "Bearer "+fakeSecret {
		fakeProblem(w, 401, "UNAUTHORIZED", "a valid Authorization Bearer secret is required", nil)
		return
	}
	path := r.URL.Path
	switch {
	case r.Method == "POST" && path == "/payments":
		f.idempotent(w, r, "create_payment", body, f.createPayment)
	case r.Method == "GET" && paymentPath.MatchString(path):
		p, ok := f.payments[paymentPath.FindStringSubmatch(path)[1]]
		if !ok {
			fakeProblem(w, 404, "NOT_FOUND", "no such payment", nil)
			return
		}
		fakeJSON(w, 200, p.view, nil)
	case r.Method == "POST" && refundsPath.MatchString(path):
		id := refundsPath.FindStringSubmatch(path)[1]
		f.idempotent(w, r, "create_refund", body, func(cmd map[string]any) (int, http.Header, any) { return f.createRefund(id, cmd) })
	case r.Method == "GET" && refundsPath.MatchString(path):
		p, ok := f.payments[refundsPath.FindStringSubmatch(path)[1]]
		if !ok {
			fakeProblem(w, 404, "NOT_FOUND", "no such payment", nil)
			return
		}
		fakeJSON(w, 200, map[string]any{"items": append([]map[string]any{}, p.refunds...)}, nil)
	case r.Method == "GET" && refundPath.MatchString(path):
		m := refundPath.FindStringSubmatch(path)
		if p, ok := f.payments[m[1]]; ok {
			for _, re := range p.refunds {
				if re["refundId"] == m[2] {
					fakeJSON(w, 200, re, nil)
					return
				}
			}
		}
		fakeProblem(w, 404, "NOT_FOUND", "no such refund", nil)
	default:
		if !f.handleHooks(w, r, body) {
			fakeProblem(w, 404, "NOT_FOUND", "no such route", nil)
		}
	}
}

// idempotent runs a create under the request's key: the stored answer for
// the same command, 422 for another one.
func (f *fakeAPI) idempotent(w http.ResponseWriter, r *http.Request, op string, body []byte, do func(cmd map[string]any) (int, http.Header, any)) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		fakeProblem(w, 400, "IDEMPOTENCY_KEY_MISSING", "the Idempotency-Key header is required", nil)
		return
	}
	cmd := map[string]any{} // no body: the optional body's empty command
	if err := json.Unmarshal(body, &cmd); len(body) > 0 && err != nil {
		fakeProblem(w, 400, "MALFORMED_JSON", "the request body is not a valid JSON object", nil)
		return
	}
	canonical, _ := json.Marshal(cmd) // sorted keys
	scope := op + " " + key
	if a, ok := f.answers[scope]; ok {
		if a.command != string(canonical) {
			fakeProblem(w, 422, "IDEMPOTENCY_KEY_REUSED", "this Idempotency-Key was already used for a different request", nil)
			return
		}
		for k, v := range a.header {
			w.Header()[k] = v
		}
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(a.status)
		_, _ = w.Write(a.body)
		return
	}
	status, header, v := do(cmd)
	rec := httptest.NewRecorder()
	if p, ok := v.(problemBody); ok {
		fakeProblem(rec, status, p.code, p.detail, p.extra)
	} else {
		fakeJSON(rec, status, v, header)
	}
	if (status >= 200 && status < 300) || status == 402 {
		stored := rec.Body.Bytes()
		// As the server: a secret is in the first answer only.
		if m, ok := v.(map[string]any); ok && m["secret"] != nil {
			withoutSecret := make(map[string]any, len(m))
			for k, x := range m {
				withoutSecret[k] = x
			}
			withoutSecret["secret"] = nil
			again := httptest.NewRecorder()
			fakeJSON(again, status, withoutSecret, header)
			stored = again.Body.Bytes()
		}
		f.answers[scope] = fakeAnswer{command: string(canonical), status: status, header: rec.Header().Clone(), body: stored}
	}
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.WriteHeader(status)
	_, _ = w.Write(rec.Body.Bytes())
}

type problemBody struct {
	code, detail string
	extra        map[string]any
}

func (f *fakeAPI) nextID(prefix string) string {
	f.n++
	return fmt.Sprintf("%s%06d", prefix, f.n)
}

func (f *fakeAPI) createPayment(cmd map[string]any) (int, http.Header, any) {
	amount, ok := cents(cmd["amount"])
	if !ok {
		return 400, nil, problemBody{"VALIDATION_FAILED", "invalid amount", map[string]any{"errors": []map[string]string{{"field": "amount", "message": "must be a decimal string"}}}}
	}
	id, now := f.nextID("pay_"), time.Date(2026, 1, 15, 10, 30, 0, 0, time.UTC).Format(time.RFC3339)
	method, _ := cmd["paymentMethod"].(string)
	view := map[string]any{
		"paymentId": id, "status": "SUCCEEDED", "accountId": cmd["accountId"], "amount": formatCents(amount), "currency": "EUR",
		"merchantReference": cmd["merchantReference"], "paymentMethod": method, "channel": "web", "description": "",
		"createdAt": now, "updatedAt": now, "refundedAmount": "0.00",
		"captureMethod": "automatic", "capturedAmount": formatCents(amount), // the fake captures at once
	}
	f.payments[id] = &fakePayment{view: view, method: method, amount: amount}
	f.recordEvent("payment.created", view)
	if method == "pm_card_chargeDeclined" {
		view["status"], view["declineCode"] = "DECLINED", "generic_decline"
		delete(view, "capturedAmount")
		f.recordEvent("payment.declined", view)
		return 402, nil, problemBody{"PAYMENT_DECLINED", "the provider declined the payment", map[string]any{"paymentId": id, "declineCode": "generic_decline"}}
	}
	f.recordEvent("payment.succeeded", view)
	return 201, http.Header{"Location": {"/payments/" + id}}, view
}

func (f *fakeAPI) createRefund(paymentID string, cmd map[string]any) (int, http.Header, any) {
	p, ok := f.payments[paymentID]
	if !ok {
		return 404, nil, problemBody{"NOT_FOUND", "no such payment", nil}
	}
	amount, ok := cents(cmd["amount"])
	if !ok {
		return 400, nil, problemBody{"VALIDATION_FAILED", "invalid amount", map[string]any{"errors": []map[string]string{{"field": "amount", "message": "must be a decimal string"}}}}
	}
	if p.view["status"] != "SUCCEEDED" {
		return 409, nil, problemBody{"PAYMENT_NOT_REFUNDABLE", "only a SUCCEEDED payment can be refunded", nil}
	}
	left := p.amount
	for _, re := range p.refunds {
		if re["status"] != "DECLINED" {
			c, _ := cents(re["amount"])
			left -= c
		}
	}
	if amount > left {
		return 409, nil, problemBody{"REFUND_EXCEEDS_REFUNDABLE", "the amount is more than what is left to refund",
			map[string]any{"refundableAmount": formatCents(left)}}
	}
	id, now := f.nextID("re_"), time.Date(2026, 1, 16, 9, 0, 0, 0, time.UTC).Format(time.RFC3339)
	re := map[string]any{"refundId": id, "paymentId": paymentID, "amount": formatCents(amount), "currency": "EUR",
		"status": "SUCCEEDED", "createdAt": now, "updatedAt": now}
	if reason, ok := cmd["reason"]; ok {
		re["reason"] = reason
	}
	p.refunds = append(p.refunds, re)
	if p.method == "pm_sim_refund_declined" {
		re["status"] = "DECLINED"
		return 402, nil, problemBody{"REFUND_DECLINED", "the provider declined the refund",
			map[string]any{"refundId": id, "paymentId": paymentID, "declineCode": "refund_declined"}}
	}
	refunded, _ := cents(p.view["refundedAmount"])
	p.view["refundedAmount"] = formatCents(refunded + amount)
	return 201, http.Header{"Location": {"/payments/" + paymentID + "/refunds/" + id}}, re
}

// cents reads a EUR decimal string; money is never a float.
func cents(v any) (int64, bool) {
	s, _ := v.(string)
	m := amountRE.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	units, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, false
	}
	frac, _ := strconv.ParseInt((m[2] + "00")[:2], 10, 64)
	return units*100 + frac, units*100+frac > 0
}

func formatCents(c int64) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }

func fakeJSON(w http.ResponseWriter, status int, v any, header http.Header) {
	for k, vs := range header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fakeProblem(w http.ResponseWriter, status int, code, detail string, extra map[string]any) {
	p := map[string]any{"type": "https://paymentsapi.dev/problems/" + strings.ToLower(strings.ReplaceAll(code, "_", "-")),
		"title": http.StatusText(status), "status": status, "detail": detail, "code": code}
	for k, v := range extra {
		p[k] = v
	}
	// As the server: every error answer says whether to retry it.
	retry := status >= 500 || status == http.StatusTooManyRequests || code == "IDEMPOTENCY_KEY_IN_USE"
	w.Header().Set("Payments-Should-Retry", strconv.FormatBool(retry))
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}
