package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/providerflow"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// StatusClientClosedRequest is the status logged (nginx's 499) for a request
// whose client went away before its answer.
const StatusClientClosedRequest = 499

// errorWriter answers errors as problems. Its write is the one map from
// errors to HTTP: the engine's, validation's, the database's and the
// provider's here, and each operation's own through its Problem.
type errorWriter struct {
	retryAfter time.Duration // the service's one advice to come back later
	operations []operation.Instance
	idFields   map[string]string // a resource type's id member (paymentId)
}

func newErrorWriter(retryAfter time.Duration, mods []operation.Module, ops []operation.Instance) errorWriter {
	ew := errorWriter{retryAfter: retryAfter, operations: ops, idFields: map[string]string{}}
	for _, m := range mods {
		ew.idFields[m.Resource.Type] = m.Resource.IDField
	}
	return ew
}

func (ew errorWriter) write(w http.ResponseWriter, r *http.Request, err error) {
	var (
		inUse    *idempotency.KeyInUseError
		expired  *idempotency.KeyExpiredError
		invalid  *validate.Error
		cardData *validate.CardDataError
		refused  *provider.Refusal
	)
	switch {
	case r.Context().Err() != nil && errors.Is(err, context.Canceled):
		// The client went away (it closed the connection or gave up), and
		// the work stopped with it: not a failure of the service, and no
		// answer reaches anyone. 499 is nginx's "client closed request",
		// written so that the request's log line and metrics say what
		// happened; nobody reads it. A retry with the same key resumes
		// whatever was started.
		logFrom(r).InfoContext(r.Context(), "client closed the request before its answer", "error", err)
		w.WriteHeader(StatusClientClosedRequest)
	case errors.As(err, &inUse):
		w.Header().Set("Retry-After", retryAfterValue(inUse.RetryAfter))
		problem.New(http.StatusConflict, problem.IdempotencyKeyInUse, err.Error()).Write(w)
	case errors.Is(err, idempotency.ErrKeyReused):
		problem.New(http.StatusUnprocessableEntity, problem.IdempotencyKeyReused, err.Error()).Write(w)
	case errors.As(err, &expired):
		p := problem.New(http.StatusConflict, problem.IdempotencyKeyExpired, err.Error())
		p.Set(ew.idFields[expired.Resource.Type], expired.Resource.ID)
		p.Write(w)
	case errors.As(err, &cardData):
		cardDataProblem(cardData.Fields).Write(w)
	case errors.As(err, &invalid):
		p := problem.New(http.StatusBadRequest, problem.ValidationFailed, "One or more fields are invalid.")
		p.Errors = invalid.Fields
		p.Write(w)
	case errors.As(err, &refused):
		// Found before the claim: nothing of the request was stored.
		problem.New(http.StatusBadRequest, refusalCode(refused.Reason), refused.Detail).Write(w)
	case errors.Is(err, providerflow.ErrUnavailable):
		p := problem.New(http.StatusServiceUnavailable, problem.ProviderUnavailable, err.Error()).WithRetryAfter()
		var on *idempotency.ResourceError
		if errors.As(err, &on) {
			// The resource the retry resumes (paymentId): the client may
			// read it meanwhile.
			p.Set(ew.idFields[on.Resource.Type], on.Resource.ID)
		}
		ew.problem(w, p)
	case database.Unavailable(err):
		logFrom(r).WarnContext(r.Context(), "database unavailable", "error", err)
		ew.unavailable(w)
	default:
		for _, op := range ew.operations {
			if p := op.Problem(err); p != nil {
				ew.problem(w, p)
				return
			}
		}
		logFrom(r).ErrorContext(r.Context(), "request failed", "error", err)
		problem.New(http.StatusInternalServerError, problem.Internal, "An unexpected error occurred.").Write(w)
	}
}

// refusalCode is the problem code of a provider's refusal.
func refusalCode(reason provider.RefusalReason) problem.Code {
	if reason == provider.RefusedPaymentMethod {
		return problem.UnknownTestPaymentMethod
	}
	return problem.AmountNotSupportedByProvider
}

// problem writes p, with the service's Retry-After when p asks for it.
func (ew errorWriter) problem(w http.ResponseWriter, p *problem.Problem) {
	if p.RetryAfter {
		w.Header().Set("Retry-After", retryAfterValue(ew.retryAfter))
	}
	p.Write(w)
}

// unavailable is the 503 for a database that cannot be reached.
func (ew errorWriter) unavailable(w http.ResponseWriter) {
	w.Header().Set("Retry-After", retryAfterValue(ew.retryAfter))
	problem.New(http.StatusServiceUnavailable, problem.ServiceUnavailable,
		"The service cannot reach its database right now. Retry with the same Idempotency-Key: the request is resumed where it stopped, never repeated.").Write(w)
}
