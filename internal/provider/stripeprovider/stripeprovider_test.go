package stripeprovider_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
	"github.com/paymentsapi/paymentsapi/internal/provider/stripeprovider"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

const testKey = "paymentsapi:pay_1"

// chargeReq is the charge request of these tests.
func chargeReq() provider.ChargeRequest {
	return providertest.ChargeRequest(testKey, "pm_card_visa")
}

// request is what the fake Stripe received.
type request struct {
	Method string
	Path   string
	Query  url.Values
	Form   url.Values
	Header http.Header
}

// fakeStripe is an httptest server that answers like Stripe would, through
// per-endpoint handlers, and records every request.
type fakeStripe struct {
	Create, List              http.HandlerFunc
	CreateRefund, ListRefunds http.HandlerFunc
	Capture, Cancel, Get      http.HandlerFunc // of /v1/payment_intents/{id}

	mu   sync.Mutex
	reqs []request
	logs *testio.SyncBuffer
	srv  *httptest.Server
}

func newFake(t *testing.T) *fakeStripe {
	t.Helper()
	f := &fakeStripe{logs: &testio.SyncBuffer{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	form, _ := url.ParseQuery(string(body))
	f.mu.Lock()
	f.reqs = append(f.reqs, request{r.Method, r.URL.Path, r.URL.Query(), form, r.Header.Clone()})
	f.mu.Unlock()
	var h http.HandlerFunc
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents":
		h = f.Create
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents":
		h = f.List
	case r.Method == http.MethodPost && r.URL.Path == "/v1/refunds":
		h = f.CreateRefund
	case r.Method == http.MethodGet && r.URL.Path == "/v1/refunds":
		h = f.ListRefunds
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/payment_intents/") && strings.HasSuffix(r.URL.Path, "/capture"):
		h = f.Capture
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/payment_intents/") && strings.HasSuffix(r.URL.Path, "/cancel"):
		h = f.Cancel
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/payment_intents/"):
		h = f.Get
	}
	if h == nil {
		writeJSON(w, http.StatusNotFound, stripeError("invalid_request_error", "resource_missing", "", "no handler for "+r.Method+" "+r.URL.Path))
		return
	}
	h(w, r)
}

// answerCreates answers every request that creates or moves money (Charge,
// Refund, Capture and Void) with h.
func (f *fakeStripe) answerCreates(h http.HandlerFunc) {
	f.Create, f.CreateRefund, f.Capture, f.Cancel = h, h, h, h
}

func (f *fakeStripe) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}

