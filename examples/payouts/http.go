package payouts

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// This file is the payouts' HTTP surface: routes, the answers a payout's
// key stores, and the problems of the payouts' own errors.

// CodeDeclined is the problem code of a payout the bank refused.
const CodeDeclined problem.Code = "PAYOUT_DECLINED"

// ErrNotFound: no such payout for this tenant (404).
var ErrNotFound = errors.New("payout not found")

// Routes adds POST /payouts and GET /payouts/{payoutId} (Module.Routes
// lists them too). Each handler decodes, calls and answers through api.
func (s *Service) Routes(r chi.Router, api operation.HTTP) {
	r.Post("/payouts", func(w http.ResponseWriter, r *http.Request) {
		var req CreateRequest
		key, ok := api.Command(w, r, &req)
		if !ok {
			return
		}
		cmd, err := req.Validate()
		if err != nil {
			api.Error(w, r, err)
			return
		}
		reply, err := s.Create(r.Context(), api.Tenant(r), key, cmd, api.Wait(r))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		api.Reply(w, r, reply)
	})
	r.Get("/payouts/{payoutId}", func(w http.ResponseWriter, r *http.Request) {
		p, err := s.Get(r.Context(), api.Tenant(r), chi.URLParam(r, "payoutId"))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		api.JSON(w, http.StatusOK, p.View())
	})
}

// Render answers a payout: 201 when it succeeded, 402 PAYOUT_DECLINED when
// the bank refused it (stored, as any final answer), else 202 with
// Retry-After (not stored: a retry resumes it).
func (s *Service) Render(res idempotency.Result) (idempotency.Response, error) {
	p, ok := res.(Payout)
	if !ok {
		return idempotency.Response{}, fmt.Errorf("payouts: cannot render a %T", res)
	}
	location := "/payouts/" + p.ID
	switch p.State {
	case StateSucceeded:
		return httpapi.ResourceResponse(http.StatusCreated, p.View(), location, 0), nil
	case StateDeclined:
		prob := problem.Titled(http.StatusPaymentRequired, CodeDeclined, "Payout declined", "The bank refused the payout.")
		return httpapi.ProblemResponse(prob.Set(IDField, p.ID).Set("declineCode", p.DeclineCode)), nil
	default:
		return httpapi.ResourceResponse(http.StatusAccepted, p.View(), location, s.d.Engine.RetryAfter()), nil
	}
}

// Problem is the problem of one of the payouts' own errors, else nil.
func (s *Service) Problem(err error) *problem.Problem {
	if errors.Is(err, ErrNotFound) {
		return problem.New(http.StatusNotFound, problem.NotFound, "No such payout.")
	}
	return nil
}

var _ operation.Instance = (*Service)(nil)
