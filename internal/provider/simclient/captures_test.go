package simclient_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
)

// The Captures port's conformance cases, against the simulator.
func TestCapturesConformance(t *testing.T) {
	providertest.RunCaptures(t, func(t *testing.T) providertest.CapturesSubject {
		s, c := newSim(t, sim.Options{})
		return providertest.CapturesSubject{
			Provider:              c,
			Method:                sim.MethodVisa,
			CaptureDeclinedMethod: sim.MethodCaptureDeclined,
			Captures:              func() int { return len(s.Captures()) },
		}
	})
}

func TestAuthorizeSendsCaptureMethodManual(t *testing.T) {
	s, c := newSim(t, sim.Options{})
	ctx := providertest.Context(t, 5*time.Second)
	ch, err := c.Charge(ctx, providertest.AuthorizeRequest("k", sim.MethodVisa))
	if err != nil {
		t.Fatal(err)
	}
	want := provider.Charge{ID: ch.ID, IdempotencyKey: "k", Status: provider.StatusAuthorized, AmountMinor: 1000, Currency: "EUR"}
	if ch != want {
		t.Errorf("Charge = %+v, want %+v", ch, want)
	}
	if got := s.Charges(); len(got) != 1 || got[0].CaptureMethod != sim.CaptureManual {
		t.Errorf("the simulator recorded %+v, want captureMethod manual", got)
	}
	// The lookup reads the charge as it stands, authorized or not.
	if got, err := c.Lookup(ctx, providertest.ChargeLookup("k")); err != nil || got != want {
		t.Errorf("Lookup = %+v, %v; want %+v", got, err, want)
	}
	// An automatic charge with the key is another command.
	_, err = c.Charge(ctx, providertest.ChargeRequest("k", sim.MethodVisa))
	var apiErr *simclient.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != sim.CodeKeyReused {
		t.Errorf("automatic Charge with the authorization's key: err = %v, want 422 %s", err, sim.CodeKeyReused)
	}
}

func TestCaptureAndVoidAnswers(t *testing.T) {
	s, c := newSim(t, sim.Options{})
	ctx := providertest.Context(t, 5*time.Second)
	ch, err := c.Charge(ctx, providertest.AuthorizeRequest("k", sim.MethodVisa))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Capture(ctx, providertest.CaptureRequest("cap", ch.ID, 800))
	want := provider.Charge{ID: ch.ID, IdempotencyKey: "k", Status: provider.StatusSucceeded, AmountMinor: 1000, Currency: "EUR", AmountCapturedMinor: 800}
	if err != nil || got != want {
		t.Errorf("Capture = %+v, %v; want %+v", got, err, want)
	}
	if cps := s.Captures(); len(cps) != 1 || cps[0].PaymentID != "pay_1" || cps[0].IdempotencyKey != "cap" || cps[0].AmountMinor != 800 {
		t.Errorf("the simulator recorded %+v, want the request's key, amount and payment id", cps)
	}
	if got, err := c.GetCharge(ctx, ch.ID); err != nil || got != want {
		t.Errorf("GetCharge = %+v, %v; want %+v", got, err, want)
	}
	voided, err := c.Void(ctx, providertest.VoidRequest("void", ch.ID))
	want.Status, want.DeclineCode = provider.StatusDeclined, sim.DeclineChargeAlreadyCaptured
	if err != nil || voided != want {
		t.Errorf("Void of the captured charge = %+v, %v; want %+v", voided, err, want)
	}
	if vs := s.Voids(); len(vs) != 1 || vs[0].Reason != "requested_by_customer" || vs[0].PaymentID != "pay_1" {
		t.Errorf("the simulator recorded %+v, want the request's reason and payment id", vs)
	}
}

// A capture whose answer is lost is ErrUnknownOutcome; GetCharge tells what
// happened, and the retry with the key answers the capture.
func TestCaptureLostAnswerIsUnknownOutcome(t *testing.T) {
	s, c := newSim(t, sim.Options{HangFor: time.Minute})
	ch, err := c.Charge(providertest.Context(t, 5*time.Second), providertest.AuthorizeRequest("k", sim.MethodCaptureTimeoutAfterSuccess))
	if err != nil {
		t.Fatal(err)
	}
	req := providertest.CaptureRequest("cap", ch.ID, 1000)
	start := time.Now()
	_, err = c.Capture(providertest.Context(t, 100*time.Millisecond), req)
	wantTimedOut(t, "Capture", err, start)

	ctx := providertest.Context(t, 5*time.Second)
	got, err := c.GetCharge(ctx, ch.ID)
	if err != nil || got.Status != provider.StatusSucceeded || got.AmountCapturedMinor != 1000 {
		t.Errorf("GetCharge = %+v, %v; want the capture shown at once", got, err)
	}
	if got, err = c.Capture(ctx, req); err != nil || got.Status != provider.StatusSucceeded {
		t.Errorf("retry = %+v, %v; want the capture", got, err)
	}
	if cps := s.Captures(); len(cps) != 1 || cps[0].RequestCount != 2 {
		t.Errorf("Captures() = %+v, want one capture requested twice", cps)
	}
}

