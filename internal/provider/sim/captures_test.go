package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
)

type captureParams struct {
	ChargeID    string `json:"chargeId,omitempty"`
	AmountMinor int64  `json:"amountMinor"`
	Currency    string `json:"currency"`
	PaymentID   string `json:"paymentId,omitempty"`
}

func cparams(chargeID string, amount int64) captureParams {
	return captureParams{ChargeID: chargeID, AmountMinor: amount, Currency: "EUR", PaymentID: "pay_1"}
}

type voidParams struct {
	ChargeID  string `json:"chargeId,omitempty"`
	Reason    string `json:"reason,omitempty"`
	PaymentID string `json:"paymentId,omitempty"`
}

func vparams(chargeID string) voidParams {
	return voidParams{ChargeID: chargeID, Reason: "requested_by_customer", PaymentID: "pay_1"}
}

func captureReq(t *testing.T, base, key string, p any) *http.Request {
	t.Helper()
	return postReq(t, base+"/v1/captures", key, p)
}

func capture(t *testing.T, base, key string, p any) response {
	t.Helper()
	r, err := do(context.Background(), nil, captureReq(t, base, key, p))
	if err != nil {
		t.Fatalf("capture %q: %v", key, err)
	}
	return r
}

func void(t *testing.T, base, key string, p any) response {
	t.Helper()
	r, err := do(context.Background(), nil, postReq(t, base+"/v1/voids", key, p))
	if err != nil {
		t.Fatalf("void %q: %v", key, err)
	}
	return r
}

// authorized creates a 10.00 EUR charge with captureMethod manual and method
// under key, fails the test unless it is authorized, and returns its id.
func authorized(t *testing.T, base, key, method string) string {
	t.Helper()
	p := params(method)
	p.CaptureMethod = sim.CaptureManual
	r := create(t, base, key, p)
	if r.status != http.StatusOK || r.charge.Status != provider.StatusAuthorized {
		t.Fatalf("authorize %q: %d %s, want 200 requires_capture", key, r.status, r.raw)
	}
	return r.charge.ID
}

// getCharge reads the charge with id as it stands.
func getCharge(t *testing.T, base, id string) response {
	t.Helper()
	return get(t, base+"/v1/charges/"+url.PathEscape(id))
}

// wantCharge fails unless the charge id stands at status with captured
// minor units captured.
func wantCharge(t *testing.T, base, id string, status provider.Status, captured int64) sim.ChargeRecord {
	t.Helper()
	r := getCharge(t, base, id)
	if r.status != http.StatusOK || r.charge.ID != id || r.charge.Status != status || r.charge.AmountCapturedMinor != captured {
		t.Fatalf("GET charge %s = %d %s, want %s with %d captured", id, r.status, r.raw, status, captured)
	}
	return r.charge
}

// wantCapture fails unless r is a 200 capture with status and declineCode.
func wantCapture(t *testing.T, what string, r response, status provider.Status, declineCode string) {
	t.Helper()
	if r.status != http.StatusOK || r.capture.Status != status || r.capture.DeclineCode != declineCode {
		t.Fatalf("%s = %d %s, want 200 %s %q", what, r.status, r.raw, status, declineCode)
	}
}

// wantVoid fails unless r is a 200 void with status and declineCode.
func wantVoid(t *testing.T, what string, r response, status provider.Status, declineCode string) {
	t.Helper()
	if r.status != http.StatusOK || r.void.Status != status || r.void.DeclineCode != declineCode {
		t.Fatalf("%s = %d %s, want 200 %s %q", what, r.status, r.raw, status, declineCode)
	}
}

