package endpoints

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// This file is the endpoints' HTTP surface: routes, the answers the two
// operations' keys store, and the problems of their errors.

// Location is the URL path of endpoint id.
func Location(id string) string { return "/webhook-endpoints/" + id }

// Routes adds POST and GET /webhook-endpoints and GET and DELETE
// /webhook-endpoints/{endpointId}, the tenant's own endpoints only.
func (s *Service) Routes(r chi.Router, api operation.HTTP) {
	r.Post("/webhook-endpoints", func(w http.ResponseWriter, r *http.Request) {
		var req CreateRequest
		key, ok := api.Command(w, r, &req)
		if !ok {
			return
		}
		cmd, err := s.Prepare(r.Context(), req)
		if err != nil {
			api.Error(w, r, err)
			return
		}
		reply, err := s.Create(r.Context(), api.Tenant(r), key, cmd, api.Wait(r))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		logging.Add(r.Context(), "endpoint_id", reply.Resource.ID)
		api.Reply(w, r, reply)
	})
	r.Get("/webhook-endpoints", func(w http.ResponseWriter, r *http.Request) {
		list, err := s.List(r.Context(), api.Tenant(r))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		views := make([]View, len(list))
		for i, e := range list {
			views[i] = e.View()
		}
		api.JSON(w, http.StatusOK, struct {
			Items []View `json:"items"`
		}{views})
	})
	r.Get("/webhook-endpoints/{endpointId}", func(w http.ResponseWriter, r *http.Request) {
		e, err := s.Get(r.Context(), api.Tenant(r), endpointID(r))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		api.JSON(w, http.StatusOK, e.View())
	})
	r.Delete("/webhook-endpoints/{endpointId}", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Delete(r.Context(), api.Tenant(r), endpointID(r)); err != nil {
			api.Error(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// endpointID is r's {endpointId}, added to its log line.
func endpointID(r *http.Request) string {
	id := chi.URLParam(r, "endpointId")
	logging.Add(r.Context(), "endpoint_id", id)
	return id
}

// Render answers a created endpoint: 201, with its secret.
func (s *Service) Render(res idempotency.Result) (idempotency.Response, error) {
	e, ok := res.(Endpoint)
	if !ok {
		return idempotency.Response{}, fmt.Errorf("endpoints: cannot render a %T", res)
	}
	v := e.View()
	v.Secret = e.Secret
	return httpapi.ResourceResponse(http.StatusCreated, v, Location(e.ID), 0), nil
}

// Problem is the problem of one of the endpoints' own errors, else nil.
func (s *Service) Problem(err error) *problem.Problem { return problemOf(err) }

// Routes adds POST /webhook-endpoints/{endpointId}/rotate-secret.
func (r *Rotations) Routes(router chi.Router, api operation.HTTP) {
	router.Post("/webhook-endpoints/{endpointId}/rotate-secret", func(w http.ResponseWriter, req *http.Request) {
		var none struct{}
		key, ok := api.OptionalCommand(w, req, &none)
		if !ok {
			return
		}
		reply, err := r.Rotate(req.Context(), api.Tenant(req), key, endpointID(req), api.Wait(req))
		if err != nil {
			api.Error(w, req, err)
			return
		}
		api.Reply(w, req, reply)
	})
}

// rotationView is a rotation's answer: the endpoint with its new secret.
type rotationView struct {
	RotationID string `json:"rotationId"`
	View
}

// Render answers a rotation: 200, the endpoint with the new secret.
func (r *Rotations) Render(res idempotency.Result) (idempotency.Response, error) {
	rot, ok := res.(Rotation)
	if !ok {
		return idempotency.Response{}, fmt.Errorf("endpoints: cannot render a %T", res)
	}
	v := rotationView{RotationID: rot.ID, View: rot.Endpoint.View()}
	v.Secret = rot.Endpoint.Secret
	return httpapi.ResourceResponse(http.StatusOK, v, Location(rot.Endpoint.ID), 0), nil
}

// Problem is the problem of one of the endpoints' own errors, else nil.
func (r *Rotations) Problem(err error) *problem.Problem { return problemOf(err) }

func problemOf(err error) *problem.Problem {
	var forbidden *outbound.ForbiddenError
	switch {
	case errors.Is(err, ErrNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such webhook endpoint.")
	case errors.As(err, &forbidden):
		return problem.New(http.StatusBadRequest, problem.WebhookURLForbidden, err.Error())
	}
	return nil
}

var (
	_ operation.Instance = (*Service)(nil)
	_ operation.Instance = (*Rotations)(nil)
)
