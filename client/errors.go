package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/paymentsapi/paymentsapi/client/internal/apigen"
)

// Code is the stable, machine-readable code of a problem. Branch on it,
// never on Detail.
type Code = apigen.ProblemCode

// The codes the API answers with.
const (
	CodeIdempotencyKeyMissing        Code = apigen.IDEMPOTENCYKEYMISSING
	CodeIdempotencyKeyInvalid        Code = apigen.IDEMPOTENCYKEYINVALID
	CodeIdempotencyKeyInUse          Code = apigen.IDEMPOTENCYKEYINUSE
	CodeIdempotencyKeyReused         Code = apigen.IDEMPOTENCYKEYREUSED
	CodeIdempotencyKeyExpired        Code = apigen.IDEMPOTENCYKEYEXPIRED
	CodeDuplicateMerchantReference   Code = apigen.DUPLICATEMERCHANTREFERENCE
	CodePaymentDeclined              Code = apigen.PAYMENTDECLINED
	CodePaymentCanceled              Code = apigen.PAYMENTCANCELED
	CodeRefundDeclined               Code = apigen.REFUNDDECLINED
	CodePaymentNotRefundable         Code = apigen.PAYMENTNOTREFUNDABLE
	CodeRefundExceedsRefundable      Code = apigen.REFUNDEXCEEDSREFUNDABLE
	CodeCaptureDeclined              Code = apigen.CAPTUREDECLINED
	CodePaymentNotCapturable         Code = apigen.PAYMENTNOTCAPTURABLE
	CodeCaptureExceedsCapturable     Code = apigen.CAPTUREEXCEEDSCAPTURABLE
	CodeAuthorizationExpired         Code = apigen.AUTHORIZATIONEXPIRED
	CodePaymentNotCancelable         Code = apigen.PAYMENTNOTCANCELABLE
	CodeRateLimited                  Code = apigen.RATELIMITED
	CodeProviderUnavailable          Code = apigen.PROVIDERUNAVAILABLE
	CodeServiceUnavailable           Code = apigen.SERVICEUNAVAILABLE
	CodeMalformedJSON                Code = apigen.MALFORMEDJSON
	CodeValidationFailed             Code = apigen.VALIDATIONFAILED
	CodePayloadTooLarge              Code = apigen.PAYLOADTOOLARGE
	CodeUnsupportedMediaType         Code = apigen.UNSUPPORTEDMEDIATYPE
	CodeUnauthorized                 Code = apigen.UNAUTHORIZED
	CodeTooManyFailedAuthentications Code = apigen.TOOMANYFAILEDAUTHENTICATIONS
	CodeNotFound                     Code = apigen.NOTFOUND
	CodeMethodNotAllowed             Code = apigen.METHODNOTALLOWED
	CodeInternal                     Code = apigen.INTERNAL
	CodeWebhookURLForbidden          Code = apigen.WEBHOOKURLFORBIDDEN
	CodeWebhookEndpointDisabled      Code = apigen.WEBHOOKENDPOINTDISABLED
	CodeEventNotResendable           Code = apigen.EVENTNOTRESENDABLE
	CodeTooManyEndpoints             Code = apigen.TOOMANYENDPOINTS
	CodeSecretsKeyMissing            Code = apigen.SECRETSKEYMISSING
)

// Error is a problem (RFC 9457) the server answered, or, for an answer that
// is not a problem document (a proxy's error page, say), its status and the
// start of its body in Detail with an empty Code.
type Error struct {
	// Status is the HTTP status of the answer.
	Status int
	// Code is the problem's stable code; empty if the answer was no problem.
	Code   Code
	Type   string
	Title  string
	Detail string
	// RequestID is the server's id of the request, when it sent one.
	RequestID string
	// PaymentID names the payment concerned (PAYMENT_DECLINED,
	// CAPTURE_DECLINED, IDEMPOTENCY_KEY_EXPIRED of a payment's key,
	// DUPLICATE_MERCHANT_REFERENCE).
	PaymentID string
	// RefundID names the refund concerned (REFUND_DECLINED,
	// IDEMPOTENCY_KEY_EXPIRED of a refund's key).
	RefundID string
	// CaptureID and CancellationID name what a capture's or a cancel's key
	// created (IDEMPOTENCY_KEY_EXPIRED of such a key).
	CaptureID      string
	CancellationID string
	// EndpointID, RotationID and ResendID name what a webhook endpoint's
	// registration, a secret's rotation or an event's resend key made
	// (IDEMPOTENCY_KEY_EXPIRED of such a key).
	EndpointID string
	RotationID string
	ResendID   string
	// DeclineCode is the provider's reason (PAYMENT_DECLINED,
	// CAPTURE_DECLINED, a void the provider refused).
	DeclineCode string
	// RefundableAmount is what may still be refunded
	// (REFUND_EXCEEDS_REFUNDABLE), a decimal string.
	RefundableAmount string
	// CapturableAmount is the most a capture may take
	// (CAPTURE_EXCEEDS_CAPTURABLE), a decimal string.
	CapturableAmount string
	// Errors lists the invalid fields (VALIDATION_FAILED).
	Errors []FieldError
	// RetryAfter is the server's Retry-After, zero when it sent none.
	RetryAfter time.Duration
}

// Error returns the status, code and detail of the problem.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", e.Status)
	if e.Code != "" {
		fmt.Fprintf(&b, " %s", e.Code)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, ": %s", e.Detail)
	}
	return b.String()
}

// DeclinedError is the answer 402: the provider declined the payment
// (PAYMENT_DECLINED, with Problem.PaymentID and Problem.DeclineCode), the
// refund (REFUND_DECLINED, with Problem.RefundID) or the capture
// (CAPTURE_DECLINED, with Problem.PaymentID and Problem.DeclineCode). It is
// final: the same request gets the same answer, replayed.
type DeclinedError struct {
	Problem *Error
}

// Error describes the decline.
func (e *DeclinedError) Error() string { return "declined: " + e.Problem.Error() }

// Unwrap returns the problem, so that errors.As finds the *Error too.
func (e *DeclinedError) Unwrap() error { return e.Problem }

// ErrBudgetExhausted is joined to the last answer when a retry was due but
// the Client's retry budget had no token left.
var ErrBudgetExhausted = errors.New("retry budget exhausted")

// maxDetailBytes bounds the text of a non-problem answer kept in Detail.
const maxDetailBytes = 200

// decodeProblem builds the *Error of a non-2xx answer.
func decodeProblem(status int, header http.Header, body []byte, retryAfter time.Duration) *Error {
	e := &Error{Status: status, RetryAfter: retryAfter}
	mediaType, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
	var p apigen.Problem
	if (mediaType == "application/problem+json" || mediaType == "application/json") && json.Unmarshal(body, &p) == nil && p.Code != "" {
		e.Code, e.Type, e.Title, e.Detail = p.Code, p.Type, p.Title, p.Detail
		e.RequestID, e.PaymentID, e.RefundID = p.RequestID, p.PaymentID, p.RefundID
		e.CaptureID, e.CancellationID = p.CaptureID, p.CancellationID
		e.EndpointID, e.RotationID, e.ResendID = p.EndpointID, p.RotationID, p.ResendID
		e.DeclineCode, e.RefundableAmount, e.CapturableAmount, e.Errors = p.DeclineCode, p.RefundableAmount, p.CapturableAmount, p.Errors
		return e
	}
	e.Detail = strings.TrimSpace(truncate(string(body), maxDetailBytes))
	if e.Detail == "" {
		e.Detail = http.StatusText(status)
	}
	return e
}

// truncate cuts s to at most n bytes without splitting a character.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