func TestAuthorizeByPaymentMethod(t *testing.T) {
	for _, tt := range []struct {
		method      string
		status      provider.Status
		declineCode string
	}{
		{sim.MethodVisa, provider.StatusAuthorized, ""},
		{sim.MethodMastercard, provider.StatusAuthorized, ""},
		{sim.MethodSlow, provider.StatusAuthorized, ""},
		{sim.MethodLookupFlaky, provider.StatusAuthorized, ""},
		{sim.MethodRefundDeclined, provider.StatusAuthorized, ""},
		{sim.MethodCaptureDeclined, provider.StatusAuthorized, ""},
		{sim.MethodCaptureTimeoutAfterSuccess, provider.StatusAuthorized, ""},
		{sim.MethodChargeDeclined, provider.StatusDeclined, sim.DeclineGeneric},
		{"pm_card_amex_unknown", provider.StatusDeclined, sim.DeclineUnsupportedMethod},
	} {
		t.Run(tt.method, func(t *testing.T) {
			fc := clock.NewFake(t0)
			s, base := newServer(t, sim.Options{Clock: fc, SlowDelay: -1})
			p := params(tt.method)
			p.CaptureMethod = sim.CaptureManual
			r := create(t, base, "k", p)
			want := sim.ChargeRecord{
				ID: r.charge.ID, IdempotencyKey: "k", Status: tt.status, DeclineCode: tt.declineCode,
				AmountMinor: 1000, Amount: "10.00", Currency: "EUR", PaymentMethod: tt.method,
				Description: "order 7", PaymentID: "pay_1", CreatedAt: t0,
				CaptureMethod: sim.CaptureManual, AmountCapturedMinor: 0, AmountCaptured: "0.00", RequestCount: 1,
			}
			if r.status != http.StatusOK || r.charge != want {
				t.Errorf("authorize = %d %+v\nwant %+v", r.status, r.charge, want)
			}
			if got := s.Charges(); len(got) != 1 || got[0] != want {
				t.Errorf("Charges() = %+v, want [%+v]", got, want)
			}
			// The replay is the same command: captureMethod is part of it.
			if again := create(t, base, "k", p); again.charge.ID != r.charge.ID || again.charge.RequestCount != 2 {
				t.Errorf("replay = %d %s, want charge %s, requestCount 2", again.status, again.raw, r.charge.ID)
			}
		})
	}
	t.Run(sim.MethodUnavailable, func(t *testing.T) {
		s, base := newServer(t, sim.Options{})
		p := params(sim.MethodUnavailable)
		p.CaptureMethod = sim.CaptureManual
		if r := create(t, base, "k", p); r.status != http.StatusServiceUnavailable {
			t.Errorf("authorize = %d %s, want 503", r.status, r.raw)
		}
		if n := len(s.Charges()); n != 0 {
			t.Errorf("%d charges, want 0", n)
		}
	})
}

// An omitted captureMethod is automatic: the same command.
func TestCaptureMethodAutomaticIsTheDefault(t *testing.T) {
	_, base := newServer(t, sim.Options{})
	first := create(t, base, "k", params(sim.MethodVisa))
	p := params(sim.MethodVisa)
	p.CaptureMethod = sim.CaptureAutomatic
	again := create(t, base, "k", p)
	if again.status != http.StatusOK || again.charge.ID != first.charge.ID || again.charge.CaptureMethod != sim.CaptureAutomatic {
		t.Errorf("explicit automatic = %d %s, want the replay of %s", again.status, again.raw, first.charge.ID)
	}
}

func TestCaptureWholeAndPartial(t *testing.T) {
	for _, tt := range []struct {
		name   string
		amount int64
	}{{"whole", 1000}, {"partial", 800}} {
		t.Run(tt.name, func(t *testing.T) {
			fc := clock.NewFake(t0)
			s, base := newServer(t, sim.Options{Clock: fc})
			ch := authorized(t, base, "c", sim.MethodVisa)
			fc.Advance(time.Minute)
			r := capture(t, base, "cap", cparams(ch, tt.amount))
			wantCapture(t, "capture", r, provider.StatusSucceeded, "")
			amount := fmt.Sprintf("%d.%02d", tt.amount/100, tt.amount%100)
			if !strings.HasPrefix(r.capture.ID, "cp_") || r.capture.ChargeID != ch || r.capture.IdempotencyKey != "cap" ||
				r.capture.AmountMinor != tt.amount || r.capture.Amount != amount || r.capture.Currency != "EUR" ||
				r.capture.PaymentID != "pay_1" || !r.capture.CreatedAt.Equal(t0.Add(time.Minute)) || r.capture.RequestCount != 1 {
				t.Errorf("capture = %+v", r.capture)
			}
			if c := r.capture.Charge; c.ID != ch || c.Status != provider.StatusSucceeded || c.AmountCapturedMinor != tt.amount ||
				c.AmountCaptured != amount || c.AmountMinor != 1000 || c.CaptureRequestCount != 1 {
				t.Errorf("the capture's charge = %+v, want %s succeeded with %d of 1000 captured", c, ch, tt.amount)
			}
			got := wantCharge(t, base, ch, provider.StatusSucceeded, tt.amount)
			if got.CaptureMethod != sim.CaptureManual || got.CaptureRequestCount != 1 || got.VoidRequestCount != 0 {
				t.Errorf("charge = %+v", got)
			}
			// Only the captured amount can be refunded.
			wantRefund(t, "a refund of one unit more than captured", refund(t, base, "r1", rparams(ch, tt.amount+1)),
				provider.StatusDeclined, sim.DeclineAmountTooLarge)
			wantRefund(t, "a refund of the captured amount", refund(t, base, "r2", rparams(ch, tt.amount)), provider.StatusSucceeded, "")
			// The rest is released: no second capture.
			wantCapture(t, "a second capture", capture(t, base, "cap2", cparams(ch, 1)), provider.StatusDeclined, sim.DeclineChargeAlreadyCaptured)
			if got := s.Captures(); len(got) != 2 || got[0].ID != r.capture.ID || got[0].Charge != r.capture.Charge {
				t.Errorf("Captures() = %+v, want the capture then the declined second", got)
			}
		})
	}
}

