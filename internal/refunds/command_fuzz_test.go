package refunds

import (
	"bytes"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/money"
)

// FuzzFingerprintPairs checks the refund fingerprint on pairs of requests:
// for any two that validate, equal fingerprints ⇔ equal normalised
// commands. Request b starts as a copy of a; bit i of differ (0 to 3:
// paymentId, amount, currency, reason) takes that value from b's own, and
// bit 4 takes the presence of reason from b's. Seeds:
// testdata/fuzz/FuzzFingerprintPairs.
func FuzzFingerprintPairs(f *testing.F) {
	f.Fuzz(func(t *testing.T,
		paymentID, amount, currency, reason string, hasReason bool,
		bPaymentID, bAmount, bCurrency, bReason string, bHasReason bool,
		differ uint8,
	) {
		af := [4]string{paymentID, amount, currency, reason}
		bf := af
		for i, v := range [4]string{bPaymentID, bAmount, bCurrency, bReason} {
			if differ&(1<<i) != 0 {
				bf[i] = v
			}
		}
		if differ&(1<<4) == 0 {
			bHasReason = hasReason
		}
		a, b := fuzzRequest(af, hasReason), fuzzRequest(bf, bHasReason)
		ca, errA := a.Validate(af[0], af[2])
		cb, errB := b.Validate(bf[0], bf[2])
		if errA != nil || errB != nil {
			return // only a valid command has a fingerprint
		}
		if sameFP := bytes.Equal(ca.Fingerprint(), cb.Fingerprint()); sameFP != (ca == cb) {
			t.Fatalf("same fingerprint %v, but same command %v:\n a %+v -> %+v\n b %+v -> %+v", sameFP, ca == cb, a, ca, b, cb)
		}
	})
}

// fuzzRequest builds a request of amount f[1] with reason f[3] if hasReason.
func fuzzRequest(f [4]string, hasReason bool) CreateRequest {
	r := CreateRequest{Amount: money.Amount(f[1])}
	if hasReason {
		r.Reason = &f[3]
	}
	return r
}
