package authorizations

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// This file is the two operations' HTTP surface: routes, the answers their
// keys store, and the problems of their own errors.

// The problem codes of the two operations.
const (
	CodeCaptureDeclined      problem.Code = "CAPTURE_DECLINED"
	CodeNotCapturable        problem.Code = "PAYMENT_NOT_CAPTURABLE"
	CodeExceedsCapturable    problem.Code = "CAPTURE_EXCEEDS_CAPTURABLE"
	CodeAuthorizationExpired problem.Code = "AUTHORIZATION_EXPIRED"
	CodeNotCancelable        problem.Code = "PAYMENT_NOT_CANCELABLE"
)

// Routes adds POST /payments/{paymentId}/capture or
// POST /payments/{paymentId}/cancel: the same idempotency rules as POST
// /payments, through the same engine. Both answer with the payment.
func (s *Service) Routes(r chi.Router, api operation.HTTP) {
	r.Post("/payments/{paymentId}/"+s.path(), func(w http.ResponseWriter, r *http.Request) {
		paymentID := chi.URLParam(r, "paymentId")
		logging.Add(r.Context(), "payment_id", paymentID)
		var (
			captureReq CaptureRequest
			cancelReq  CancelRequest
			dst        any = &cancelReq
			validate       = cancelReq.validate
		)
		if s.k.action == payments.ActionCapture {
			dst = &captureReq
		}
		key, ok := api.OptionalCommand(w, r, dst)
		if !ok {
			return
		}
		if s.k.action == payments.ActionCapture {
			validate = captureReq.validate
		} else {
			validate = cancelReq.validate
		}
		tenant := api.Tenant(r)
		cmd, err := s.prepare(r.Context(), tenant, paymentID, validate)
		if err != nil {
			api.Error(w, r, err)
			return
		}
		reply, err := s.Create(r.Context(), tenant, key, cmd, api.Wait(r))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		logging.Add(r.Context(), s.k.idField, reply.Resource.ID)
		api.Reply(w, r, reply)
	})
}

// path is the last segment of the operation's route.
func (s *Service) path() string {
	if s.k.action == payments.ActionCapture {
		return "capture"
	}
	return "cancel"
}

// Render answers an action with its payment: 200 once captured or voided;
// for a declined capture 402 CAPTURE_DECLINED, for a declined void 409
// PAYMENT_NOT_CANCELABLE, for one abandoned unsent 409 (both stored); else
// 202 with Retry-After (the outcome is not known yet, not stored).
func (s *Service) Render(res idempotency.Result) (idempotency.Response, error) {
	r, ok := res.(Result)
	if !ok {
		return idempotency.Response{}, fmt.Errorf("%s: cannot render a %T", s.k.operation, res)
	}
	id := r.Payment.ID
	switch r.Action.State {
	case StateSucceeded:
		return httpapi.ResourceResponse(http.StatusOK, r.Payment.View(), payments.Location(id), 0), nil
	case StateDeclined:
		if s.k.action == payments.ActionCapture {
			prob := problem.Titled(http.StatusPaymentRequired, CodeCaptureDeclined, "Capture declined",
				"The payment provider declined the capture.")
			return httpapi.ProblemResponse(prob.Set("paymentId", id).Set("declineCode", r.Action.DeclineCode)), nil
		}
		prob := problem.Titled(http.StatusConflict, CodeNotCancelable, "Payment not cancelable",
			"The payment could not be canceled: it moved money after all, or the provider refused to void it (see declineCode).")
		return httpapi.ProblemResponse(prob.Set("paymentId", id).Set("declineCode", r.Action.DeclineCode)), nil
	case StateCanceled:
		code, title := CodeNotCancelable, "Payment not cancelable"
		if s.k.action == payments.ActionCapture {
			code, title = CodeNotCapturable, "Payment not capturable"
		}
		prob := problem.Titled(http.StatusConflict, code, title, "This "+string(s.k.action)+
			" never reached the payment provider and nobody retried it within the replay window. Send it again with a new Idempotency-Key.")
		return httpapi.ProblemResponse(prob.Set("paymentId", id)), nil
	default:
		return httpapi.ResourceResponse(http.StatusAccepted, r.Payment.View(), payments.Location(id), s.d.Engine.RetryAfter()), nil
	}
}

// Problem is the problem of one of the operation's own errors, else nil.
func (s *Service) Problem(err error) *problem.Problem {
	var exceeds *payments.ExceedsCapturableError
	switch {
	case errors.Is(err, ErrPaymentNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such payment.")
	case errors.Is(err, ErrNotCapturable):
		return problem.Titled(http.StatusConflict, CodeNotCapturable, "Payment not capturable", err.Error())
	case errors.Is(err, ErrNotCancelable):
		return problem.Titled(http.StatusConflict, CodeNotCancelable, "Payment not cancelable", err.Error())
	case errors.Is(err, ErrAuthorizationExpired):
		return problem.Titled(http.StatusConflict, CodeAuthorizationExpired, "Authorization expired",
			"The payment's authorization has expired: it can no longer be captured, and the service voids it.")
	case errors.As(err, &exceeds):
		return problem.Titled(http.StatusConflict, CodeExceedsCapturable, "Capture exceeds the capturable amount", err.Error()).
			Set("capturableAmount", money.Format(exceeds.CapturableMinor, exceeds.Currency))
	}
	return nil
}

var _ operation.Instance = (*Service)(nil)