func TestCaptureDeclines(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, base string) (chargeID string, p captureParams)
		code  string
		// after is the charge's status after the declined capture.
		after    provider.Status
		captured int64
	}{
		{"voided", func(t *testing.T, base string) (string, captureParams) {
			ch := authorized(t, base, "c", sim.MethodVisa)
			wantVoid(t, "void", void(t, base, "v", vparams(ch)), provider.StatusCanceled, "")
			return ch, cparams(ch, 1000)
		}, sim.DeclineChargeCanceled, provider.StatusCanceled, 0},
		{"captured with another key", func(t *testing.T, base string) (string, captureParams) {
			ch := authorized(t, base, "c", sim.MethodVisa)
			wantCapture(t, "first capture", capture(t, base, "first", cparams(ch, 600)), provider.StatusSucceeded, "")
			return ch, cparams(ch, 600)
		}, sim.DeclineChargeAlreadyCaptured, provider.StatusSucceeded, 600},
		{"captured at once (automatic)", func(t *testing.T, base string) (string, captureParams) {
			ch := charged(t, base, "c", sim.MethodVisa)
			return ch, cparams(ch, 1000)
		}, sim.DeclineChargeAlreadyCaptured, provider.StatusSucceeded, 1000},
		{"declined charge", func(t *testing.T, base string) (string, captureParams) {
			p := params(sim.MethodChargeDeclined)
			p.CaptureMethod = sim.CaptureManual
			ch := create(t, base, "c", p).charge.ID
			return ch, cparams(ch, 1000)
		}, sim.DeclineChargeNotCapturable, provider.StatusDeclined, 0},
		{"another currency", func(t *testing.T, base string) (string, captureParams) {
			ch := authorized(t, base, "c", sim.MethodVisa)
			p := cparams(ch, 500)
			p.Currency = "USD"
			return ch, p
		}, sim.DeclineCurrencyMismatch, provider.StatusAuthorized, 0},
		{"more than authorized", func(t *testing.T, base string) (string, captureParams) {
			ch := authorized(t, base, "c", sim.MethodVisa)
			return ch, cparams(ch, 1001)
		}, sim.DeclineAmountTooLarge, provider.StatusAuthorized, 0},
		{"more than authorized, method declining captures", func(t *testing.T, base string) (string, captureParams) {
			ch := authorized(t, base, "c", sim.MethodCaptureDeclined)
			return ch, cparams(ch, 1001)
		}, sim.DeclineAmountTooLarge, provider.StatusAuthorized, 0},
		{sim.MethodCaptureDeclined, func(t *testing.T, base string) (string, captureParams) {
			ch := authorized(t, base, "c", sim.MethodCaptureDeclined)
			return ch, cparams(ch, 1000)
		}, sim.DeclineCapture, provider.StatusAuthorized, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, base := newServer(t, sim.Options{})
			ch, p := tt.setup(t, base)
			r := capture(t, base, "k", p)
			wantCapture(t, "capture", r, provider.StatusDeclined, tt.code)
			if r.capture.ID == "" || r.capture.Charge.Status != tt.after || r.capture.Charge.AmountCapturedMinor != tt.captured {
				t.Errorf("declined capture = %+v, want an id and the charge left %s", r.capture, tt.after)
			}
			wantCharge(t, base, ch, tt.after, tt.captured)
			// A declined capture is remembered under its key: the replay is
			// the same decline, not a second evaluation.
			again := capture(t, base, "k", p)
			if again.status != http.StatusOK || again.capture.ID != r.capture.ID || again.capture.RequestCount != 2 ||
				again.capture.DeclineCode != tt.code {
				t.Errorf("replay = %d %s, want capture %s declined %s, requestCount 2", again.status, again.raw, r.capture.ID, tt.code)
			}
			var last sim.CaptureRecord
			for _, cp := range s.Captures() {
				last = cp
			}
			if last.ID != r.capture.ID || last.RequestCount != 2 {
				t.Errorf("Captures() ends with %+v, want %s with requestCount 2", last, r.capture.ID)
			}
		})
	}
}

