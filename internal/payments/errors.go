package payments

import (
	"errors"

	"github.com/paymentsapi/paymentsapi/internal/providerflow"
)

// Errors of the payments domain. None is stored for replay; the HTTP
// adapter renders each.
var (
	// ErrNotFound: no such payment for this tenant.
	ErrNotFound = errors.New("payment not found")
	// ErrProviderUnavailable: the provider refused before processing (503).
	// No money moved; a retry with the same key resumes the same payment.
	ErrProviderUnavailable = providerflow.ErrUnavailable
	// ErrReferenceContended: the payment holding the merchant reference
	// kept changing while the claim looked (declined and replaced, again and
	// again). Nothing was written; a retry with the same key is safe (503).
	ErrReferenceContended = errors.New("the merchant reference is changing hands; nothing was written, retry with the same Idempotency-Key")
	// ErrInvalidCursor: the cursor was not produced by this API.
	ErrInvalidCursor = errors.New("invalid cursor")
)

// DuplicateReferenceError: another key already created a live payment for
// this (account, merchant reference) (409).
type DuplicateReferenceError struct{ PaymentID string }

func (e *DuplicateReferenceError) Error() string {
	return "a payment for this accountId and merchantReference already exists"
}