// provider returns a Provider for the fake.
func (f *fakeStripe) provider(t *testing.T) *stripeprovider.Provider {
	t.Helper()
	p, err := stripeprovider.New(stripeprovider.Config{
		APIKey:     "sk_test_fake",
		BaseURL:    f.srv.URL,
		HTTPClient: f.srv.Client(),
		Logger:     slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_fake")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func stripeError(typ, code, declineCode, msg string) map[string]any {
	e := map[string]any{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	if declineCode != "" {
		e["decline_code"] = declineCode
	}
	return map[string]any{"error": e}
}

// intent is a PaymentIntent as Stripe renders it: made with automatic
// capture, all of it received once succeeded.
func intent(id, status, key string) map[string]any {
	received := 0
	if status == "succeeded" {
		received = 1000
	}
	return map[string]any{
		"id":              id,
		"object":          "payment_intent",
		"amount":          1000,
		"amount_received": received,
		"capture_method":  "automatic",
		"currency":        "eur",
		"status":          status,
		"client_secret":   id + "_secret_s3cr3tv4lu3",
		"metadata":        map[string]string{"idempotency_key": key, "payment_id": "pay_1"},
	}
}

// manualIntent is intent made with capture_method=manual, amountReceived
// of it received.
func manualIntent(id, status, key string, amountReceived int64) map[string]any {
	pi := intent(id, status, key)
	pi["capture_method"], pi["amount_received"] = "manual", amountReceived
	return pi
}

func withLastPaymentError(pi map[string]any, code, declineCode string) map[string]any {
	e := map[string]any{"type": "card_error", "message": "Your card was declined."}
	if code != "" {
		e["code"] = code
	}
	if declineCode != "" {
		e["decline_code"] = declineCode
	}
	pi["last_payment_error"] = e
	return pi
}

// intentList is one page of PaymentIntents as Stripe lists them.
func intentList(hasMore bool, intents ...map[string]any) map[string]any {
	data := make([]map[string]any, 0, len(intents))
	data = append(data, intents...)
	return map[string]any{"object": "list", "data": data, "has_more": hasMore, "url": "/v1/payment_intents"}
}

func answer(status int, v any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { writeJSON(w, status, v) }
}

func answerRaw(status int, contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	if _, err := stripeprovider.New(stripeprovider.Config{}); err == nil {
		t.Error("New without an API key succeeded")
	}
	for _, base := range []string{"127.0.0.1:12111", "ftp://example.test", "http://", "http://[::1"} {
		if _, err := stripeprovider.New(stripeprovider.Config{APIKey: "sk_test_x", BaseURL: base}); err == nil {
			t.Errorf("New with base URL %q succeeded", base)
		}
	}
	tr := &http.Transport{}
	hc := &http.Client{Transport: tr}
	if _, err := stripeprovider.New(stripeprovider.Config{APIKey: "sk_test_x", HTTPClient: hc}); err != nil {
		t.Fatal(err)
	}
	if hc.Transport != tr {
		t.Error("New changed the caller's http.Client")
	}
}

func TestChargeSucceededAndWireFormat(t *testing.T) {
	f := newFake(t)
	f.Create = answer(http.StatusOK, intent("pi_ok", "succeeded", testKey))
	got, err := f.provider(t).Charge(providertest.Context(t, 5*time.Second), chargeReq())
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	want := provider.Charge{ID: "pi_ok", IdempotencyKey: testKey, Status: provider.StatusSucceeded, AmountMinor: 1000, Currency: "EUR", AmountCapturedMinor: 1000}
	if got != want {
		t.Errorf("Charge = %+v, want %+v", got, want)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if h := r.Header.Get("Idempotency-Key"); h != testKey {
		t.Errorf("Idempotency-Key = %q, want %q", h, testKey)
	}
	if h := r.Header.Get("Authorization"); h != "Bearer sk_test_fake" {
		t.Errorf("Authorization = %q", h)
	}
	wantForm := url.Values{
		"amount":                             {"1000"},
		"currency":                           {"eur"},
		"payment_method":                     {"pm_card_visa"},
		"confirm":                            {"true"},
		"automatic_payment_methods[enabled]": {"true"},
		"automatic_payment_methods[allow_redirects]": {"never"},
		"description":               {"order 7"},
		"metadata[idempotency_key]": {testKey},
		"metadata[payment_id]":      {"pay_1"},
	}
	if fmt.Sprint(r.Form) != fmt.Sprint(wantForm) {
		t.Errorf("form = %v\nwant   %v", r.Form, wantForm)
	}
}

func TestChargeDeclines(t *testing.T) {
	declinedIntent := withLastPaymentError(intent("pi_402", "requires_payment_method", testKey), "card_declined", "insufficient_funds")
	cardError := stripeError("card_error", "card_declined", "insufficient_funds", "Your card has insufficient funds.")
	cardError["error"].(map[string]any)["payment_intent"] = declinedIntent
	for name, tc := range map[string]struct {
		h    http.HandlerFunc
		want provider.Charge
	}{
		"402 card_error with decline_code and intent": {
			answer(http.StatusPaymentRequired, cardError),
			provider.Charge{ID: "pi_402", DeclineCode: "insufficient_funds"},
		},
		"402 card_error with a code only": {
			answer(http.StatusPaymentRequired, stripeError("card_error", "expired_card", "", "Your card has expired.")),
			provider.Charge{DeclineCode: "expired_card"},
		},
		"200 requires_payment_method after a failed attempt": {
			answer(http.StatusOK, withLastPaymentError(intent("pi_rpm", "requires_payment_method", testKey), "card_declined", "generic_decline")),
			provider.Charge{ID: "pi_rpm", DeclineCode: "generic_decline"},
		},
		"200 requires_payment_method, failed attempt without codes": {
			answer(http.StatusOK, withLastPaymentError(intent("pi_rpm", "requires_payment_method", testKey), "", "")),
			provider.Charge{ID: "pi_rpm", DeclineCode: "payment_intent_payment_attempt_failed"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.Create = tc.h
			got, err := f.provider(t).Charge(providertest.Context(t, 5*time.Second), chargeReq())
			if err != nil {
				t.Fatalf("a decline is not an error: %v", err)
			}
			want := tc.want
			want.IdempotencyKey, want.Status, want.AmountMinor, want.Currency = testKey, provider.StatusDeclined, 1000, "EUR"
			if got != want {
				t.Errorf("Charge = %+v, want %+v", got, want)
			}
		})
	}
}

func TestChargeIntermediateStatusesAreUnknownOutcome(t *testing.T) {
	for _, status := range []string{"processing", "requires_confirmation", "requires_payment_method", "some_future_status"} {
		t.Run(status, func(t *testing.T) {
			f := newFake(t)
			f.Create = answer(http.StatusOK, intent("pi_1", status, testKey))
			_, err := f.provider(t).Charge(providertest.Context(t, 5*time.Second), chargeReq())
			providertest.WantOnly(t, "Charge", err, provider.ErrUnknownOutcome)
			if !strings.Contains(err.Error(), status) {
				t.Errorf("err = %v, want it to name the status", err)
			}
		})
	}
}

func TestChargeErrorAnswers(t *testing.T) {
	for name, tc := range map[string]struct {
		h          http.HandlerFunc
		want       error // sentinel; nil: none
		wantStatus int   // the *APIError's status; 0: no *APIError expected
		wantType   string
	}{
		"429 rate limited": {
			answer(http.StatusTooManyRequests, stripeError("invalid_request_error", "rate_limit", "", "Too many requests")),
			provider.ErrUnavailable, 429, "invalid_request_error",
		},
		"429 lock_timeout (stripe-go would retry it)": {
			answer(http.StatusTooManyRequests, stripeError("invalid_request_error", "lock_timeout", "", "lock timeout")),
			provider.ErrUnavailable, 429, "invalid_request_error",
		},
		"429 not JSON": {
			answerRaw(http.StatusTooManyRequests, "text/plain", "slow down"),
			provider.ErrUnavailable, 429, "",
		},
		"500 api_error": {
			answer(http.StatusInternalServerError, stripeError("api_error", "", "", "Something went wrong")),
			provider.ErrUnknownOutcome, 500, "api_error",
		},
		"503 with Stripe-Should-Retry (stripe-go would retry it)": {
			func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Stripe-Should-Retry", "true")
				writeJSON(w, http.StatusServiceUnavailable, stripeError("api_error", "", "", "unavailable"))
			},
			provider.ErrUnknownOutcome, 503, "api_error",
		},
		"502 HTML from a proxy": {
			answerRaw(http.StatusBadGateway, "text/html", "<html>bad gateway</html>"),
			provider.ErrUnknownOutcome, 502, "",
		},
		"504 empty": {
			answerRaw(http.StatusGatewayTimeout, "text/plain", ""),
			provider.ErrUnknownOutcome, 504, "",
		},
		"409 idempotency_key_in_use (stripe-go would retry it)": {
			answer(http.StatusConflict, stripeError("idempotency_error", "idempotency_key_in_use", "", "There is currently another in-progress request using this Idempotent Key")),
			provider.ErrUnknownOutcome, 409, "idempotency_error",
		},
		"400 idempotency_error: key reused with other parameters": {
			answer(http.StatusBadRequest, stripeError("idempotency_error", "", "", "Keys for idempotent requests can only be used with the same parameters they were first used with.")),
			nil, 400, "idempotency_error",
		},
		"400 invalid_request_error": {
			answer(http.StatusBadRequest, stripeError("invalid_request_error", "parameter_missing", "", "Missing required param: currency.")),
			nil, 400, "invalid_request_error",
		},
		"401 authentication": {
			answer(http.StatusUnauthorized, stripeError("invalid_request_error", "", "", "Invalid API Key provided")),
			nil, 401, "invalid_request_error",
		},
		"404 HTML from a wrong base URL": {
			answerRaw(http.StatusNotFound, "text/html", "<html>not found</html>"),
			nil, 404, "",
		},
		"200 not JSON": {
			answerRaw(http.StatusOK, "text/html", "<html>ok</html>"),
			provider.ErrUnknownOutcome, 0, "",
		},
		"200 truncated JSON": {
			answerRaw(http.StatusOK, "application/json", `{"id":"pi_1","object":"payment_intent","status":"succ`),
			provider.ErrUnknownOutcome, 0, "",
		},
		"200 without an id": {
			answer(http.StatusOK, map[string]any{"status": "succeeded"}),
			provider.ErrUnknownOutcome, 0, "",
		},
	} {
		t.Run(name, func(t *testing.T) {
			for _, call := range creates(t, func(f *fakeStripe) { f.answerCreates(tc.h) }) {
				err := call.Do(providertest.Context(t, 5*time.Second))
				providertest.WantOnly(t, call.Name, err, tc.want)
				var apiErr *stripeprovider.APIError
				switch {
				case tc.wantStatus == 0 && errors.As(err, &apiErr):
					t.Errorf("%s: err = %v carries an *APIError, want none", call.Name, err)
				case tc.wantStatus != 0 && (!errors.As(err, &apiErr) || apiErr.StatusCode != tc.wantStatus || apiErr.Type != tc.wantType):
					t.Errorf("%s: err = %v, want an *APIError with status %d and type %q", call.Name, err, tc.wantStatus, tc.wantType)
				}
				var se *stripe.Error
				if tc.wantType != "" && (!errors.As(err, &se) || string(se.Type) != tc.wantType) {
					t.Errorf("%s: err = %v, want the *stripe.Error reachable with errors.As", call.Name, err)
				}
				if n := len(call.fake.requests()); n != 1 {
					t.Errorf("%s: %d requests, want exactly 1 (no retries)", call.Name, n)
				}
			}
		})
	}
}

func TestCreateHangingProviderHitsTheDeadline(t *testing.T) {
	hang := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	for _, call := range creates(t, func(f *fakeStripe) { f.answerCreates(hang) }) {
		start := time.Now()
		err := call.Do(providertest.Context(t, 100*time.Millisecond))
		providertest.WantOnly(t, call.Name, err, provider.ErrUnknownOutcome)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: err = %v, want context.DeadlineExceeded kept", call.Name, err)
		}
		if elapsed := time.Since(start); elapsed > 2*time.Second {
			t.Errorf("%s took %v; it must honour the context deadline", call.Name, elapsed)
		}
		if n := len(call.fake.requests()); n != 1 {
			t.Errorf("%s: %d requests, want 1", call.Name, n)
		}
	}
}

func TestClosedPortIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p, err := stripeprovider.New(stripeprovider.Config{APIKey: "sk_test_x", BaseURL: "http://" + addr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range providertest.Calls(p, testKey, "pi_1") {
		err := call.Do(providertest.Context(t, 5*time.Second))
		providertest.WantOnly(t, call.Name, err, provider.ErrUnavailable)
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			t.Errorf("%s: err = %v, want the dial error kept", call.Name, err)
		}
	}
}

func TestContextDoneBeforeTheCallIsUnavailable(t *testing.T) {
	f := newFake(t)
	f.Create = answer(http.StatusOK, intent("pi_ok", "succeeded", testKey))
	p := f.provider(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, call := range providertest.Calls(p, testKey, "pi_1") {
		err := call.Do(ctx)
		providertest.WantOnly(t, call.Name, err, provider.ErrUnavailable)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: err = %v, want context.Canceled kept", call.Name, err)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests, want none", n)
	}
}

// hijack takes the connection of a request away from the server.
func hijack(t *testing.T, w http.ResponseWriter) net.Conn {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return nil
	}
	return conn
}

// createCall is a create (Charge, Refund, Capture or Void) against a fake
// of its own.
type createCall struct {
	providertest.Call
	fake *fakeStripe
}

// creates returns Charge, Refund, Capture and Void, each against a new fake
// set up by setup.
func creates(t *testing.T, setup func(*fakeStripe)) []createCall {
	t.Helper()
	var out []createCall
	for _, name := range []string{"Charge", "Refund", "Capture", "Void"} {
		f := newFake(t)
		setup(f)
		for _, call := range providertest.Calls(f.provider(t), testKey, "pi_1") {
			if call.Name == name {
				out = append(out, createCall{call, f})
			}
		}
	}
	return out
}

func TestCreateResetAfterRequestIsUnknownOutcome(t *testing.T) {
	reset := func(w http.ResponseWriter, r *http.Request) { providertest.HangUp(t, w, true) }
	for _, call := range creates(t, func(f *fakeStripe) { f.answerCreates(reset) }) {
		providertest.WantOnly(t, call.Name, call.Do(providertest.Context(t, 5*time.Second)), provider.ErrUnknownOutcome)
		if n := len(call.fake.requests()); n != 1 {
			t.Errorf("%s: %d requests, want 1", call.Name, n)
		}
	}
}

func TestAnswerCutShort(t *testing.T) {
	cut := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if conn := hijack(t, w); conn != nil {
				fmt.Fprintf(conn, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"id\":\"pi_1\",", status, http.StatusText(status))
				conn.Close()
			}
		}
	}
	for _, tc := range []struct {
		status int
		want   error
	}{
		{http.StatusOK, provider.ErrUnknownOutcome},
		{http.StatusPaymentRequired, provider.ErrUnknownOutcome}, // a decline or a rejection: cannot tell
		{http.StatusInternalServerError, provider.ErrUnknownOutcome},
		{http.StatusTooManyRequests, provider.ErrUnavailable},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			for _, call := range creates(t, func(f *fakeStripe) { f.answerCreates(cut(tc.status)) }) {
				err := call.Do(providertest.Context(t, 5*time.Second))
				providertest.WantOnly(t, call.Name, err, tc.want)
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("%s: err = %v, want the body's io.ErrUnexpectedEOF kept", call.Name, err)
				}
			}
		})
	}
}