// A capture that pm_sim_capture_declined declined leaves the authorization
// in place: it can still be voided.
func TestDeclinedCaptureThenVoid(t *testing.T) {
	_, base := newServer(t, sim.Options{})
	ch := authorized(t, base, "c", sim.MethodCaptureDeclined)
	wantCapture(t, "capture", capture(t, base, "cap", cparams(ch, 1000)), provider.StatusDeclined, sim.DeclineCapture)
	wantVoid(t, "void", void(t, base, "v", vparams(ch)), provider.StatusCanceled, "")
	got := wantCharge(t, base, ch, provider.StatusCanceled, 0)
	if got.CaptureRequestCount != 1 || got.VoidRequestCount != 1 {
		t.Errorf("charge = %+v, want one capture and one void request", got)
	}
}

func TestCaptureReplayAndKeyReuse(t *testing.T) {
	s, base := newServer(t, sim.Options{})
	ch := authorized(t, base, "c", sim.MethodVisa)
	other := authorized(t, base, "c2", sim.MethodVisa)
	first := capture(t, base, "k", cparams(ch, 700))
	wantCapture(t, "capture", first, provider.StatusSucceeded, "")
	second := capture(t, base, "k", cparams(ch, 700))
	if second.status != http.StatusOK || second.capture.ID != first.capture.ID || second.capture.RequestCount != 2 ||
		second.capture.Status != provider.StatusSucceeded || second.capture.Charge.AmountCapturedMinor != 700 {
		t.Errorf("replay = %d %s, want capture %s again, requestCount 2", second.status, second.raw, first.capture.ID)
	}
	for name, change := range map[string]func(*captureParams){
		"chargeId":    func(p *captureParams) { p.ChargeID = other },
		"amountMinor": func(p *captureParams) { p.AmountMinor = 701 },
		"currency":    func(p *captureParams) { p.Currency = "USD" },
		"paymentId":   func(p *captureParams) { p.PaymentID = "pay_2" },
	} {
		p := cparams(ch, 700)
		change(&p)
		if r := capture(t, base, "k", p); r.status != http.StatusUnprocessableEntity || r.code != sim.CodeKeyReused {
			t.Errorf("reuse with another %s = %d %s, want 422 %s", name, r.status, r.raw, sim.CodeKeyReused)
		}
	}
	// Capture keys are their own space: a charge's key is a new capture.
	wantCapture(t, "a capture keyed like a charge", capture(t, base, "c2", cparams(other, 1000)), provider.StatusSucceeded, "")
	got := wantCharge(t, base, ch, provider.StatusSucceeded, 700)
	if got.CaptureRequestCount != 2 || got.RequestCount != 1 {
		t.Errorf("charge = %+v, want 2 capture requests (the 422s are not answered with a capture) and 1 create", got)
	}
	if n := len(s.Captures()); n != 2 {
		t.Errorf("%d captures, want 2", n)
	}
	// A charge replay answers the charge as it now stands.
	p := params(sim.MethodVisa)
	p.CaptureMethod = sim.CaptureManual
	if r := create(t, base, "c", p); r.charge.Status != provider.StatusSucceeded || r.charge.AmountCapturedMinor != 700 {
		t.Errorf("charge replay = %s, want the charge captured", r.raw)
	}
}

