package authorizations_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// Every answer of a capture and of a cancel, in each way they end, is the
// one the spec documents and CONTRACT.md promises (servicetest.CheckSpec).
func TestCaptureAndCancelAnswersConformToTheOpenAPISpec(t *testing.T) {
	t.Parallel()
	faults, held := &actionFaults{}, &actionFaults{}
	servicetest.CheckSpec(t,
		servicetest.SpecGroup{Name: "manual capture", Run: func(t *testing.T, c *servicetest.Conformance) {
			auth := c.Check(servicetest.Exchange{
				Name: "201 authorized", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-auth"),
				Body: servicetest.ManualBody("inv-c1", "pm_card_visa"), Status: 201, Headers: []string{"Location"},
			})
			if p := auth.JSON(t); p["status"] != "REQUIRES_CAPTURE" || p["capturableAmount"] != "10.00" || p["authorizationExpiresAt"] == nil {
				t.Errorf("manual payment: %s, want REQUIRES_CAPTURE with capturableAmount and authorizationExpiresAt", auth.Body)
			}
			capture := auth.Header.Get("Location") + "/capture"
			captured := c.Check(servicetest.Exchange{
				Name: "200 partial capture", Method: "POST", Path: capture, Header: servicetest.CreateHeaders(servicetest.SecretA, "c-1"),
				Body: `{"amount":"8.00"}`, Status: 200, Headers: []string{"Location"},
			})
			if p := captured.JSON(t); p["status"] != "SUCCEEDED" || p["capturedAmount"] != "8.00" {
				t.Errorf("capture: %s, want SUCCEEDED with capturedAmount 8.00", captured.Body)
			}
			replay := c.Check(servicetest.Exchange{
				Name: "200 capture replayed", Method: "POST", Path: capture, Header: servicetest.CreateHeaders(servicetest.SecretA, "c-1"),
				Body: `{"amount":"8.00"}`, Status: 200, Headers: []string{"Location", "Idempotent-Replayed"}, Replayed: true,
			})
			if !bytes.Equal(replay.Body, captured.Body) {
				t.Errorf("the replay is not the original body byte for byte:\n%s\n%s", captured.Body, replay.Body)
			}
			c.Check(servicetest.Exchange{Name: "422 capture key reused", Method: "POST", Path: capture, Header: servicetest.CreateHeaders(servicetest.SecretA, "c-1"),
				Body: `{"amount":"7.00"}`, Status: 422, Code: "IDEMPOTENCY_KEY_REUSED"})
			c.Check(servicetest.Exchange{Name: "409 captured payment not capturable", Method: "POST", Path: capture, Header: servicetest.CreateHeaders(servicetest.SecretA, "c-2"),
				Body: `{}`, Status: 409, Code: "PAYMENT_NOT_CAPTURABLE"})
			c.Check(servicetest.Exchange{Name: "409 captured payment not cancelable", Method: "POST", Path: auth.Header.Get("Location") + "/cancel",
				Header: servicetest.CreateHeaders(servicetest.SecretA, "x-1"), Body: `{}`, Status: 409, Code: "PAYMENT_NOT_CANCELABLE"})
			c.Check(servicetest.Exchange{Name: "200 get a captured payment", Method: "GET", Path: auth.Header.Get("Location"), Header: servicetest.Bearer(servicetest.SecretA), Status: 200})

			// No body at all (and no Content-Type): the whole amount.
			whole := "/payments/" + c.E.ManualPayment("pm_card_visa", "inv-c2") + "/capture"
			noBody := servicetest.Bearer(servicetest.SecretA)
			noBody["Idempotency-Key"] = "c-3"
			r := c.Check(servicetest.Exchange{Name: "200 capture without a body", Method: "POST", Path: whole, Header: noBody,
				Status: 200, Headers: []string{"Location"}})
			if got := r.JSON(t)["capturedAmount"]; got != "10.00" {
				t.Errorf("capture without a body captured %v, want 10.00", got)
			}

			open := "/payments/" + c.E.ManualPayment("pm_card_visa", "inv-c3") + "/capture"
			textPlain := servicetest.CreateHeaders(servicetest.SecretA, "c-4")
			textPlain["Content-Type"] = "text/plain"
			noKey := servicetest.CreateHeaders(servicetest.SecretA, "")
			delete(noKey, "Idempotency-Key")
			for _, x := range []servicetest.Exchange{
				{Name: "409 capture exceeds", Header: servicetest.CreateHeaders(servicetest.SecretA, "c-4"), Body: `{"amount":"10.01"}`, Status: 409, Code: "CAPTURE_EXCEEDS_CAPTURABLE", Members: []string{"capturableAmount"}},
				{Name: "400 capture amount invalid", Header: servicetest.CreateHeaders(servicetest.SecretA, "c-4"), Body: `{"amount":"1.001"}`, Status: 400, Code: "VALIDATION_FAILED"},
				{Name: "400 capture amount not a string", Header: servicetest.CreateHeaders(servicetest.SecretA, "c-4"), Body: `{"amount":8}`, Status: 400, Code: "VALIDATION_FAILED", SpecRejects: "/amount"},
				{Name: "400 capture unknown field", Header: servicetest.CreateHeaders(servicetest.SecretA, "c-4"), Body: `{"extra":"x"}`, Status: 400, Code: "VALIDATION_FAILED", SpecRejects: "extra"},
				{Name: "400 capture malformed JSON", Header: servicetest.CreateHeaders(servicetest.SecretA, "c-4"), Body: `{"amount":`, Status: 400, Code: "MALFORMED_JSON", SpecRejects: "failed to decode request body"},
				{Name: "400 capture key missing", Header: noKey, Body: `{}`, Status: 400, Code: "IDEMPOTENCY_KEY_MISSING", SpecRejects: `"Idempotency-Key" in header`},
				{Name: "400 capture key too long", Header: servicetest.CreateHeaders(servicetest.SecretA, strings.Repeat("k", 256)), Body: `{}`, Status: 400, Code: "IDEMPOTENCY_KEY_INVALID"},
				{Name: "413 capture body too large", Header: servicetest.CreateHeaders(servicetest.SecretA, "c-4"), Body: `{}` + strings.Repeat(" ", 17<<10), Status: 413, Code: "PAYLOAD_TOO_LARGE"},
				{Name: "415 capture wrong content type", Header: textPlain, Body: `{}`, Status: 415, Code: "UNSUPPORTED_MEDIA_TYPE", SpecRejects: `Content-Type has unexpected value "text/plain"`},
				{Name: "401 capture without credentials", Header: map[string]string{"Idempotency-Key": "c-4", "Content-Type": "application/json"}, Body: `{}`, Status: 401, Code: "UNAUTHORIZED", SpecRejects: "security requirements failed"},
			} {
				x.Method, x.Path = "POST", open
				c.Check(x)
			}
			c.Check(servicetest.Exchange{Name: "404 capture of an unknown payment", Method: "POST", Path: "/payments/pay_none/capture", Header: servicetest.CreateHeaders(servicetest.SecretA, "c-5"),
				Body: `{}`, Status: 404, Code: "NOT_FOUND"})
			c.Check(servicetest.Exchange{Name: "404 capture of another tenant's payment", Method: "POST", Path: open, Header: servicetest.CreateHeaders(servicetest.SecretB, "c-5"),
				Body: `{}`, Status: 404, Code: "NOT_FOUND"})
			automatic := "/payments/" + c.E.Pay("pm_card_visa", "inv-c4") + "/capture"
			c.Check(servicetest.Exchange{Name: "409 automatic payment not capturable", Method: "POST", Path: automatic, Header: servicetest.CreateHeaders(servicetest.SecretA, "c-6"),
				Body: `{}`, Status: 409, Code: "PAYMENT_NOT_CAPTURABLE"})

			declines := "/payments/" + c.E.ManualPayment("pm_sim_capture_declined", "inv-c5") + "/capture"
			c.Check(servicetest.Exchange{Name: "402 capture declined", Method: "POST", Path: declines, Header: servicetest.CreateHeaders(servicetest.SecretA, "c-7"),
				Body: `{}`, Status: 402, Code: "CAPTURE_DECLINED", Members: []string{"paymentId", "declineCode"}})
			c.Check(servicetest.Exchange{Name: "402 capture declined replayed", Method: "POST", Path: declines, Header: servicetest.CreateHeaders(servicetest.SecretA, "c-7"),
				Body: `{}`, Status: 402, Code: "CAPTURE_DECLINED", Members: []string{"paymentId", "declineCode"}, Headers: []string{"Idempotent-Replayed"}, Replayed: true})
			c.Check(servicetest.Exchange{Name: "200 get a payment whose capture was declined", Method: "GET", Path: strings.TrimSuffix(declines, "/capture"),
				Header: servicetest.Bearer(servicetest.SecretA), Status: 200})
		}},
		servicetest.SpecGroup{Name: "cancel", Run: func(t *testing.T, c *servicetest.Conformance) {
			payment := "/payments/" + c.E.ManualPayment("pm_card_visa", "inv-x1")
			canceled := c.Check(servicetest.Exchange{
				Name: "200 cancel", Method: "POST", Path: payment + "/cancel", Header: servicetest.CreateHeaders(servicetest.SecretA, "x-1"),
				Body: `{"reason":"requested_by_customer"}`, Status: 200, Headers: []string{"Location"},
			})
			if got := canceled.JSON(t)["status"]; got != "CANCELED" {
				t.Errorf("cancel: status %v, want CANCELED", got)
			}
			c.Check(servicetest.Exchange{Name: "200 cancel replayed", Method: "POST", Path: payment + "/cancel", Header: servicetest.CreateHeaders(servicetest.SecretA, "x-1"),
				Body: `{"reason":"requested_by_customer"}`, Status: 200, Headers: []string{"Location", "Idempotent-Replayed"}, Replayed: true})
			c.Check(servicetest.Exchange{Name: "422 cancel key reused", Method: "POST", Path: payment + "/cancel", Header: servicetest.CreateHeaders(servicetest.SecretA, "x-1"),
				Body: `{"reason":"duplicate"}`, Status: 422, Code: "IDEMPOTENCY_KEY_REUSED"})
			c.Check(servicetest.Exchange{Name: "409 canceled payment not cancelable", Method: "POST", Path: payment + "/cancel", Header: servicetest.CreateHeaders(servicetest.SecretA, "x-2"),
				Body: `{}`, Status: 409, Code: "PAYMENT_NOT_CANCELABLE"})
			c.Check(servicetest.Exchange{Name: "409 canceled payment not capturable", Method: "POST", Path: payment + "/capture", Header: servicetest.CreateHeaders(servicetest.SecretA, "c-1"),
				Body: `{}`, Status: 409, Code: "PAYMENT_NOT_CAPTURABLE"})
			c.Check(servicetest.Exchange{Name: "200 get a canceled payment", Method: "GET", Path: payment, Header: servicetest.Bearer(servicetest.SecretA), Status: 200})

			other := "/payments/" + c.E.ManualPayment("pm_card_visa", "inv-x2") + "/cancel"
			noBody := servicetest.Bearer(servicetest.SecretA)
			noBody["Idempotency-Key"] = "x-3"
			noKey := servicetest.CreateHeaders(servicetest.SecretA, "")
			delete(noKey, "Idempotency-Key")
			for _, x := range []servicetest.Exchange{
				{Name: "400 cancel reason invalid", Header: servicetest.CreateHeaders(servicetest.SecretA, "x-3"), Body: `{"reason":"because"}`, Status: 400, Code: "VALIDATION_FAILED", SpecRejects: "/reason"},
				{Name: "400 cancel key missing", Header: noKey, Body: `{}`, Status: 400, Code: "IDEMPOTENCY_KEY_MISSING", SpecRejects: `"Idempotency-Key" in header`},
				{Name: "400 cancel malformed JSON", Header: servicetest.CreateHeaders(servicetest.SecretA, "x-3"), Body: `{`, Status: 400, Code: "MALFORMED_JSON", SpecRejects: "failed to decode request body"},
				{Name: "200 cancel without a body", Header: noBody, Status: 200, Headers: []string{"Location"}},
			} {
				x.Method, x.Path = "POST", other
				c.Check(x)
			}
			c.Check(servicetest.Exchange{Name: "404 cancel of an unknown payment", Method: "POST", Path: "/payments/pay_none/cancel", Header: servicetest.CreateHeaders(servicetest.SecretA, "x-4"),
				Body: `{}`, Status: 404, Code: "NOT_FOUND"})
			automatic := "/payments/" + c.E.Pay("pm_card_visa", "inv-x3") + "/cancel"
			c.Check(servicetest.Exchange{Name: "409 succeeded payment not cancelable", Method: "POST", Path: automatic, Header: servicetest.CreateHeaders(servicetest.SecretA, "x-5"),
				Body: `{}`, Status: 409, Code: "PAYMENT_NOT_CANCELABLE"})
			// A canceled payment frees its merchant reference.
			c.Check(servicetest.Exchange{Name: "201 the canceled payment's reference again", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-again"),
				Body: servicetest.Body("merchantReference", `"inv-x1"`), Status: 201, Headers: []string{"Location"}})
			// A payment refused before processing moved no money: canceled.
			if r := c.E.Post("pay-refused", servicetest.Body("merchantReference", `"inv-x4"`, "paymentMethod", `"pm_sim_unavailable"`)); r.Status != 503 {
				t.Fatalf("refused payment: %d %s", r.Status, r.Body)
			}
			var refused string
			if err := c.E.Pool.QueryRow(t.Context(), `SELECT id FROM payments WHERE merchant_reference = 'inv-x4'`).Scan(&refused); err != nil {
				t.Fatal(err)
			}
			if got := c.Check(servicetest.Exchange{Name: "200 cancel of a payment that moved no money", Method: "POST", Path: "/payments/" + refused + "/cancel",
				Header: servicetest.CreateHeaders(servicetest.SecretA, "x-6"), Body: `{}`, Status: 200, Headers: []string{"Location"}}); got.JSON(t)["status"] != "CANCELED" {
				t.Errorf("cancel of a refused payment: %s", got.Body)
			}
		}},
		servicetest.SpecGroup{Name: "capture and cancel outcomes unknown or refused", Options: []servicetest.Option{servicetest.WithProviderTimeout(300 * time.Millisecond), withActionFaults(faults)}, Run: func(t *testing.T, c *servicetest.Conformance) {
			lost := "/payments/" + c.E.ManualPayment("pm_sim_capture_timeout_after_success", "inv-u1")
			r := c.Check(servicetest.Exchange{Name: "202 capture outcome unknown", Method: "POST", Path: lost + "/capture", Header: servicetest.CreateHeaders(servicetest.SecretA, "c-1"),
				Body: `{}`, Status: 202, Headers: []string{"Location", "Retry-After"}})
			if got := r.JSON(t)["status"]; got != "PROCESSING" {
				t.Errorf("202 with status %v, want PROCESSING", got)
			}
			c.Check(servicetest.Exchange{Name: "200 get a payment whose capture is in doubt", Method: "GET", Path: lost, Header: servicetest.Bearer(servicetest.SecretA), Status: 200})
			c.Check(servicetest.Exchange{Name: "409 capture in flight: not capturable", Method: "POST", Path: lost + "/capture", Header: servicetest.CreateHeaders(servicetest.SecretA, "c-2"),
				Body: `{}`, Status: 409, Code: "PAYMENT_NOT_CAPTURABLE"})
			c.Check(servicetest.Exchange{Name: "409 capture in flight: not cancelable", Method: "POST", Path: lost + "/cancel", Header: servicetest.CreateHeaders(servicetest.SecretA, "x-1"),
				Body: `{}`, Status: 409, Code: "PAYMENT_NOT_CANCELABLE"})

			voidLost := c.E.ManualPayment("pm_card_visa", "inv-u2")
			faults.loseVoid(voidLost)
			r = c.Check(servicetest.Exchange{Name: "202 cancel outcome unknown", Method: "POST", Path: "/payments/" + voidLost + "/cancel", Header: servicetest.CreateHeaders(servicetest.SecretA, "x-2"),
				Body: `{}`, Status: 202, Headers: []string{"Location", "Retry-After"}})
			if got := r.JSON(t)["status"]; got != "PROCESSING" {
				t.Errorf("202 with status %v, want PROCESSING", got)
			}

			refused := c.E.ManualPayment("pm_card_visa", "inv-u3")
			faults.refuseCapture(refused)
			c.Check(servicetest.Exchange{Name: "503 capture refused by the provider", Method: "POST", Path: "/payments/" + refused + "/capture", Header: servicetest.CreateHeaders(servicetest.SecretA, "c-3"),
				Body: `{}`, Status: 503, Code: "PROVIDER_UNAVAILABLE", Headers: []string{"Retry-After"}})
		}},
		servicetest.SpecGroup{Name: "capture in flight", Options: []servicetest.Option{withActionFaults(held)}, Run: func(t *testing.T, c *servicetest.Conformance) {
			id := c.E.ManualPayment("pm_card_visa", "inv-f1")
			release := held.holdCapture(id)
			original := servicetest.Exchange{Name: "200 held capture", Method: "POST", Path: "/payments/" + id + "/capture", Header: servicetest.CreateHeaders(servicetest.SecretA, "c-held"),
				Body: `{"amount":"5.00"}`, Status: 200, Headers: []string{"Location"}}
			var answer servicetest.Response
			done := make(chan struct{})
			go func() { defer close(done); answer = c.Send(original) }()
			defer func() { release(); <-done }() // never leave the original running past the test
			servicetest.WaitFor(t, func() bool { return c.E.Count("payment_actions WHERE state = 'PROVIDER_REQUEST_SENT'") == 1 })
			inUse := original
			inUse.Name, inUse.Status, inUse.Code, inUse.Headers = "409 capture key in use", 409, "IDEMPOTENCY_KEY_IN_USE", []string{"Retry-After"}
			c.Check(inUse)
			release()
			<-done
			c.Verify(original, answer)
			c.Check(servicetest.Exchange{Name: "200 capture replayed after the original finished", Method: "POST", Path: original.Path, Header: original.Header,
				Body: original.Body, Status: 200, Headers: []string{"Location", "Idempotent-Replayed"}, Replayed: true})
		}},
		servicetest.SpecGroup{Name: "capture and cancel keys past their replay window, authorization past its expiry", Run: func(t *testing.T, c *servicetest.Conformance) {
			captured := "/payments/" + c.E.ManualPayment("pm_card_visa", "inv-e1") + "/capture"
			c.Check(servicetest.Exchange{Name: "200 capture", Method: "POST", Path: captured, Header: servicetest.CreateHeaders(servicetest.SecretA, "c-old"),
				Body: `{}`, Status: 200, Headers: []string{"Location"}})
			canceled := "/payments/" + c.E.ManualPayment("pm_card_visa", "inv-e2") + "/cancel"
			c.Check(servicetest.Exchange{Name: "200 cancel", Method: "POST", Path: canceled, Header: servicetest.CreateHeaders(servicetest.SecretA, "x-old"),
				Body: `{}`, Status: 200, Headers: []string{"Location"}})
			expiring := c.E.Post("k-e3", servicetest.ManualBody("inv-e3", "pm_card_visa"))
			if expiring.Status != http.StatusCreated {
				t.Fatalf("manual payment: %d %s", expiring.Status, expiring.Body)
			}
			c.E.Clock.Advance(c.E.Config.ReplayTTL)
			c.Check(servicetest.Exchange{Name: "409 capture key expired", Method: "POST", Path: captured, Header: servicetest.CreateHeaders(servicetest.SecretA, "c-old"),
				Body: `{}`, Status: 409, Code: "IDEMPOTENCY_KEY_EXPIRED", Members: []string{"captureId"}})
			c.Check(servicetest.Exchange{Name: "409 cancel key expired", Method: "POST", Path: canceled, Header: servicetest.CreateHeaders(servicetest.SecretA, "x-old"),
				Body: `{}`, Status: 409, Code: "IDEMPOTENCY_KEY_EXPIRED", Members: []string{"cancellationId"}})

			expiresAt, err := time.Parse(time.RFC3339Nano, expiring.JSON(t)["authorizationExpiresAt"].(string))
			if err != nil {
				t.Fatal(err)
			}
			c.E.Clock.Advance(expiresAt.Sub(c.E.Clock.Now()) + time.Second)
			payment := expiring.Header.Get("Location")
			c.Check(servicetest.Exchange{Name: "409 capture after the authorization expired", Method: "POST", Path: payment + "/capture", Header: servicetest.CreateHeaders(servicetest.SecretA, "c-late"),
				Body: `{}`, Status: 409, Code: "AUTHORIZATION_EXPIRED"})
			// A cancel still voids it (the service would have, at the expiry).
			c.Check(servicetest.Exchange{Name: "200 cancel after the authorization expired", Method: "POST", Path: payment + "/cancel", Header: servicetest.CreateHeaders(servicetest.SecretA, "x-late"),
				Body: `{}`, Status: 200, Headers: []string{"Location"}})
		}},
	)
}