func TestCaptureRejectionsArePlainErrors(t *testing.T) {
	s, c := newSim(t, sim.Options{})
	ctx := providertest.Context(t, 5*time.Second)
	ch, err := c.Charge(ctx, providertest.AuthorizeRequest("k", sim.MethodVisa))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Capture(ctx, providertest.CaptureRequest("cap", ch.ID, 100)); err != nil {
		t.Fatal(err)
	}
	badReason := providertest.VoidRequest("v-x", ch.ID)
	badReason.Reason = "changed_mind"
	for _, tc := range []struct {
		name   string
		call   func() error
		status int
		code   string
	}{
		{"capture of an unknown charge", func() error {
			_, err := c.Capture(ctx, providertest.CaptureRequest("cap-404", "ch_nope", 100))
			return err
		}, http.StatusNotFound, sim.CodeChargeNotFound},
		{"capture key reused", func() error {
			_, err := c.Capture(ctx, providertest.CaptureRequest("cap", ch.ID, 200))
			return err
		}, http.StatusUnprocessableEntity, sim.CodeKeyReused},
		{"void of an unknown charge", func() error {
			_, err := c.Void(ctx, providertest.VoidRequest("v-404", "ch_nope"))
			return err
		}, http.StatusNotFound, sim.CodeChargeNotFound},
		{"void, bad reason", func() error { _, err := c.Void(ctx, badReason); return err }, http.StatusBadRequest, sim.CodeInvalidRequest},
		{"capture without key", func() error {
			_, err := c.Capture(ctx, providertest.CaptureRequest("", ch.ID, 100))
			return err
		}, 0, ""},
		{"capture without charge", func() error {
			_, err := c.Capture(ctx, providertest.CaptureRequest("cap-0", "", 100))
			return err
		}, 0, ""},
		{"void without key", func() error { _, err := c.Void(ctx, providertest.VoidRequest("", ch.ID)); return err }, 0, ""},
		{"void without charge", func() error { _, err := c.Void(ctx, providertest.VoidRequest("v-0", "")); return err }, 0, ""},
		{"get without charge", func() error { _, err := c.GetCharge(ctx, ""); return err }, 0, ""},
	} {
		err := tc.call()
		providertest.WantOnly(t, tc.name, err, nil)
		var apiErr *simclient.APIError
		if got := errors.As(err, &apiErr); got != (tc.status != 0) || got && (apiErr.StatusCode != tc.status || apiErr.Code != tc.code) {
			t.Errorf("%s: err = %#v, want an *APIError %d %s (none if 0)", tc.name, err, tc.status, tc.code)
		}
	}
	if cps, vs := s.Captures(), s.Voids(); len(cps) != 1 || cps[0].RequestCount != 1 || len(vs) != 0 {
		t.Errorf("Captures() = %+v, Voids() = %+v, want the first capture only", cps, vs)
	}
}

// GetCharge escapes the id in the path, and a 404 that is not the
// simulator's not_found is no ErrNotFound.
func TestGetChargePath(t *testing.T) {
	var path string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path = r.URL.EscapedPath()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"not_found"}`))
	}))
	t.Cleanup(ts.Close)
	_, err := simclient.New(ts.URL, nil).GetCharge(providertest.Context(t, 5*time.Second), "ch_1/../x?y")
	providertest.WantOnly(t, "GetCharge", err, provider.ErrNotFound)
	if want := "/v1/charges/ch_1%2F..%2Fx%3Fy"; path != want {
		t.Errorf("path = %q, want %q", path, want)
	}
}

func TestMalformedCaptureAnswersAreUnknownOutcome(t *testing.T) {
	for name, tc := range map[string]struct {
		body  string
		calls []string
	}{
		"capture of another charge": {`{"id":"cp_1","idempotencyKey":"k","chargeId":"ch_2","status":"succeeded","charge":{"id":"ch_2","idempotencyKey":"c","status":"succeeded"}}`, []string{"Capture", "Void"}},
		"without the charge":        {`{"id":"cp_1","idempotencyKey":"k","chargeId":"ch_1","status":"succeeded"}`, []string{"Capture"}},
		"capture that is canceled":  {`{"id":"cp_1","idempotencyKey":"k","chargeId":"ch_1","status":"canceled","charge":{"id":"ch_1","idempotencyKey":"c","status":"canceled"}}`, []string{"Capture"}},
		"void that succeeded":       {`{"id":"vo_1","idempotencyKey":"k","chargeId":"ch_1","status":"succeeded","charge":{"id":"ch_1","idempotencyKey":"c","status":"succeeded"}}`, []string{"Void"}},
		"another charge":            {`{"id":"ch_2","idempotencyKey":"c","status":"succeeded"}`, []string{"GetCharge"}},
		"a charge without key":      {`{"id":"ch_1","status":"succeeded"}`, []string{"GetCharge"}},
		"a pending charge":          {`{"id":"ch_1","idempotencyKey":"c","status":"pending"}`, []string{"GetCharge"}},
	} {
		t.Run(name, func(t *testing.T) {
			c := fakeProvider(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte(tc.body))
			})
			for _, call := range providertest.Calls(c, "k", "ch_1") {
				for _, n := range tc.calls {
					if call.Name == n {
						providertest.WantOnly(t, call.Name, call.Do(providertest.Context(t, 5*time.Second)), provider.ErrUnknownOutcome)
					}
				}
			}
		})
	}
}
