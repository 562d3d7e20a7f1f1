package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// errorWriter answers errors as problems. Its write is the one map from
// the errors of the engine and the domains to HTTP.
type errorWriter struct {
	retryAfter time.Duration // the service's one advice to come back later
}

func (ew errorWriter) write(w http.ResponseWriter, r *http.Request, err error) {
	var (
		inUse   *idempotency.KeyInUseError
		expired *idempotency.KeyExpiredError
		dup     *payments.DuplicateReferenceError
		exceeds *refunds.ExceedsRefundableError
		invalid *validate.Error
	)
	switch {
	case errors.As(err, &inUse):
		w.Header().Set("Retry-After", retryAfterValue(inUse.RetryAfter))
		problem.New(http.StatusConflict, problem.IdempotencyKeyInUse, err.Error()).Write(w)
	case errors.Is(err, idempotency.ErrKeyReused):
		problem.New(http.StatusUnprocessableEntity, problem.IdempotencyKeyReused, err.Error()).Write(w)
	case errors.As(err, &expired):
		p := problem.New(http.StatusConflict, problem.IdempotencyKeyExpired, err.Error())
		p.SetResource(expired.Resource.Type, expired.Resource.ID)
		p.Write(w)
	case errors.As(err, &invalid):
		p := problem.New(http.StatusBadRequest, problem.ValidationFailed, "One or more fields are invalid.")
		p.Errors = invalid.Fields
		p.Write(w)
	case errors.As(err, &dup):
		p := problem.New(http.StatusConflict, problem.DuplicateMerchantReference, err.Error())
		p.PaymentID = dup.PaymentID
		p.Write(w)
	case errors.Is(err, refunds.ErrNotRefundable):
		problem.New(http.StatusConflict, problem.PaymentNotRefundable, err.Error()).Write(w)
	case errors.As(err, &exceeds):
		p := problem.New(http.StatusConflict, problem.RefundExceedsRefundable, err.Error())
		p.RefundableAmount = money.Format(exceeds.RefundableMinor, exceeds.Currency)
		p.Write(w)
	case errors.Is(err, payments.ErrProviderUnavailable), errors.Is(err, refunds.ErrProviderUnavailable):
		w.Header().Set("Retry-After", retryAfterValue(ew.retryAfter))
		problem.New(http.StatusServiceUnavailable, problem.ProviderUnavailable, err.Error()).Write(w)
	case errors.Is(err, payments.ErrNotFound), errors.Is(err, refunds.ErrPaymentNotFound):
		problem.New(http.StatusNotFound, problem.NotFound, "No such payment.").Write(w)
	case errors.Is(err, refunds.ErrNotFound):
		problem.New(http.StatusNotFound, problem.NotFound, "No such refund.").Write(w)
	case errors.Is(err, payments.ErrInvalidCursor):
		invalidParameter(w, "cursor", "is not a cursor from this API")
	case errors.Is(err, payments.ErrReferenceContended):
		w.Header().Set("Retry-After", retryAfterValue(ew.retryAfter))
		problem.New(http.StatusServiceUnavailable, problem.ServiceUnavailable, err.Error()).Write(w)
	case database.Unavailable(err):
		logFrom(r).WarnContext(r.Context(), "database unavailable", "error", err)
		ew.unavailable(w)
	default:
		logFrom(r).ErrorContext(r.Context(), "request failed", "error", err)
		problem.New(http.StatusInternalServerError, problem.Internal, "An unexpected error occurred.").Write(w)
	}
}

// unavailable is the 503 for a database that cannot be reached.
func (ew errorWriter) unavailable(w http.ResponseWriter) {
	w.Header().Set("Retry-After", retryAfterValue(ew.retryAfter))
	problem.New(http.StatusServiceUnavailable, problem.ServiceUnavailable,
		"The service cannot reach its database right now. Retry with the same Idempotency-Key: the request is resumed where it stopped, never repeated.").Write(w)
}
