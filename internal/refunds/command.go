package refunds

import (
	"crypto/sha256"
	"strconv"

	"github.com/paymentsapi/paymentsapi/internal/jsontext"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// OperationCreate names the create-refund operation in every key's scope:
// the same key string used for a payment and for a refund are two keys.
const OperationCreate = "create_refund"

// APIVersion is the version of the request semantics.
const APIVersion = "2026-11-23"

var reasons = map[string]bool{"requested_by_customer": true, "duplicate": true, "fraudulent": true}

// CreateRequest is the JSON body of POST /payments/{id}/refunds.
type CreateRequest struct {
	Amount money.Amount `json:"amount"`
	Reason *string      `json:"reason"`
}

// Command is a validated, normalised create-refund command.
type Command struct {
	PaymentID   string
	AmountMinor int64
	Currency    string // the payment's
	Reason      string
	// AccountID is the payment's, for the refund's events (Service.Prepare
	// fills it). Not part of the command's identity: a payment's account
	// never changes.
	AccountID string
}

// Validate checks r for a refund of paymentID, whose currency is currency.
func (r CreateRequest) Validate(paymentID, currency string) (Command, error) {
	var errs validate.Collector
	cmd := Command{PaymentID: paymentID, Currency: currency}
	if r.Amount == "" {
		errs.Add("amount", "is required")
	} else if minor, err := money.Parse(string(r.Amount), currency); err != nil {
		exp, _ := money.Exponent(currency)
		errs.Add("amount", "must be a decimal string greater than zero with at most "+strconv.Itoa(exp)+
			" fraction digits for "+currency+", the payment's currency")
	} else {
		cmd.AmountMinor = minor
	}
	if r.Reason != nil {
		if !reasons[*r.Reason] {
			errs.Add("reason", "must be one of requested_by_customer, duplicate, fraudulent")
		}
		cmd.Reason = *r.Reason
	}
	if err := errs.Err(); err != nil {
		return Command{}, err
	}
	return cmd, nil
}

// Fingerprint is the one definition of "the same refund command".
func (c Command) Fingerprint() []byte {
	sum := sha256.Sum256(jsontext.Array(OperationCreate, APIVersion, c.PaymentID, c.AmountMinor, c.Currency, c.Reason))
	return sum[:]
}
