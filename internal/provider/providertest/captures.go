package providertest

import (
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// CapturesSubject is an adapter under the conformance cases of the Captures
// port: the provider, and how to make it behave.
type CapturesSubject struct {
	// Provider is the adapter. The cases authorize with its Charge and
	// refund with its Refund as well.
	Provider provider.Provider
	// Method is a payment method whose charges succeed (or are authorized,
	// with CaptureManual), and whose captures, voids and refunds succeed.
	Method string
	// CaptureDeclinedMethod is a payment method whose charges are
	// authorized but whose captures are declined; empty skips that case.
	CaptureDeclinedMethod string
	// Captures, when set, counts the captures the provider holds, so that
	// a case can prove that requests with one key made one capture.
	Captures func() int
}

// RunCaptures runs the conformance cases of the Captures port (and of
// CaptureManual on Charges, and of refunds of what was captured) as
// subtests of t, each against a new subject from newSubject. They are what
// provider.Captures documents, whatever the adapter.
func RunCaptures(t *testing.T, newSubject func(t *testing.T) CapturesSubject) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, s CapturesSubject)
	}{
		{"authorize", captureAuthorize},
		{"automatic charge is captured at once", captureAutomatic},
		{"capture", captureWhole},
		{"capture replayed by key", captureReplay},
		{"partial capture releases the rest", capturePartial},
		{"capture above the authorization", captureTooLarge},
		{"void", captureVoid},
		{"void of a captured charge", captureVoidCaptured},
		{"declined capture leaves the authorization", captureDeclined},
		{"refund of an authorization", captureRefundAuthorized},
		{"unknown charge", captureUnknownCharge},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newSubject(t)) })
	}
}

// authorize authorizes 10.00 EUR with method under key and returns the
// charge, failing the test unless it is authorized.
func authorize(t *testing.T, p provider.Provider, key, method string) provider.Charge {
	t.Helper()
	ch, err := p.Charge(Context(t, 5*time.Second), AuthorizeRequest(key, method))
	if err != nil || ch.Status != provider.StatusAuthorized || ch.ID == "" {
		t.Fatalf("authorize %q = %+v, %v; want requires_capture", key, ch, err)
	}
	return ch
}

// wantCharge fails the test unless GetCharge finds chargeID at status with
// captured of its 1000 minor units captured.
func wantCharge(t *testing.T, p provider.Provider, chargeID string, status provider.Status, captured int64) provider.Charge {
	t.Helper()
	ch, err := p.GetCharge(Context(t, 5*time.Second), chargeID)
	if err != nil || ch.ID != chargeID || ch.Status != status || ch.AmountCapturedMinor != captured || ch.AmountMinor != 1000 || ch.Currency != "EUR" {
		t.Fatalf("GetCharge(%s) = %+v, %v; want %s with %d of 1000 EUR captured", chargeID, ch, err, status, captured)
	}
	return ch
}

// wantVerdict fails the test unless a capture or void of chargeID answered
// status (and, for a decline, declineCode; any code but none when it is
// "*"), with a nil error.
func wantVerdict(t *testing.T, what string, ch provider.Charge, err error, chargeID string, status provider.Status, declineCode string) {
	t.Helper()
	switch {
	case err != nil:
		t.Fatalf("%s: %v; want %s", what, err, status)
	case ch.ID != chargeID || ch.Status != status:
		t.Fatalf("%s = %+v; want charge %s %s", what, ch, chargeID, status)
	case declineCode == "*" && ch.DeclineCode == "", declineCode != "*" && ch.DeclineCode != declineCode:
		t.Fatalf("%s = %+v; want decline code %q", what, ch, declineCode)
	}
}

func captureAuthorize(t *testing.T, s CapturesSubject) {
	p := s.Provider
	ch := authorize(t, p, "pay_1:charge", s.Method)
	if ch.AmountCapturedMinor != 0 || ch.AmountMinor != 1000 || ch.Currency != "EUR" || ch.IdempotencyKey != "pay_1:charge" {
		t.Errorf("authorization = %+v, want 10.00 EUR, nothing captured", ch)
	}
	again, err := p.Charge(Context(t, 5*time.Second), AuthorizeRequest("pay_1:charge", s.Method))
	if err != nil || again.ID != ch.ID || again.Status != provider.StatusAuthorized {
		t.Errorf("Charge again with the key = %+v, %v; want %s authorized", again, err, ch.ID)
	}
	if got := wantCharge(t, p, ch.ID, provider.StatusAuthorized, 0); got.IdempotencyKey != "pay_1:charge" {
		t.Errorf("GetCharge = %+v, want the charge's key", got)
	}
}

