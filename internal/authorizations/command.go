package authorizations

import (
	"crypto/sha256"
	"strconv"

	"github.com/paymentsapi/paymentsapi/internal/jsontext"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// APIVersion is the version of the two commands' semantics.
const APIVersion = "2026-11-26"

// CaptureRequest is the JSON body of POST /payments/{id}/capture; it may be
// absent (the whole capturable amount).
type CaptureRequest struct {
	Amount *money.Amount `json:"amount"`
}

// CancelRequest is the JSON body of POST /payments/{id}/cancel; it may be
// absent.
type CancelRequest struct {
	Reason *string `json:"reason"`
}

var reasons = map[string]bool{"requested_by_customer": true, "duplicate": true, "fraudulent": true, "abandoned": true}

// Command is a validated, normalised capture or cancel command.
type Command struct {
	PaymentID   string
	AmountMinor int64  // a capture's: the amount asked, or the payment's whole amount
	Currency    string // the payment's
	Reason      string // a cancel's
}

// validateCapture checks r for a capture of p. An omitted amount is the
// whole amount the payment may capture, so it is the same command as that
// amount written out.
func (r CaptureRequest) validate(p payments.Payment) (Command, error) {
	cmd := Command{PaymentID: p.ID, Currency: p.Command.Currency, AmountMinor: p.Command.AmountMinor}
	if r.Amount == nil {
		return cmd, nil
	}
	var errs validate.Collector
	minor, err := money.Parse(string(*r.Amount), cmd.Currency)
	if err != nil {
		exp, _ := money.Exponent(cmd.Currency)
		errs.Add("amount", "must be a decimal string greater than zero with at most "+strconv.Itoa(exp)+
			" fraction digits for "+cmd.Currency+", the payment's currency")
	}
	cmd.AmountMinor = minor
	return cmd, errs.Err()
}

// validate checks r for a cancel of p.
func (r CancelRequest) validate(p payments.Payment) (Command, error) {
	cmd := Command{PaymentID: p.ID, Currency: p.Command.Currency}
	if r.Reason == nil {
		return cmd, nil
	}
	var errs validate.Collector
	if !reasons[*r.Reason] {
		errs.Add("reason", "must be one of requested_by_customer, duplicate, fraudulent, abandoned")
	}
	cmd.Reason = *r.Reason
	return cmd, errs.Err()
}

// fingerprint is the one definition of "the same command" of operation.
func (c Command) fingerprint(operation string) []byte {
	sum := sha256.Sum256(jsontext.Array(operation, APIVersion, c.PaymentID, c.AmountMinor, c.Currency, c.Reason))
	return sum[:]
}
