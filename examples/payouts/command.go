package payouts

import (
	"crypto/sha256"
	"regexp"

	"github.com/paymentsapi/paymentsapi/internal/jsontext"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// OperationCreate names the create-payout operation in every key's scope.
const OperationCreate = "create_payout"

// APIVersion is the version of the request semantics: part of the
// fingerprint, so that a change of meaning never replays an old answer.
const APIVersion = "2026-12-02"

// CreateRequest is the JSON body of POST /payouts.
type CreateRequest struct {
	AccountID   string       `json:"accountId"`
	Amount      money.Amount `json:"amount"`
	Currency    string       `json:"currency"`
	Destination string       `json:"destination"`
}

// Command is a validated, normalised create-payout command.
type Command struct {
	AccountID   string
	AmountMinor int64
	Currency    string
	Destination string
}

// A bank account's id: ba_ and letters, digits or underscores.
var destinationPattern = regexp.MustCompile(`^ba_[A-Za-z0-9_]{1,60}$`)

// Validate checks r and returns its command, or a *validate.Error naming
// every field at fault.
func (r CreateRequest) Validate() (Command, error) {
	var errs validate.Collector
	var cmd Command
	if r.AccountID == "" || len(r.AccountID) > 64 || !validate.StorableText(r.AccountID) {
		errs.Add("accountId", "is required, as text of at most 64 bytes")
	}
	cmd.AccountID = r.AccountID
	currency, err := money.NormalizeCurrency(r.Currency)
	if err != nil {
		errs.Add("currency", "must be an ISO 4217 code")
	} else if r.Amount == "" {
		errs.Add("amount", "is required")
	} else if cmd.AmountMinor, err = money.Parse(string(r.Amount), currency); err != nil {
		errs.Add("amount", "must be a decimal string greater than zero with no more fraction digits than the currency has")
	}
	cmd.Currency = currency
	if !destinationPattern.MatchString(r.Destination) {
		errs.Add("destination", "must be a bank account id (ba_...)")
	}
	cmd.Destination = r.Destination
	if err := errs.Err(); err != nil {
		return Command{}, err
	}
	return cmd, nil
}

// Fingerprint is the one definition of "the same payout command".
func (c Command) Fingerprint() []byte {
	sum := sha256.Sum256(jsontext.Array(OperationCreate, APIVersion, c.AccountID, c.AmountMinor, c.Currency, c.Destination))
	return sum[:]
}
