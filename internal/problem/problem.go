// Package problem renders errors as RFC 9457 problem details
// (application/problem+json), each with a stable machine-readable code.
//
// It holds the codes every operation shares (the idempotency protocol,
// validation, authentication, the provider and the database being
// unavailable); an operation declares its own codes and titles in its
// package (Titled) and names its resources in extension members (Set).
package problem

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// ContentType is the media type of a problem document.
const ContentType = "application/problem+json"

// Code is a stable, machine-readable error code. Clients branch on it; it
// never changes meaning.
type Code string

// The codes every operation may answer with.
const (
	IdempotencyKeyMissing Code = "IDEMPOTENCY_KEY_MISSING"
	IdempotencyKeyInvalid Code = "IDEMPOTENCY_KEY_INVALID"
	IdempotencyKeyInUse   Code = "IDEMPOTENCY_KEY_IN_USE"
	IdempotencyKeyReused  Code = "IDEMPOTENCY_KEY_REUSED"
	IdempotencyKeyExpired Code = "IDEMPOTENCY_KEY_EXPIRED"
	RateLimited           Code = "RATE_LIMITED"
	ProviderUnavailable   Code = "PROVIDER_UNAVAILABLE"
	ServiceUnavailable    Code = "SERVICE_UNAVAILABLE"
	MalformedJSON         Code = "MALFORMED_JSON"
	ValidationFailed      Code = "VALIDATION_FAILED"
	PayloadTooLarge       Code = "PAYLOAD_TOO_LARGE"
	UnsupportedMediaType  Code = "UNSUPPORTED_MEDIA_TYPE"
	Unauthorized          Code = "UNAUTHORIZED"
	// TooManyFailedAuthentications: the client's address failed
	// authentication too often; it is refused whatever its key.
	TooManyFailedAuthentications Code = "TOO_MANY_FAILED_AUTHENTICATIONS"
	NotFound                     Code = "NOT_FOUND"
	MethodNotAllowed             Code = "METHOD_NOT_ALLOWED"
	WebhookSignatureInvalid      Code = "WEBHOOK_SIGNATURE_INVALID"
	WebhookURLForbidden          Code = "WEBHOOK_URL_FORBIDDEN"
	Internal                     Code = "INTERNAL"
	// CardDataRefused: a field holds a card number, or a payment method
	// is not a token; nothing of the request was kept.
	CardDataRefused Code = "CARD_DATA_REFUSED"
	// OperatorsOnly: a tenant's API key asked for what only an operator
	// (OPERATOR_KEYS) may read, such as the audit log.
	OperatorsOnly Code = "OPERATORS_ONLY"
	// AmountNotSupportedByProvider: the provider's currency rules refuse
	// the amount (BHD amounts must end in 0 at Stripe); nothing was
	// stored or sent.
	AmountNotSupportedByProvider Code = "AMOUNT_NOT_SUPPORTED_BY_PROVIDER"
	// UnknownTestPaymentMethod: the provider simulator has no such test
	// payment method; nothing was stored or sent.
	UnknownTestPaymentMethod Code = "UNKNOWN_TEST_PAYMENT_METHOD"
	// OperationNotSupportedByProvider: the service's payment provider
	// lacks what this operation needs (operation.ErrUnsupported); nothing
	// was stored or sent.
	OperationNotSupportedByProvider Code = "OPERATION_NOT_SUPPORTED_BY_PROVIDER"
)

// title is the one short, human title of each shared code.
func title(code Code) string {
	switch code {
	case IdempotencyKeyMissing:
		return "Idempotency key missing"
	case IdempotencyKeyInvalid:
		return "Idempotency key invalid"
	case IdempotencyKeyInUse:
		return "Idempotency key in use"
	case IdempotencyKeyReused:
		return "Idempotency key reused for a different request"
	case IdempotencyKeyExpired:
		return "Idempotency key expired"
	case RateLimited:
		return "Rate limited"
	case ProviderUnavailable:
		return "Payment provider unavailable"
	case ServiceUnavailable:
		return "Service unavailable"
	case MalformedJSON:
		return "Malformed JSON"
	case ValidationFailed:
		return "Validation failed"
	case CardDataRefused:
		return "Card data refused"
	case PayloadTooLarge:
		return "Payload too large"
	case UnsupportedMediaType:
		return "Unsupported media type"
	case Unauthorized:
		return "Unauthorized"
	case TooManyFailedAuthentications:
		return "Too many failed authentications"
	case OperatorsOnly:
		return "Operators only"
	case AmountNotSupportedByProvider:
		return "Amount not supported by the payment provider"
	case UnknownTestPaymentMethod:
		return "Unknown test payment method"
	case NotFound:
		return "Not found"
	case MethodNotAllowed:
		return "Method not allowed"
	case WebhookSignatureInvalid:
		return "Webhook signature invalid"
	case WebhookURLForbidden:
		return "Webhook URL forbidden"
	default:
		return "Internal server error"
	}
}