func TestConcurrentCapturesOneKeyOneCapture(t *testing.T) {
	s, base := newServer(t, sim.Options{})
	ch := authorized(t, base, "c", sim.MethodVisa)
	const n = 50
	results := parallel(n, func(int) (response, error) {
		return do(context.Background(), nil, captureReq(t, base, "same", cparams(ch, 900)))
	})
	for i, res := range results {
		if res.err != nil || res.r.status != http.StatusOK || res.r.capture.ID != results[0].r.capture.ID ||
			res.r.capture.Status != provider.StatusSucceeded {
			t.Fatalf("request %d = %+v, %v; want capture %s", i, res.r, res.err, results[0].r.capture.ID)
		}
	}
	got := s.Captures()
	if len(got) != 1 || got[0].RequestCount != n || got[0].Status != provider.StatusSucceeded {
		t.Fatalf("Captures() = %+v, want one succeeded capture with requestCount %d", got, n)
	}
	if c := wantCharge(t, base, ch, provider.StatusSucceeded, 900); c.CaptureRequestCount != n {
		t.Errorf("captureRequestCount = %d, want %d", c.CaptureRequestCount, n)
	}
}

// Captures and voids on distinct keys racing for one authorization: exactly
// one of them moves it, every other is declined.
func TestConcurrentCapturesAndVoidsOneWinner(t *testing.T) {
	s, base := newServer(t, sim.Options{})
	ch := authorized(t, base, "c", sim.MethodVisa)
	const n = 20
	results := parallel(n, func(i int) (response, error) {
		if i%2 == 0 {
			return do(context.Background(), nil, captureReq(t, base, fmt.Sprintf("cap%d", i), cparams(ch, 1000)))
		}
		return do(context.Background(), nil, postReq(t, base+"/v1/voids", fmt.Sprintf("void%d", i), vparams(ch)))
	})
	var captured, canceled, declined int
	for i, res := range results {
		switch {
		case res.err != nil || res.r.status != http.StatusOK:
			t.Fatalf("request %d = %+v, %v", i, res.r, res.err)
		case res.r.capture.Status == provider.StatusSucceeded:
			captured++
		case res.r.void.Status == provider.StatusCanceled:
			canceled++
		default:
			declined++
		}
	}
	c := getCharge(t, base, ch).charge
	switch {
	case captured == 1 && canceled == 0 && c.Status == provider.StatusSucceeded:
	case captured == 0 && c.Status == provider.StatusCanceled:
		// Every void succeeds on a canceled charge; every capture is
		// declined charge_canceled.
		if canceled != n/2 {
			t.Errorf("%d voids canceled, want all %d", canceled, n/2)
		}
	default:
		t.Fatalf("%d captured, %d canceled, %d declined, charge %s: want one capture and no void, or only voids", captured, canceled, declined, c.Status)
	}
	if c.CaptureRequestCount != n/2 || c.VoidRequestCount != n/2 || len(s.Captures()) != n/2 || len(s.Voids()) != n/2 {
		t.Errorf("charge = %+v, %d captures, %d voids; want %d of each", c, len(s.Captures()), len(s.Voids()), n/2)
	}
}