// TestRedialAfterStaleKeepAliveIsUnknownOutcome covers net/http resending a
// request that carries an Idempotency-Key: the first copy reaches the
// server on a reused connection, which then closes, and the resend's dial is
// refused. A dial error alone would read as "never sent".
func TestRedialAfterStaleKeepAliveIsUnknownOutcome(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := ln.Accept()
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		// First request (a listing): answer it and keep the connection.
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Errorf("read first request: %v", err)
			return
		}
		got <- req.Method + " " + req.URL.Path
		body, _ := json.Marshal(intentList(false))
		fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		// Second request (the charge): read it whole, then stop
		// listening and hang up without answering.
		req, err = http.ReadRequest(br)
		if err != nil {
			t.Errorf("read second request: %v", err)
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		got <- req.Method + " " + req.URL.Path
		ln.Close()
	}()
	t.Cleanup(func() { ln.Close(); <-done })

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	p, err := stripeprovider.New(stripeprovider.Config{
		APIKey: "sk_test_x", BaseURL: "http://" + ln.Addr().String(),
		HTTPClient: &http.Client{Transport: tr}, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Lookup(providertest.Context(t, 5*time.Second), providertest.ChargeLookup(testKey))
	providertest.WantOnly(t, "Lookup", err, provider.ErrNotFound)

	_, err = p.Charge(providertest.Context(t, 5*time.Second), chargeReq())
	providertest.WantOnly(t, "Charge", err, provider.ErrUnknownOutcome)
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("err = %v, want a dial error (the transport's resend), or the test did not set up its case", err)
	}
	<-done
	close(got)
	var seen []string
	for s := range got {
		seen = append(seen, s)
	}
	if want := "GET /v1/payment_intents,POST /v1/payment_intents"; strings.Join(seen, ",") != want {
		t.Errorf("server saw %v, want %s", seen, want)
	}
}