func captureAutomatic(t *testing.T, s CapturesSubject) {
	p := s.Provider
	ctx := Context(t, 5*time.Second)
	ch, err := p.Charge(ctx, ChargeRequest("pay_1:charge", s.Method))
	if err != nil || ch.Status != provider.StatusSucceeded || ch.AmountCapturedMinor != 1000 {
		t.Fatalf("Charge = %+v, %v; want succeeded with all of 1000 captured", ch, err)
	}
	wantCharge(t, p, ch.ID, provider.StatusSucceeded, 1000)
	got, err := p.Capture(ctx, CaptureRequest("cap_1", ch.ID, 1000))
	wantVerdict(t, "Capture", got, err, ch.ID, provider.StatusDeclined, "charge_already_captured")
	got, err = p.Void(ctx, VoidRequest("void_1", ch.ID))
	wantVerdict(t, "Void", got, err, ch.ID, provider.StatusDeclined, "charge_already_captured")
	wantCharge(t, p, ch.ID, provider.StatusSucceeded, 1000)
}

func captureWhole(t *testing.T, s CapturesSubject) {
	p := s.Provider
	ch := authorize(t, p, "pay_1:charge", s.Method)
	got, err := p.Capture(Context(t, 5*time.Second), CaptureRequest("cap_1", ch.ID, 1000))
	wantVerdict(t, "Capture", got, err, ch.ID, provider.StatusSucceeded, "")
	if got.AmountCapturedMinor != 1000 || got.AmountMinor != 1000 {
		t.Errorf("Capture = %+v, want 1000 of 1000 captured", got)
	}
	wantCharge(t, p, ch.ID, provider.StatusSucceeded, 1000)
}

func captureReplay(t *testing.T, s CapturesSubject) {
	p := s.Provider
	ch := authorize(t, p, "pay_1:charge", s.Method)
	ctx := Context(t, 5*time.Second)
	first, err := p.Capture(ctx, CaptureRequest("cap_1", ch.ID, 700))
	wantVerdict(t, "Capture", first, err, ch.ID, provider.StatusSucceeded, "")
	// The same key again, at once and concurrently: the same capture.
	const n = 8
	var wg sync.WaitGroup
	got := make([]provider.Charge, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = p.Capture(ctx, CaptureRequest("cap_1", ch.ID, 700)) })
	}
	wg.Wait()
	for i := range n {
		wantVerdict(t, "Capture replayed", got[i], errs[i], ch.ID, provider.StatusSucceeded, "")
		if got[i].AmountCapturedMinor != 700 {
			t.Errorf("replay %d = %+v, want 700 captured", i, got[i])
		}
	}
	if s.Captures != nil {
		if c := s.Captures(); c != 1 {
			t.Errorf("the provider holds %d captures, want 1", c)
		}
	}
	wantCharge(t, p, ch.ID, provider.StatusSucceeded, 700)
}

func capturePartial(t *testing.T, s CapturesSubject) {
	p := s.Provider
	ctx := Context(t, 5*time.Second)
	ch := authorize(t, p, "pay_1:charge", s.Method)
	got, err := p.Capture(ctx, CaptureRequest("cap_1", ch.ID, 600))
	wantVerdict(t, "Capture of 600", got, err, ch.ID, provider.StatusSucceeded, "")
	if got.AmountCapturedMinor != 600 || got.AmountMinor != 1000 {
		t.Errorf("Capture = %+v, want 600 of 1000 captured", got)
	}
	wantCharge(t, p, ch.ID, provider.StatusSucceeded, 600)
	// One capture per charge: the rest was released.
	got, err = p.Capture(ctx, CaptureRequest("cap_2", ch.ID, 400))
	wantVerdict(t, "a second capture", got, err, ch.ID, provider.StatusDeclined, "charge_already_captured")
	// Only what was captured can be refunded.
	rf, err := p.Refund(ctx, RefundRequest("re_1", ch.ID, 601))
	if err != nil || rf.Status != provider.StatusDeclined {
		t.Errorf("Refund of 601 of 600 captured = %+v, %v; want declined", rf, err)
	}
	rf, err = p.Refund(ctx, RefundRequest("re_2", ch.ID, 600))
	if err != nil || rf.Status != provider.StatusSucceeded {
		t.Errorf("Refund of the 600 captured = %+v, %v; want succeeded", rf, err)
	}
}

