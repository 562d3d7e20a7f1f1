package httpapi

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// writeError answers err as a problem. It is the one map from service errors
// to HTTP.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var (
		inUse   *payments.KeyInUseError
		expired *payments.KeyExpiredError
		dup     *payments.DuplicateReferenceError
	)
	switch {
	case errors.As(err, &inUse):
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(inUse.RetryAfter.Seconds()))))
		problem.New(http.StatusConflict, problem.IdempotencyKeyInUse, err.Error()).Write(w)
	case errors.Is(err, payments.ErrKeyReused):
		problem.New(http.StatusUnprocessableEntity, problem.IdempotencyKeyReused, err.Error()).Write(w)
	case errors.As(err, &expired):
		p := problem.New(http.StatusConflict, problem.IdempotencyKeyExpired, err.Error())
		p.PaymentID = expired.PaymentID
		p.Write(w)
	case errors.As(err, &dup):
		p := problem.New(http.StatusConflict, problem.DuplicateMerchantReference, err.Error())
		p.PaymentID = dup.PaymentID
		p.Write(w)
	case errors.Is(err, payments.ErrProviderUnavailable):
		w.Header().Set("Retry-After", "2")
		problem.New(http.StatusServiceUnavailable, problem.ProviderUnavailable, err.Error()).Write(w)
	case errors.Is(err, payments.ErrNotFound):
		problem.New(http.StatusNotFound, problem.NotFound, "No such payment.").Write(w)
	case errors.Is(err, payments.ErrInvalidCursor):
		p := problem.New(http.StatusBadRequest, problem.ValidationFailed, "One or more parameters are invalid.")
		p.Errors = []problem.FieldError{{Field: "cursor", Message: "is not a cursor from this API"}}
		p.Write(w)
	case database.Unavailable(err):
		logFrom(r).WarnContext(r.Context(), "database unavailable", "error", err)
		unavailable(w)
	default:
		logFrom(r).ErrorContext(r.Context(), "request failed", "error", err)
		problem.New(http.StatusInternalServerError, problem.Internal, "An unexpected error occurred.").Write(w)
	}
}
