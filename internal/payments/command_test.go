package payments

import (
	"bytes"
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