func captureTooLarge(t *testing.T, s CapturesSubject) {
	p := s.Provider
	ctx := Context(t, 5*time.Second)
	ch := authorize(t, p, "pay_1:charge", s.Method)
	got, err := p.Capture(ctx, CaptureRequest("cap_1", ch.ID, 1001))
	wantVerdict(t, "Capture of 1001 of 1000", got, err, ch.ID, provider.StatusDeclined, "*")
	wantCharge(t, p, ch.ID, provider.StatusAuthorized, 0)
	got, err = p.Capture(ctx, CaptureRequest("cap_2", ch.ID, 1000))
	wantVerdict(t, "Capture of 1000 then", got, err, ch.ID, provider.StatusSucceeded, "")
}

func captureVoid(t *testing.T, s CapturesSubject) {
	p := s.Provider
	ctx := Context(t, 5*time.Second)
	ch := authorize(t, p, "pay_1:charge", s.Method)
	got, err := p.Void(ctx, VoidRequest("void_1", ch.ID))
	wantVerdict(t, "Void", got, err, ch.ID, provider.StatusCanceled, "")
	if got.AmountCapturedMinor != 0 {
		t.Errorf("Void = %+v, want nothing captured", got)
	}
	wantCharge(t, p, ch.ID, provider.StatusCanceled, 0)
	again, err := p.Void(ctx, VoidRequest("void_1", ch.ID))
	wantVerdict(t, "Void replayed", again, err, ch.ID, provider.StatusCanceled, "")
	again, err = p.Void(ctx, VoidRequest("void_2", ch.ID))
	wantVerdict(t, "Void with another key", again, err, ch.ID, provider.StatusCanceled, "")
	got, err = p.Capture(ctx, CaptureRequest("cap_1", ch.ID, 1000))
	wantVerdict(t, "Capture of a voided charge", got, err, ch.ID, provider.StatusDeclined, "charge_canceled")
	if rf, err := p.Refund(ctx, RefundRequest("re_1", ch.ID, 100)); err != nil || rf.Status != provider.StatusDeclined {
		t.Errorf("Refund of a voided charge = %+v, %v; want declined", rf, err)
	}
	wantCharge(t, p, ch.ID, provider.StatusCanceled, 0)
}

func captureVoidCaptured(t *testing.T, s CapturesSubject) {
	p := s.Provider
	ctx := Context(t, 5*time.Second)
	ch := authorize(t, p, "pay_1:charge", s.Method)
	got, err := p.Capture(ctx, CaptureRequest("cap_1", ch.ID, 1000))
	wantVerdict(t, "Capture", got, err, ch.ID, provider.StatusSucceeded, "")
	got, err = p.Void(ctx, VoidRequest("void_1", ch.ID))
	wantVerdict(t, "Void of a captured charge", got, err, ch.ID, provider.StatusDeclined, "charge_already_captured")
	wantCharge(t, p, ch.ID, provider.StatusSucceeded, 1000)
}

func captureDeclined(t *testing.T, s CapturesSubject) {
	if s.CaptureDeclinedMethod == "" {
		t.Skip("the subject has no payment method whose captures are declined")
	}
	p := s.Provider
	ctx := Context(t, 5*time.Second)
	ch := authorize(t, p, "pay_1:charge", s.CaptureDeclinedMethod)
	got, err := p.Capture(ctx, CaptureRequest("cap_1", ch.ID, 1000))
	wantVerdict(t, "Capture", got, err, ch.ID, provider.StatusDeclined, "*")
	again, err := p.Capture(ctx, CaptureRequest("cap_1", ch.ID, 1000))
	wantVerdict(t, "Capture replayed", again, err, ch.ID, provider.StatusDeclined, got.DeclineCode)
	wantCharge(t, p, ch.ID, provider.StatusAuthorized, 0)
	got, err = p.Void(ctx, VoidRequest("void_1", ch.ID))
	wantVerdict(t, "Void", got, err, ch.ID, provider.StatusCanceled, "")
}

func captureRefundAuthorized(t *testing.T, s CapturesSubject) {
	p := s.Provider
	ch := authorize(t, p, "pay_1:charge", s.Method)
	if rf, err := p.Refund(Context(t, 5*time.Second), RefundRequest("re_1", ch.ID, 100)); err != nil || rf.Status != provider.StatusDeclined {
		t.Errorf("Refund of an uncaptured authorization = %+v, %v; want declined", rf, err)
	}
	wantCharge(t, p, ch.ID, provider.StatusAuthorized, 0)
}

func captureUnknownCharge(t *testing.T, s CapturesSubject) {
	_, err := s.Provider.GetCharge(Context(t, 5*time.Second), "ch_unknown")
	WantOnly(t, "GetCharge of an unknown id", err, provider.ErrNotFound)
}
