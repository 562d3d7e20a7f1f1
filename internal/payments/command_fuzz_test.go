package payments

import (
	"bytes"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/money"
)

// FuzzFingerprintPairs checks the fingerprint on pairs of requests: for any
// two that validate, equal fingerprints ⇔ equal normalised commands. Request
// b starts as a copy of a; bit i of differ (0 to 6: accountId, amount,
// currency, merchantReference, paymentMethod, channel, description) takes
// that field from b's own values instead, and bit 7 takes the presence of
// channel and description from b's presence bits, so the fuzzer explores
// pairs that differ in one field as easily as pairs that differ in all.
// Seeds: testdata/fuzz/FuzzFingerprintPairs.
func FuzzFingerprintPairs(f *testing.F) {
	f.Fuzz(func(t *testing.T,
		account, amount, currency, reference, method, channel, description string, present uint8,
		bAccount, bAmount, bCurrency, bReference, bMethod, bChannel, bDescription string, bPresent uint8,
		differ uint8,
	) {
		af := [7]string{account, amount, currency, reference, method, channel, description}
		bf := af
		for i, v := range [7]string{bAccount, bAmount, bCurrency, bReference, bMethod, bChannel, bDescription} {
			if differ&(1<<i) != 0 {
				bf[i] = v
			}
		}
		if differ&(1<<7) == 0 {
			bPresent = present
		}
		a, b := fuzzRequest(af, present), fuzzRequest(bf, bPresent)
		ca, errA := a.Validate()
		cb, errB := b.Validate()
		if errA != nil || errB != nil {
			return // only a valid command has a fingerprint
		}
		if sameFP := bytes.Equal(ca.Fingerprint(), cb.Fingerprint()); sameFP != (ca == cb) {
			t.Fatalf("same fingerprint %v, but same command %v:\n a %+v -> %+v\n b %+v -> %+v", sameFP, ca == cb, a, ca, b, cb)
		}
	})
}

// fuzzRequest builds a request from its seven fields; bits 0 and 1 of
// present say whether channel and description are sent.
func fuzzRequest(f [7]string, present uint8) CreateRequest {
	r := CreateRequest{AccountID: f[0], Amount: money.Amount(f[1]), Currency: f[2], MerchantReference: f[3], PaymentMethod: f[4]}
	if present&1 != 0 {
		r.Channel = &f[5]
	}
	if present&2 != 0 {
		r.Description = &f[6]
	}
	return r
}