// actionFaults is the provider with faults in the captures and voids of
// the payments it is told: a void whose answer is lost after the provider
// voided, a capture the provider refuses before processing, a capture held
// until released.
type actionFaults struct {
	provider.Provider
	mu           sync.Mutex
	lostVoids    map[string]bool
	refused      map[string]bool
	heldCaptures map[string]chan struct{}
}

// withActionFaults puts f between the service and the simulator.
func withActionFaults(f *actionFaults) servicetest.Option {
	return servicetest.WithProvider(func(p provider.Provider) provider.Provider { f.Provider = p; return f })
}

func (f *actionFaults) loseVoid(paymentID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lostVoids == nil {
		f.lostVoids = map[string]bool{}
	}
	f.lostVoids[paymentID] = true
}

func (f *actionFaults) refuseCapture(paymentID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refused == nil {
		f.refused = map[string]bool{}
	}
	f.refused[paymentID] = true
}

// holdCapture holds the captures of the payment until release is called
// (once or more).
func (f *actionFaults) holdCapture(paymentID string) (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.heldCaptures == nil {
		f.heldCaptures = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	f.heldCaptures[paymentID] = ch
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (f *actionFaults) Capture(ctx context.Context, req provider.CaptureRequest) (provider.Charge, error) {
	f.mu.Lock()
	refused, held := f.refused[req.PaymentID], f.heldCaptures[req.PaymentID]
	f.mu.Unlock()
	if refused {
		return provider.Charge{}, fmt.Errorf("injected: %w", provider.ErrUnavailable)
	}
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
			return provider.Charge{}, fmt.Errorf("held: %w", provider.ErrUnknownOutcome)
		}
	}
	return f.Provider.Capture(ctx, req)
}

func (f *actionFaults) Void(ctx context.Context, req provider.VoidRequest) (provider.Charge, error) {
	f.mu.Lock()
	lost := f.lostVoids[req.PaymentID]
	f.mu.Unlock()
	ch, err := f.Provider.Void(ctx, req)
	if err == nil && lost {
		return provider.Charge{}, fmt.Errorf("injected, after the provider voided: %w", provider.ErrUnknownOutcome)
	}
	return ch, err
}