func TestVoid(t *testing.T) {
	fc := clock.NewFake(t0)
	s, base := newServer(t, sim.Options{Clock: fc})
	ch := authorized(t, base, "c", sim.MethodVisa)

	r := void(t, base, "v1", vparams(ch))
	wantVoid(t, "void", r, provider.StatusCanceled, "")
	want := sim.VoidRecord{
		ID: r.void.ID, IdempotencyKey: "v1", ChargeID: ch, Status: provider.StatusCanceled,
		Reason: "requested_by_customer", PaymentID: "pay_1", CreatedAt: t0, Charge: r.void.Charge, RequestCount: 1,
	}
	if r.void != want || !strings.HasPrefix(r.void.ID, "vo_") {
		t.Errorf("void = %+v\nwant %+v", r.void, want)
	}
	if r.void.Charge.Status != provider.StatusCanceled || r.void.Charge.VoidRequestCount != 1 {
		t.Errorf("the void's charge = %+v", r.void.Charge)
	}
	wantCharge(t, base, ch, provider.StatusCanceled, 0)
	// A voided authorization cannot be refunded (nothing was captured)...
	wantRefund(t, "refund of a voided charge", refund(t, base, "r", rparams(ch, 100)), provider.StatusDeclined, sim.DeclineChargeNotRefundable)
	// ...and voiding it again, with another key, changes nothing and says canceled.
	wantVoid(t, "second void", void(t, base, "v2", voidParams{ChargeID: ch, Reason: "abandoned"}), provider.StatusCanceled, "")
	// The replay of the first answers it again.
	if again := void(t, base, "v1", vparams(ch)); again.void.ID != r.void.ID || again.void.RequestCount != 2 {
		t.Errorf("replay = %d %s, want void %s with requestCount 2", again.status, again.raw, r.void.ID)
	}
	if r := void(t, base, "v1", voidParams{ChargeID: ch, Reason: "duplicate", PaymentID: "pay_1"}); r.status != http.StatusUnprocessableEntity || r.code != sim.CodeKeyReused {
		t.Errorf("reuse with another reason = %d %s, want 422", r.status, r.raw)
	}
	if c := wantCharge(t, base, ch, provider.StatusCanceled, 0); c.VoidRequestCount != 3 {
		t.Errorf("voidRequestCount = %d, want 3", c.VoidRequestCount)
	}

	// A captured charge, automatic or manual, cannot be voided.
	manual := authorized(t, base, "m", sim.MethodVisa)
	wantCapture(t, "capture", capture(t, base, "cap", cparams(manual, 500)), provider.StatusSucceeded, "")
	wantVoid(t, "void of a captured charge", void(t, base, "v3", vparams(manual)), provider.StatusDeclined, sim.DeclineChargeAlreadyCaptured)
	wantCharge(t, base, manual, provider.StatusSucceeded, 500)
	automatic := charged(t, base, "a", sim.MethodVisa)
	wantVoid(t, "void of an automatic charge", void(t, base, "v4", vparams(automatic)), provider.StatusDeclined, sim.DeclineChargeAlreadyCaptured)
	// Nor a declined one.
	declined := create(t, base, "d", params(sim.MethodChargeDeclined)).charge.ID
	wantVoid(t, "void of a declined charge", void(t, base, "v5", vparams(declined)), provider.StatusDeclined, sim.DeclineChargeNotCancelable)
	if n := len(s.Voids()); n != 5 {
		t.Errorf("%d voids, want 5", n)
	}
}

func TestRefundOfAnAuthorizationIsDeclined(t *testing.T) {
	_, base := newServer(t, sim.Options{})
	ch := authorized(t, base, "c", sim.MethodVisa)
	wantRefund(t, "refund of an uncaptured authorization", refund(t, base, "r", rparams(ch, 100)), provider.StatusDeclined, sim.DeclineChargeNotRefundable)
	wantCharge(t, base, ch, provider.StatusAuthorized, 0)
}