func TestInvalidRequestsAreNotSent(t *testing.T) {
	f := newFake(t)
	f.Create = answer(http.StatusOK, intent("pi_ok", "succeeded", testKey))
	p := f.provider(t)
	ctx := providertest.Context(t, 5*time.Second)
	for name, mutate := range map[string]func(*provider.ChargeRequest){
		"no key":            func(r *provider.ChargeRequest) { r.IdempotencyKey = "" },
		"key too long":      func(r *provider.ChargeRequest) { r.IdempotencyKey = strings.Repeat("k", 256) },
		"key with spaces":   func(r *provider.ChargeRequest) { r.IdempotencyKey = " k " },
		"zero amount":       func(r *provider.ChargeRequest) { r.AmountMinor = 0 },
		"bad currency":      func(r *provider.ChargeRequest) { r.Currency = "EURO" },
		"no payment method": func(r *provider.ChargeRequest) { r.PaymentMethod = "" },
	} {
		req := chargeReq()
		mutate(&req)
		_, err := p.Charge(ctx, req)
		providertest.WantOnly(t, "Charge with "+name, err, nil)
	}
	for name, l := range map[string]provider.ChargeLookup{
		"no key":         {NotBefore: time.Now()},
		"key too long":   {IdempotencyKey: strings.Repeat("k", 256), NotBefore: time.Now()},
		"no NotBefore":   {IdempotencyKey: testKey},
		"NotBefore 1970": {IdempotencyKey: testKey, NotBefore: time.Unix(0, 0)},
	} {
		_, err := p.Lookup(ctx, l)
		providertest.WantOnly(t, "Lookup with "+name, err, nil)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests, want none", n)
	}
	// 255 bytes is Stripe's limit, and fine.
	req := chargeReq()
	req.IdempotencyKey = strings.Repeat("k", 255)
	if _, err := p.Charge(ctx, req); err != nil {
		t.Errorf("Charge with a 255-byte key: %v", err)
	}
}

