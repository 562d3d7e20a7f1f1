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

// The endpoints' own problem codes.
const (
	// CodeTooManyEndpoints: the tenant has MaxPerTenant endpoints (409).
	CodeTooManyEndpoints problem.Code = "TOO_MANY_ENDPOINTS"
	// CodeSecretsKeyMissing: the server has no SECRETS_KEY, so it cannot
	// store or read a webhook secret (503).
	CodeSecretsKeyMissing problem.Code = "SECRETS_KEY_MISSING"
)

// secretAnswer is the body of GET /webhook-endpoints/{endpointId}/secret.
type secretAnswer struct {
	EndpointID string `json:"endpointId"`
	Secret     string `json:"secret"`
}

// Location is the URL path of endpoint id.
func Location(id string) string { return "/webhook-endpoints/" + id }

// Routes adds POST and GET /webhook-endpoints, GET and DELETE
// /webhook-endpoints/{endpointId} and GET
// /webhook-endpoints/{endpointId}/secret, the tenant's own endpoints only.
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
	r.Get("/webhook-endpoints/{endpointId}/secret", func(w http.ResponseWriter, r *http.Request) {
		id := endpointID(r)
		secret, err := s.Reveal(r.Context(), api.Tenant(r), id)
		if err != nil {
			api.Error(w, r, err)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		api.JSON(w, http.StatusOK, secretAnswer{EndpointID: id, Secret: secret})
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

// Render answers a created endpoint as its key stores it, for replays: 201,
// with "secret": null.
func (s *Service) Render(res idempotency.Result) (idempotency.Response, error) {
	return s.render(res, false)
}

// RenderFirst answers a created endpoint to the request that created it:
// 201, with its secret.
func (s *Service) RenderFirst(res idempotency.Result) (idempotency.Response, error) {
	return s.render(res, true)
}

func (s *Service) render(res idempotency.Result, shown bool) (idempotency.Response, error) {
	e, ok := res.(Endpoint)
	if !ok {
		return idempotency.Response{}, fmt.Errorf("endpoints: cannot render a %T", res)
	}
	return httpapi.ResourceResponse(http.StatusCreated, e.secretView(shown), Location(e.ID), 0), nil
}

// Problem is the problem of one of the endpoints' own errors, else nil.
func (s *Service) Problem(err error) *problem.Problem { return problemOf(err) }

// Routes adds POST /webhook-endpoints/{endpointId}/rotate-secret.
func (r *Rotations) Routes(router chi.Router, api operation.HTTP) {
	router.Post("/webhook-endpoints/{endpointId}/rotate-secret", func(w http.ResponseWriter, req *http.Request) {
		var body RotateRequest
		key, ok := api.OptionalCommand(w, req, &body)
		if !ok {
			return
		}
		overlap, err := body.overlap()
		if err != nil {
			api.Error(w, req, err)
			return
		}
		reply, err := r.Rotate(req.Context(), api.Tenant(req), key, endpointID(req), overlap, api.Wait(req))
		if err != nil {
			api.Error(w, req, err)
			return
		}
		api.Reply(w, req, reply)
	})
}

// rotationView is a rotation's answer: the endpoint with its new secret (or
// "secret": null, as stored).
type rotationView struct {
	RotationID string `json:"rotationId"`
	SecretView
}

// Render answers a rotation as its key stores it, for replays: 200, the
// endpoint with "secret": null.
func (r *Rotations) Render(res idempotency.Result) (idempotency.Response, error) {
	return r.render(res, false)
}

// RenderFirst answers a rotation to the request that made it: 200, the
// endpoint with its new secret.
func (r *Rotations) RenderFirst(res idempotency.Result) (idempotency.Response, error) {
	return r.render(res, true)
}

func (r *Rotations) render(res idempotency.Result, shown bool) (idempotency.Response, error) {
	rot, ok := res.(Rotation)
	if !ok {
		return idempotency.Response{}, fmt.Errorf("endpoints: cannot render a %T", res)
	}
	v := rotationView{RotationID: rot.ID, SecretView: rot.Endpoint.secretView(shown)}
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
	case errors.Is(err, ErrTooMany):
		return problem.Titled(http.StatusConflict, CodeTooManyEndpoints, "Too many webhook endpoints",
			fmt.Sprintf("A tenant may have at most %d webhook endpoints: delete one first.", MaxPerTenant))
	case errors.Is(err, ErrSecretsKeyMissing):
		return problem.Titled(http.StatusServiceUnavailable, CodeSecretsKeyMissing, "Secrets key missing",
			"The server has no SECRETS_KEY, so it can neither store nor read webhook signing secrets; its operator must set one.")
	}
	return nil
}

var (
	_ operation.Instance     = (*Service)(nil)
	_ operation.Instance     = (*Rotations)(nil)
	_ idempotency.Disclosing = (*Service)(nil)
	_ idempotency.Disclosing = (*Rotations)(nil)
)
