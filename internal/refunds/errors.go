package refunds

import (
	"errors"

	"github.com/paymentsapi/paymentsapi/internal/providerflow"
)

// Errors of the refunds domain; none is stored for replay.
var (
	// ErrPaymentNotFound: no such payment for this tenant (404).
	ErrPaymentNotFound = errors.New("payment not found")
	// ErrNotFound: no such refund of this payment for this tenant (404).
	ErrNotFound = errors.New("refund not found")
	// ErrNotRefundable: the payment has not succeeded (409); it may still.
	ErrNotRefundable = errors.New("only a payment that succeeded can be refunded")
	// ErrProviderUnavailable: the provider refused before processing (503);
	// no money moved, and a retry with the same key resumes the same refund.
	ErrProviderUnavailable = providerflow.ErrUnavailable
)

// ExceedsRefundableError: the amount is more than the payment's amount less
// the refunds that succeeded or are in flight (409). An in-flight refund
// may still be declined, so the answer is not stored.
type ExceedsRefundableError struct {
	RefundableMinor int64
	Currency        string
}

func (e *ExceedsRefundableError) Error() string {
	return "the amount exceeds what is left to refund of this payment"
}