func TestCaptureTimeoutAfterSuccessDropsTheResponse(t *testing.T) {
	const hang = 200 * time.Millisecond
	s, base := newServer(t, sim.Options{HangFor: hang})
	start := time.Now()
	ch := authorized(t, base, "c", sim.MethodCaptureTimeoutAfterSuccess)
	if elapsed := time.Since(start); elapsed >= hang {
		t.Errorf("the authorization took %v; only its capture loses its answer", elapsed)
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	start = time.Now()
	if _, err := do(context.Background(), hc, captureReq(t, base, "lost", cparams(ch, 1000))); err == nil {
		t.Fatal("capture answered; want the connection dropped without a response")
	}
	if elapsed := time.Since(start); elapsed < hang {
		t.Errorf("connection dropped after %v, want after HangFor %v", elapsed, hang)
	}
	got := s.Captures()
	if len(got) != 1 || got[0].Status != provider.StatusSucceeded {
		t.Fatalf("Captures() = %+v, want one succeeded capture", got)
	}
	// The charge shows the capture at once; the retry answers at once.
	wantCharge(t, base, ch, provider.StatusSucceeded, 1000)
	start = time.Now()
	r := capture(t, base, "lost", cparams(ch, 1000))
	if elapsed := time.Since(start); elapsed >= hang {
		t.Errorf("retry took %v, want an immediate answer", elapsed)
	}
	if r.capture.ID != got[0].ID || r.capture.RequestCount != 2 {
		t.Errorf("retry = %d %s, want capture %s with requestCount 2", r.status, r.raw, got[0].ID)
	}
	// Voids of such a charge answer as any.
	wantVoid(t, "void", void(t, base, "v", vparams(ch)), provider.StatusDeclined, sim.DeclineChargeAlreadyCaptured)
}

func TestCaptureAndVoidValidation(t *testing.T) {
	s, base := newServer(t, sim.Options{})
	ch := authorized(t, base, "c", sim.MethodVisa)
	for _, tt := range []struct {
		name   string
		path   string
		key    string
		body   any
		status int
		code   string
	}{
		{"capture without key", "/v1/captures", "", cparams(ch, 1), 400, sim.CodeKeyMissing},
		{"capture with a long key", "/v1/captures", strings.Repeat("k", 256), cparams(ch, 1), 400, sim.CodeKeyInvalid},
		{"capture, malformed", "/v1/captures", "k", []byte(`{"chargeId":`), 400, sim.CodeInvalidRequest},
		{"capture, unknown field", "/v1/captures", "k", map[string]any{"chargeId": ch, "amountMinor": 1, "currency": "EUR", "amount": "0.01"}, 400, sim.CodeInvalidRequest},
		{"capture without charge", "/v1/captures", "k", captureParams{AmountMinor: 1, Currency: "EUR"}, 400, sim.CodeInvalidRequest},
		{"capture of zero", "/v1/captures", "k", cparams(ch, 0), 400, sim.CodeInvalidRequest},
		{"capture, unknown currency", "/v1/captures", "k", captureParams{ChargeID: ch, AmountMinor: 1, Currency: "XXX"}, 400, sim.CodeInvalidRequest},
		{"capture of an unknown charge", "/v1/captures", "k", cparams("ch_nope", 1), 404, sim.CodeChargeNotFound},
		{"void without key", "/v1/voids", "", vparams(ch), 400, sim.CodeKeyMissing},
		{"void without charge", "/v1/voids", "k", voidParams{Reason: "duplicate"}, 400, sim.CodeInvalidRequest},
		{"void, unknown reason", "/v1/voids", "k", voidParams{ChargeID: ch, Reason: "changed_mind"}, 400, sim.CodeInvalidRequest},
		{"void, unknown field", "/v1/voids", "k", map[string]any{"chargeId": ch, "amountMinor": 1}, 400, sim.CodeInvalidRequest},
		{"void of an unknown charge", "/v1/voids", "k", vparams("ch_nope"), 404, sim.CodeChargeNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := do(context.Background(), nil, postReq(t, base+tt.path, tt.key, tt.body))
			if err != nil || r.status != tt.status || r.code != tt.code {
				t.Errorf("got %d %s (%v), want %d %s", r.status, r.raw, err, tt.status, tt.code)
			}
		})
	}
	if len(s.Captures()) != 0 || len(s.Voids()) != 0 {
		t.Errorf("captures %+v, voids %+v, want none", s.Captures(), s.Voids())
	}
	c := wantCharge(t, base, ch, provider.StatusAuthorized, 0)
	if c.CaptureRequestCount != 0 || c.VoidRequestCount != 0 {
		t.Errorf("charge = %+v, want no capture or void requests counted", c)
	}
}

func TestGetCharge(t *testing.T) {
	_, base := newServer(t, sim.Options{FlakyLookups: 5})
	if r := getCharge(t, base, "ch_nope"); r.status != http.StatusNotFound || r.code != sim.CodeNotFound {
		t.Errorf("unknown id = %d %s, want 404 not_found", r.status, r.raw)
	}
	// Never flaky, and no lookup by key.
	ch := authorized(t, base, "c", sim.MethodLookupFlaky)
	for range 3 {
		if c := wantCharge(t, base, ch, provider.StatusAuthorized, 0); c.LookupCount != 0 {
			t.Errorf("lookupCount = %d, want 0", c.LookupCount)
		}
	}
}

func TestCaptureKeyTTL(t *testing.T) {
	const ttl = time.Hour
	fc := clock.NewFake(t0)
	s, base := newServer(t, sim.Options{Clock: fc, KeyTTL: ttl})
	ch := authorized(t, base, "c", sim.MethodVisa)
	first := capture(t, base, "k", cparams(ch, 1000))
	fc.Advance(ttl)
	// Past the TTL the key is forgotten: a new capture, declined since the
	// charge was captured.
	r := capture(t, base, "k", cparams(ch, 1000))
	wantCapture(t, "capture past the TTL", r, provider.StatusDeclined, sim.DeclineChargeAlreadyCaptured)
	if r.capture.ID == first.capture.ID || len(s.Captures()) != 2 {
		t.Errorf("capture past TTL = %s, want a new capture", r.raw)
	}
	// Lookups ignore the TTL: the newest with the key.
	if l := get(t, base+"/v1/captures?idempotencyKey=k"); l.status != http.StatusOK || l.capture.ID != r.capture.ID || l.capture.LookupCount != 1 {
		t.Errorf("lookup = %d %s, want capture %s", l.status, l.raw, r.capture.ID)
	}
}

