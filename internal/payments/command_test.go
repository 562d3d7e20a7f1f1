package payments

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

func ptr(s string) *string { return &s }

func TestFingerprintIsTheNormalisedCommand(t *testing.T) {
	base := CreateRequest{AccountID: "acc_1", Amount: "10.00", Currency: "EUR", MerchantReference: "r", PaymentMethod: "pm_card_visa"}
	fp := func(r CreateRequest) []byte {
		t.Helper()
		c, err := r.Validate()
		if err != nil {
			t.Fatal(err)
		}
		return c.Fingerprint()
	}
	same := []CreateRequest{base}
	for _, mod := range []func(*CreateRequest){
		func(r *CreateRequest) { r.Amount = "10" },
		func(r *CreateRequest) { r.Amount = "10.0" },
		func(r *CreateRequest) { r.Currency = "eur" },
		func(r *CreateRequest) { r.Channel = ptr("web") },
		func(r *CreateRequest) { r.Description = ptr("") },
	} {
		r := base
		mod(&r)
		same = append(same, r)
	}
	for i, r := range same {
		if !bytes.Equal(fp(r), fp(base)) {
			t.Errorf("equivalent request %d has another fingerprint", i)
		}
	}
	for name, mod := range map[string]func(*CreateRequest){
		"amount":      func(r *CreateRequest) { r.Amount = "10.01" },
		"currency":    func(r *CreateRequest) { r.Currency = "USD" },
		"account":     func(r *CreateRequest) { r.AccountID = "acc_2" },
		"reference":   func(r *CreateRequest) { r.MerchantReference = "r2" },
		"method":      func(r *CreateRequest) { r.PaymentMethod = "pm_card_mastercard" },
		"channel":     func(r *CreateRequest) { r.Channel = ptr("pos") },
		"description": func(r *CreateRequest) { r.Description = ptr("x") },
		// Field boundaries cannot be shifted between fields.
		"shifted": func(r *CreateRequest) { r.AccountID, r.MerchantReference = "acc_", "1r" },
	} {
		r := base
		mod(&r)
		c, err := r.Validate()
		if err != nil {
			continue // an invalid request has no fingerprint to collide with
		}
		if bytes.Equal(c.Fingerprint(), fp(base)) {
			t.Errorf("different %s, same fingerprint", name)
		}
	}
}

func BenchmarkValidateAndFingerprint(b *testing.B) {
	r := CreateRequest{AccountID: "acc_1", Amount: "10.00", Currency: "eur", MerchantReference: "invoice-7781",
		PaymentMethod: "pm_card_visa", Description: ptr("a description")}
	b.ReportAllocs()
	for b.Loop() {
		c, err := r.Validate()
		if err != nil {
			b.Fatal(err)
		}
		_ = c.Fingerprint()
	}
}

// The canonical form is, byte for byte, what json.Marshal wrote of the
// command's fields before it was written by hand: the fingerprints of keys
// stored by earlier releases must still match their retries.
func TestTheCanonicalFormIsMarshals(t *testing.T) {
	marshaled := func(c Command) []byte { // the form as every earlier release wrote it
		fields := []any{fingerprintName, APIVersion, c.AccountID, c.AmountMinor, c.Currency, c.MerchantReference,
			c.PaymentMethod, c.Channel, c.Description}
		if c.CaptureMethod == CaptureManual {
			fields = append(fields, c.CaptureMethod)
		}
		b, err := json.Marshal(fields)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	texts := []string{"", "acc_1", `q"u\o<t>e&`, "é 💳 \u2028", "tab\t\x01", "\xff"}
	rng := rand.New(rand.NewPCG(16, 22))
	for i := range 3000 {
		pick := func() string { return texts[rng.IntN(len(texts))] }
		c := Command{AccountID: pick(), AmountMinor: rng.Int64N(1<<53) - 1<<52, Currency: pick(), MerchantReference: pick(),
			PaymentMethod: pick(), Channel: pick(), Description: pick(), CaptureMethod: []string{"", CaptureAutomatic, CaptureManual}[i%3]}
		if got, want := c.canonical(), marshaled(c); !bytes.Equal(got, want) {
			t.Fatalf("canonical form of %+v:\n got %s\nwant %s", c, got, want)
		}
	}
}

// HeldAs names the action HeldFor holds a payment for, by its state, and
// none in a state no action requested.
func TestHeldAsIsTheActionOfTheState(t *testing.T) {
	held := 0
	for _, s := range []State{StateReceived, StateProviderRequestSent, StateCompleted, StateDeclined, StateFailedRetryable,
		StateUnknown, StateCanceled, StateAuthorized, StateCaptureRequested, StateVoidRequested, StateCancelRequested} {
		p := Payment{State: s}
		a, ok := p.HeldAs()
		for _, b := range []Action{ActionCapture, ActionVoid} {
			if p.HeldFor(b, "") != (ok && a == b) {
				t.Errorf("%s: HeldAs %q %v, but HeldFor(%s) %v", s, a, ok, b, p.HeldFor(b, ""))
			}
		}
		if ok {
			held++
		}
	}
	if held != 2 {
		t.Errorf("%d states held, want 2 (capture and void requested)", held)
	}
}
