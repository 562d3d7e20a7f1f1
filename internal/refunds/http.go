package refunds

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
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// This file is the refunds' HTTP surface: routes, the answers a refund's key
// stores, and the problems of the refunds' own errors.

// The problem codes of refunds.
const (
	CodeDeclined          problem.Code = "REFUND_DECLINED"
	CodeNotRefundable     problem.Code = "PAYMENT_NOT_REFUNDABLE"
	CodeExceedsRefundable problem.Code = "REFUND_EXCEEDS_REFUNDABLE"
)

// Routes adds POST and GET /payments/{paymentId}/refunds and GET
// /payments/{paymentId}/refunds/{refundId}: the same idempotency rules as
// POST /payments, through the same engine.
func (s *Service) Routes(r chi.Router, api operation.HTTP) {
	r.Post("/payments/{paymentId}/refunds", func(w http.ResponseWriter, r *http.Request) {
		paymentID := chi.URLParam(r, "paymentId")
		logging.Add(r.Context(), "payment_id", paymentID)
		var req CreateRequest
		key, ok := api.Command(w, r, &req)
		if !ok {
			return
		}
		tenant := api.Tenant(r)
		cmd, err := s.Prepare(r.Context(), tenant, paymentID, req)
		if err != nil {
			api.Error(w, r, err)
			return
		}
		reply, err := s.Create(r.Context(), tenant, key, cmd, api.Wait(r))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		logging.Add(r.Context(), "refund_id", reply.Resource.ID)
		api.Reply(w, r, reply)
	})
	r.Get("/payments/{paymentId}/refunds", func(w http.ResponseWriter, r *http.Request) {
		list, err := s.List(r.Context(), api.Tenant(r), chi.URLParam(r, "paymentId"))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		views := make([]View, 0, len(list))
		for _, ref := range list {
			views = append(views, ref.View())
		}
		api.JSON(w, http.StatusOK, struct {
			Items []View `json:"items"`
		}{views})
	})
	r.Get("/payments/{paymentId}/refunds/{refundId}", func(w http.ResponseWriter, r *http.Request) {
		ref, err := s.Get(r.Context(), api.Tenant(r), chi.URLParam(r, "paymentId"), chi.URLParam(r, "refundId"))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		api.JSON(w, http.StatusOK, ref.View())
	})
}

// Render answers a refund: 201 with the refund when it succeeded, 402 with a
// REFUND_DECLINED problem when declined, else 202 with Retry-After.
func (s *Service) Render(res idempotency.Result) (idempotency.Response, error) {
	r, ok := res.(Refund)
	if !ok {
		return idempotency.Response{}, fmt.Errorf("refunds: cannot render a %T", res)
	}
	location := Location(r.PaymentID, r.ID)
	switch r.State {
	case StateSucceeded:
		return httpapi.ResourceResponse(http.StatusCreated, r.View(), location, 0), nil
	case StateDeclined:
		prob := problem.Titled(http.StatusPaymentRequired, CodeDeclined, "Refund declined", "The payment provider declined the refund.")
		return httpapi.ProblemResponse(prob.Set("paymentId", r.PaymentID).Set("refundId", r.ID).Set("declineCode", r.DeclineCode)), nil
	default:
		return httpapi.ResourceResponse(http.StatusAccepted, r.View(), location, s.d.Engine.RetryAfter()), nil
	}
}

// Location is the URL path of refund id of payment paymentID.
func Location(paymentID, id string) string { return "/payments/" + paymentID + "/refunds/" + id }

// Problem is the problem of one of the refunds' own errors, else nil.
func (s *Service) Problem(err error) *problem.Problem {
	var exceeds *ExceedsRefundableError
	switch {
	case errors.Is(err, ErrNotRefundable):
		return problem.Titled(http.StatusConflict, CodeNotRefundable, "Payment not refundable", err.Error())
	case errors.As(err, &exceeds):
		return problem.Titled(http.StatusConflict, CodeExceedsRefundable, "Refund exceeds the refundable amount", err.Error()).
			Set("refundableAmount", money.Format(exceeds.RefundableMinor, exceeds.Currency))
	case errors.Is(err, ErrPaymentNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such payment.")
	case errors.Is(err, ErrNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such refund.")
	}
	return nil
}

var _ operation.Instance = (*Service)(nil)