// FieldError names one invalid request field.
type FieldError = validate.FieldError

// Problem is an RFC 9457 problem document with this API's extensions: a
// stable code, the resource it is about, and the invalid fields.
type Problem struct {
	Type   string
	Title  string
	Status int
	Detail string
	Code   Code
	Errors []FieldError
	// RetryAfter: the problem is answered with the service's one advice to
	// come back later (a Retry-After header).
	RetryAfter bool

	members []member // extension members, in the order they were set
}

type member struct {
	name  string
	value string
}

// New returns the problem for a shared code with HTTP status and a detail
// message.
func New(status int, code Code, detail string) *Problem {
	return Titled(status, code, title(code), detail)
}

// Titled returns the problem for an operation's own code, with its title.
func Titled(status int, code Code, title, detail string) *Problem {
	return &Problem{
		Type:   "https://paymentsapi.dev/problems/" + strings.ReplaceAll(strings.ToLower(string(code)), "_", "-"),
		Title:  title,
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

// Set sets the extension member name (paymentId, declineCode, ...) to a
// string value; an empty value sets nothing. Members are written in the
// order they were first set, after the standard ones.
func (p *Problem) Set(name, value string) *Problem {
	if value == "" {
		return p
	}
	for i := range p.members {
		if p.members[i].name == name {
			p.members[i].value = value
			return p
		}
	}
	p.members = append(p.members, member{name, value})
	return p
}

// WithRetryAfter marks p to be answered with the service's Retry-After.
func (p *Problem) WithRetryAfter() *Problem {
	p.RetryAfter = true
	return p
}

// Get returns the extension member name, or "".
func (p *Problem) Get(name string) string {
	for _, m := range p.members {
		if m.name == name {
			return m.value
		}
	}
	return ""
}

// MarshalJSON writes the document: type, title, status, detail, code, the
// extension members as set, and errors.
func (p *Problem) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	field := func(name string, v any) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(name)
		val, _ := json.Marshal(v) // strings, ints and field errors only
		b.Write(k)
		b.WriteByte(':')
		b.Write(val)
	}
	field("type", p.Type)
	field("title", p.Title)
	field("status", p.Status)
	field("detail", p.Detail)
	field("code", p.Code)
	for _, m := range p.members {
		field(m.name, m.value)
	}
	if len(p.Errors) > 0 {
		field("errors", p.Errors)
	}
	return append(append([]byte{'{'}, b.Bytes()...), '}'), nil
}

// UnmarshalJSON reads a document written by MarshalJSON: every member that
// is not a standard one and holds a string is an extension member.
func (p *Problem) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	var q Problem
	for name, v := range raw {
		var err error
		switch name {
		case "type":
			err = json.Unmarshal(v, &q.Type)
		case "title":
			err = json.Unmarshal(v, &q.Title)
		case "status":
			err = json.Unmarshal(v, &q.Status)
		case "detail":
			err = json.Unmarshal(v, &q.Detail)
		case "code":
			err = json.Unmarshal(v, &q.Code)
		case "errors":
			err = json.Unmarshal(v, &q.Errors)
		default:
			var s string
			if json.Unmarshal(v, &s) == nil {
				q.Set(name, s)
			}
		}
		if err != nil {
			return err
		}
	}
	*p = q
	return nil
}

// JSON renders the problem document.
func (p *Problem) JSON() []byte {
	b, _ := p.MarshalJSON()
	return b
}

// ShouldRetryHeader tells a client whether sending the same request again,
// with the same idempotency key, may get another answer.
const ShouldRetryHeader = "Payments-Should-Retry"

// AdviseRetry sets ShouldRetryHeader on the headers h of an error answer
// (status 400 or more; others get none). It is the one rule of the header:
// a final answer (stored for its key, and replayed) never changes, so
// "false"; so does any other 4xx, the same request getting the same
// answer, except a key still in use by its original (409
// IDEMPOTENCY_KEY_IN_USE) and a rate limit (429), which pass; every 5xx
// may pass too ("true").
func AdviseRetry(h http.Header, status int, code Code, final bool) {
	if status < 400 {
		return
	}
	retry := !final && (status >= 500 || status == http.StatusTooManyRequests ||
		status == http.StatusConflict && code == IdempotencyKeyInUse)
	h.Set(ShouldRetryHeader, strconv.FormatBool(retry))
}

// Write sends the problem as the response: an answer of this request, not
// a stored one (those are replayed by the engine's writer).
func (p *Problem) Write(w http.ResponseWriter) {
	AdviseRetry(w.Header(), p.Status, p.Code, false)
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(p.JSON())
}