func TestErrorsAndLogsHideClientSecrets(t *testing.T) {
	const secret = "s3cr3tv4lu3"
	withIntent := stripeError("invalid_request_error", "payment_intent_unexpected_state", "", "unexpected state")
	withIntent["error"].(map[string]any)["payment_intent"] = intent("pi_x", "requires_action", testKey)
	for name, h := range map[string]http.HandlerFunc{
		"error object with an intent": answer(http.StatusBadRequest, withIntent),
		"truncated success": answerRaw(http.StatusOK, "application/json",
			`{"id":"pi_x","client_secret":"pi_x_secret_`+secret+`","status":"succ`),
		"success that is no object": answerRaw(http.StatusOK, "application/json", `"pi_x_secret_`+secret+`"`),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.Create = h
			_, err := f.provider(t).Charge(providertest.Context(t, 5*time.Second), chargeReq())
			if err == nil {
				t.Fatal("nil error")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("err = %v shows the client secret", err)
			}
			if logs := f.logs.String(); strings.Contains(logs, secret) {
				t.Errorf("logs show the client secret:\n%s", logs)
			}
		})
	}
}

// TestRefusalOfAResendIsUnknownOutcome: net/http resends a POST that carries
// an Idempotency-Key on a new connection when the kept-alive one it used dies
// before answering. Stripe may have processed the first copy, so a 429 to the
// resend proves nothing.
func TestRefusalOfAResendIsUnknownOutcome(t *testing.T) {
	resender := providertest.NewResender(t, answer(http.StatusTooManyRequests, stripeError("invalid_request_error", "rate_limit", "", "Too many requests")))
	for _, call := range creates(t, func(f *fakeStripe) {
		f.List = answer(http.StatusOK, intentList(false)) // leaves a kept-alive connection
		f.answerCreates(resender.ServeHTTP)
	}) {
		ctx := providertest.Context(t, 5*time.Second)
		_, err := call.fake.provider(t).Lookup(ctx, providertest.ChargeLookup(testKey))
		providertest.WantOnly(t, "Lookup", err, provider.ErrNotFound)
		err = resender.Do(ctx, call.Call)
		providertest.WantOnly(t, call.Name, err, provider.ErrUnknownOutcome)
		var apiErr *stripeprovider.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
			t.Errorf("%s: err = %v, want the 429 kept", call.Name, err)
		}
	}
}
