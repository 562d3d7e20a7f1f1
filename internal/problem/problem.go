// Package problem renders errors as RFC 9457 problem details
// (application/problem+json), each with a stable machine-readable code.
package problem

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// ContentType is the media type of a problem document.
const ContentType = "application/problem+json"

// Code is a stable, machine-readable error code. Clients branch on it; it
// never changes meaning.
type Code string

// The codes the API answers with.
const (
	IdempotencyKeyMissing      Code = "IDEMPOTENCY_KEY_MISSING"
	IdempotencyKeyInvalid      Code = "IDEMPOTENCY_KEY_INVALID"
	IdempotencyKeyInUse        Code = "IDEMPOTENCY_KEY_IN_USE"
	IdempotencyKeyReused       Code = "IDEMPOTENCY_KEY_REUSED"
	IdempotencyKeyExpired      Code = "IDEMPOTENCY_KEY_EXPIRED"
	DuplicateMerchantReference Code = "DUPLICATE_MERCHANT_REFERENCE"
	PaymentDeclined            Code = "PAYMENT_DECLINED"
	RefundDeclined             Code = "REFUND_DECLINED"
	PaymentCanceled            Code = "PAYMENT_CANCELED"
	PaymentNotRefundable       Code = "PAYMENT_NOT_REFUNDABLE"
	RefundExceedsRefundable    Code = "REFUND_EXCEEDS_REFUNDABLE"
	RateLimited                Code = "RATE_LIMITED"
	ProviderUnavailable        Code = "PROVIDER_UNAVAILABLE"
	ServiceUnavailable         Code = "SERVICE_UNAVAILABLE"
	MalformedJSON              Code = "MALFORMED_JSON"
	ValidationFailed           Code = "VALIDATION_FAILED"
	PayloadTooLarge            Code = "PAYLOAD_TOO_LARGE"
	UnsupportedMediaType       Code = "UNSUPPORTED_MEDIA_TYPE"
	Unauthorized               Code = "UNAUTHORIZED"
	NotFound                   Code = "NOT_FOUND"
	MethodNotAllowed           Code = "METHOD_NOT_ALLOWED"
	WebhookSignatureInvalid    Code = "WEBHOOK_SIGNATURE_INVALID"
	Internal                   Code = "INTERNAL"
)

// titles is the one short, human title of each code.
var titles = map[Code]string{
	IdempotencyKeyMissing:      "Idempotency key missing",
	IdempotencyKeyInvalid:      "Idempotency key invalid",
	IdempotencyKeyInUse:        "Idempotency key in use",
	IdempotencyKeyReused:       "Idempotency key reused for a different request",
	IdempotencyKeyExpired:      "Idempotency key expired",
	DuplicateMerchantReference: "Duplicate merchant reference",
	PaymentDeclined:            "Payment declined",
	RefundDeclined:             "Refund declined",
	PaymentCanceled:            "Payment canceled",
	PaymentNotRefundable:       "Payment not refundable",
	RefundExceedsRefundable:    "Refund exceeds the refundable amount",
	RateLimited:                "Rate limited",
	ProviderUnavailable:        "Payment provider unavailable",
	ServiceUnavailable:         "Service unavailable",
	MalformedJSON:              "Malformed JSON",
	ValidationFailed:           "Validation failed",
	PayloadTooLarge:            "Payload too large",
	UnsupportedMediaType:       "Unsupported media type",
	Unauthorized:               "Unauthorized",
	NotFound:                   "Not found",
	MethodNotAllowed:           "Method not allowed",
	WebhookSignatureInvalid:    "Webhook signature invalid",
	Internal:                   "Internal server error",
}

// FieldError names one invalid request field.
type FieldError = validate.FieldError

// Problem is an RFC 9457 problem document with this API's extensions.
type Problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Code      Code   `json:"code"`
	PaymentID string `json:"paymentId,omitempty"`
	RefundID  string `json:"refundId,omitempty"`
	// RefundableAmount is what is left to refund, a decimal string.
	RefundableAmount string       `json:"refundableAmount,omitempty"`
	DeclineCode      string       `json:"declineCode,omitempty"`
	Errors           []FieldError `json:"errors,omitempty"`
}

// New returns the problem for code with HTTP status and a detail message.
func New(status int, code Code, detail string) *Problem {
	return &Problem{
		Type:   "https://paymentsapi.dev/problems/" + strings.ReplaceAll(strings.ToLower(string(code)), "_", "-"),
		Title:  titles[code],
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

// SetResource names the resource a problem is about, in the field its
// type has: paymentId for a payment, refundId for a refund.
func (p *Problem) SetResource(resourceType, id string) {
	switch resourceType {
	case "refund":
		p.RefundID = id
	default:
		p.PaymentID = id
	}
}

// JSON renders the problem document.
func (p *Problem) JSON() []byte {
	b, _ := json.Marshal(p) // only strings, ints and slices of them
	return b
}

// Write sends the problem as the response.
func (p *Problem) Write(w http.ResponseWriter) {
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(p.JSON())
}