func TestLookupCaptureAndVoid(t *testing.T) {
	_, base := newServer(t, sim.Options{})
	for _, path := range []string{"/v1/captures", "/v1/voids"} {
		if r := get(t, base+path+"?idempotencyKey=never"); r.status != http.StatusNotFound || r.code != sim.CodeNotFound {
			t.Errorf("%s lookup of an unknown key = %d %s, want 404 not_found", path, r.status, r.raw)
		}
		if r := get(t, base+path); r.status != http.StatusBadRequest || r.code != sim.CodeInvalidRequest {
			t.Errorf("%s lookup without key = %d %s, want 400", path, r.status, r.raw)
		}
	}
	ch := authorized(t, base, "c", sim.MethodVisa)
	v := void(t, base, "a/b c", vparams(ch))
	// A void's key finds no capture: each kind has its own keys.
	if r := get(t, base+"/v1/captures?"+url.Values{"idempotencyKey": {"a/b c"}}.Encode()); r.status != http.StatusNotFound {
		t.Errorf("capture lookup of a void's key = %d %s, want 404", r.status, r.raw)
	}
	r := get(t, base+"/v1/voids?"+url.Values{"idempotencyKey": {"a/b c"}}.Encode())
	if r.status != http.StatusOK || r.void.ID != v.void.ID || r.void.LookupCount != 1 {
		t.Errorf("void lookup = %d %s, want void %s", r.status, r.raw, v.void.ID)
	}
}

func TestListShowsCapturesAndVoids(t *testing.T) {
	_, base := newServer(t, sim.Options{})
	captured := authorized(t, base, "a", sim.MethodVisa)
	capture(t, base, "cap", cparams(captured, 850))
	capture(t, base, "cap", cparams(captured, 850))
	voided := authorized(t, base, "b", sim.MethodVisa)
	void(t, base, "v", vparams(voided))
	pending := authorized(t, base, "c", sim.MethodVisa)

	var list struct {
		Charges []map[string]any `json:"charges"`
	}
	getJSON(t, base+"/_sim/charges", &list)
	want := []map[string]any{
		{"id": captured, "status": "succeeded", "amount": "10.00", "amountCaptured": "8.50", "amountCapturedMinor": 850.0,
			"captureMethod": "manual", "requestCount": 1.0, "captureRequestCount": 2.0, "voidRequestCount": 0.0},
		{"id": voided, "status": "canceled", "amountCaptured": "0.00", "amountCapturedMinor": 0.0, "captureRequestCount": 0.0, "voidRequestCount": 1.0},
		{"id": pending, "status": "requires_capture", "amountCaptured": "0.00", "amountCapturedMinor": 0.0, "captureRequestCount": 0.0, "voidRequestCount": 0.0},
	}
	if len(list.Charges) != len(want) {
		t.Fatalf("listed %d charges, want %d", len(list.Charges), len(want))
	}
	for i, w := range want {
		for k, v := range w {
			if list.Charges[i][k] != v {
				t.Errorf("charge %d: %s = %v, want %v", i, k, list.Charges[i][k], v)
			}
		}
	}

	var captures struct {
		Captures []map[string]any `json:"captures"`
	}
	getJSON(t, base+"/_sim/captures", &captures)
	if len(captures.Captures) != 1 || captures.Captures[0]["chargeId"] != captured || captures.Captures[0]["requestCount"] != 2.0 ||
		captures.Captures[0]["amount"] != "8.50" || captures.Captures[0]["status"] != "succeeded" {
		t.Errorf("/_sim/captures = %v", captures.Captures)
	}
	var voids struct {
		Voids []map[string]any `json:"voids"`
	}
	getJSON(t, base+"/_sim/voids", &voids)
	if len(voids.Voids) != 1 || voids.Voids[0]["chargeId"] != voided || voids.Voids[0]["status"] != "canceled" {
		t.Errorf("/_sim/voids = %v", voids.Voids)
	}
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", u, resp.StatusCode, err)
	}
}
