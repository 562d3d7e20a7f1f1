package payments

import (
	"crypto/sha256"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/paymentsapi/paymentsapi/internal/carddata"
	"github.com/paymentsapi/paymentsapi/internal/jsontext"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// OperationCreate names the create-payment operation. It is part of every
// idempotency key's scope and of every command fingerprint.
//
// It was renamed from "payments.create" to the one naming scheme of the
// other operations (verb_noun), in three releases (docs/operations.md,
// "Migrations"): the first read keys under both names and wrote the old
// one (idempotency.Renamed); the second wrote the new name, still read
// both, and its migration (00027) moved the stored keys over; this one
// reads the new name only, after its migration (00028) moved the keys the
// first release wrote while the second rolled out. The fingerprint keeps
// the old name's letters for ever (fingerprintName): a stored key's
// fingerprint must still match its retries.
const OperationCreate = "create_payment"

// fingerprintName is the operation's name as every fingerprint holds it.
const fingerprintName = "payments.create"

// APIVersion is the version of the request semantics. Changing what a field
// means must change this, so that old keys never match new commands.
const APIVersion = "2026-11-01"

// Channels a payment may come from. The default is ChannelWeb.
var channels = map[string]bool{"web": true, "mobile": true, "pos": true, "api": true}

// ChannelWeb is the default channel.
const ChannelWeb = "web"

// Field limits.
const (
	maxIDLength          = 128
	maxDescriptionLength = 1024
	maxReturnURLLength   = 2048
)

// CreateRequest is the JSON body of POST /payments, as the client sent it.
type CreateRequest struct {
	AccountID         string       `json:"accountId"`
	Amount            money.Amount `json:"amount"`
	Currency          string       `json:"currency"`
	MerchantReference string       `json:"merchantReference"`
	PaymentMethod     string       `json:"paymentMethod"`
	Channel           *string      `json:"channel"`
	Description       *string      `json:"description"`
	CaptureMethod     *string      `json:"captureMethod"`
	ReturnURL         *string      `json:"returnUrl"`
}

// The capture methods of a payment: captured when the provider accepts it
// (the default), or only authorized until an operation on it captures it
// (internal/authorizations).
const (
	CaptureAutomatic = "automatic"
	CaptureManual    = "manual"
)

// Command is a validated, normalised create-payment command: defaults
// applied, the amount in minor units, the currency upper-cased. Two requests
// are the same command exactly when their Commands are equal.
type Command struct {
	AccountID         string
	AmountMinor       int64
	Currency          string
	MerchantReference string
	PaymentMethod     string
	Channel           string
	Description       string
	CaptureMethod     string // CaptureAutomatic or CaptureManual
	// ReturnURL is where the customer goes once an authentication the
	// provider asks for (3-D Secure) is over; "" for none.
	ReturnURL string
}

// Check is Validate's verdict alone (operation.Checked).
func (r *CreateRequest) Check() error {
	_, err := r.Validate()
	return err
}

// Validate checks a request and returns the normalised Command, or a
// *validate.Error naming every invalid field.
func (r CreateRequest) Validate() (Command, error) {
	var errs validate.Collector
	add := errs.Add

	reference := normalReference(r.MerchantReference)
	for _, id := range []struct{ field, v string }{
		{"accountId", r.AccountID}, {"merchantReference", reference}, {"paymentMethod", r.PaymentMethod},
	} {
		if msg := idProblem(id.v); msg != "" {
			add(id.field, msg)
		}
	}
	// The service takes payment method tokens only: anything else in the
	// field may be a card's number, written some way the detector of the
	// text fields does not know.
	if r.PaymentMethod != "" && !carddata.IsToken(r.PaymentMethod) {
		errs.AddCardData("paymentMethod", "must be a payment method token (pm_, tok_, card_ or src_, then letters, digits "+
			"and underscores, at most 128 characters), never card data")
	}

	cmd := Command{
		AccountID:         r.AccountID,
		MerchantReference: reference,
		PaymentMethod:     r.PaymentMethod,
		Channel:           ChannelWeb,
		CaptureMethod:     CaptureAutomatic,
	}

	currency, err := money.NormalizeCurrency(r.Currency)
	switch {
	case r.Currency == "":
		add("currency", "is required")
	case err != nil:
		add("currency", "must be a supported ISO 4217 code such as EUR, USD or JPY")
	default:
		cmd.Currency = currency
	}

	switch {
	case r.Amount == "":
		add("amount", "is required")
	case cmd.Currency != "":
		minor, err := money.Parse(string(r.Amount), cmd.Currency)
		if err != nil {
			exp, _ := money.Exponent(cmd.Currency)
			add("amount", "must be a decimal string greater than zero with at most "+
				strconv.Itoa(exp)+" fraction digits for "+cmd.Currency)
		}
		cmd.AmountMinor = minor
	}

	if r.Channel != nil {
		if !channels[*r.Channel] {
			add("channel", "must be one of web, mobile, pos, api")
		}
		cmd.Channel = *r.Channel
	}
	if r.Description != nil {
		d := *r.Description
		if utf8.RuneCountInString(d) > maxDescriptionLength || !validate.StorableText(d) {
			add("description", "must be valid text of at most 1024 characters, without NUL")
		}
		cmd.Description = d
	}

	if r.CaptureMethod != nil {
		if *r.CaptureMethod != CaptureAutomatic && *r.CaptureMethod != CaptureManual {
			add("captureMethod", "must be one of automatic, manual")
		}
		cmd.CaptureMethod = *r.CaptureMethod
	}

	if r.ReturnURL != nil {
		if msg := returnURLProblem(*r.ReturnURL); msg != "" {
			add("returnUrl", msg)
		}
		cmd.ReturnURL = *r.ReturnURL
	}

	if err := errs.Err(); err != nil {
		return Command{}, err
	}
	return cmd, nil
}

// returnURLProblem is what is wrong with u as a returnUrl, or "": an
// absolute http or https URL with a host, without credentials or a
// fragment. Whether http is allowed depends on the service's mode
// (Service.Create refuses it outside dev mode).
func returnURLProblem(u string) string {
	parsed, err := url.Parse(u)
	switch {
	case err != nil || len(u) > maxReturnURLLength || !printable(u) || parsed.Host == "" ||
		(parsed.Scheme != "https" && parsed.Scheme != "http"):
		return "must be an absolute https URL of at most 2048 characters"
	case parsed.User != nil:
		return "must not hold credentials"
	case parsed.Fragment != "" || strings.Contains(u, "#"):
		return "must not have a fragment"
	}
	return ""
}

// Fingerprint is the one definition of "the same command": a SHA-256 over
// the operation, the API version and every semantic field of the normalised
// command. Raw bytes, field order and white space never enter it. The
// capture method enters it only when it is manual, so that an automatic
// command hashes as it did before the field existed: keys stored then still
// match their retries.
func (c Command) Fingerprint() []byte {
	sum := sha256.Sum256(c.canonical())
	return sum[:]
}

// canonical is the command's canonical form: the JSON array (fixed order:
// no field-order ambiguity) of fingerprintName, APIVersion, accountId, the
// amount in minor units, currency, merchantReference, paymentMethod,
// channel, description and, for a manual capture only, its capture method;
// a command with a returnUrl ends with its capture method, whatever it is,
// and its returnUrl, so that no command without one has as many members.
// Fingerprints are stored, so these bytes must never change
// (TestTheCanonicalFormIsMarshals holds them to what json.Marshal wrote).
func (c Command) canonical() []byte {
	parts := []any{fingerprintName, APIVersion, c.AccountID, c.AmountMinor, c.Currency, c.MerchantReference,
		c.PaymentMethod, c.Channel, c.Description}
	switch {
	case c.ReturnURL != "":
		parts = append(parts, c.CaptureMethod, c.ReturnURL)
	case c.CaptureMethod == CaptureManual:
		parts = append(parts, c.CaptureMethod)
	}
	return jsontext.Array(parts...)
}

// normalReference is a merchant reference as it is compared, and so stored,
// fingerprinted and looked for (GET /payments?merchantReference=): in
// Unicode's composed form (NFC), so that "é" typed as one code point or as
// "e" and a combining accent is one reference, as it reads.
func normalReference(s string) string { return norm.NFC.String(s) }

// idProblem is what is wrong with v as an identifier a client gives
// (accountId, merchantReference, paymentMethod), in a body or in a query
// (GET /payments?accountId=), or "" if nothing is: the one rule of both.
func idProblem(v string) string {
	switch {
	case v == "":
		return "is required"
	case utf8.RuneCountInString(v) > maxIDLength:
		return "must be at most 128 characters"
	case !printable(v):
		return "must be printable text"
	}
	return ""
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return utf8.ValidString(s)
}
