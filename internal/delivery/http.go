package delivery

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// The codes of a resend's own conflicts: a disabled endpoint, and an event
// only an earlier release's copy of the log holds (ErrEventNotResendable).
const (
	CodeEndpointDisabled   problem.Code = "WEBHOOK_ENDPOINT_DISABLED"
	CodeEventNotResendable problem.Code = "EVENT_NOT_RESENDABLE"
)

// Routes adds GET /events/{eventId}/deliveries and POST
// /events/{eventId}/resend, on the tenant's own events only.
func (s *Resends) Routes(r chi.Router, api operation.HTTP) {
	r.Get("/events/{eventId}/deliveries", func(w http.ResponseWriter, r *http.Request) {
		attempts, err := s.Attempts(r.Context(), api.Tenant(r), eventID(r))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		api.JSON(w, http.StatusOK, struct {
			Items []Attempt `json:"items"`
		}{attempts})
	})
	r.Post("/events/{eventId}/resend", func(w http.ResponseWriter, r *http.Request) {
		var req ResendRequest
		key, ok := api.OptionalCommand(w, r, &req)
		if !ok {
			return
		}
		reply, err := s.Resend(r.Context(), api.Tenant(r), key, eventID(r), req, api.Wait(r))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		api.Reply(w, r, reply)
	})
}

// eventID is r's {eventId}, added to its log line.
func eventID(r *http.Request) string {
	id := chi.URLParam(r, "eventId")
	logging.Add(r.Context(), "event_id", id)
	return id
}

// Render answers a resend: 202, sent again as soon as a worker claims it.
func (s *Resends) Render(res idempotency.Result) (idempotency.Response, error) {
	r, ok := res.(Resend)
	if !ok {
		return idempotency.Response{}, fmt.Errorf("delivery: cannot render a %T", res)
	}
	return httpapi.ResourceResponse(http.StatusAccepted, r, "/events/"+r.EventID+"/deliveries", 0), nil
}

// Problem is the problem of one of the resends' own errors, else nil.
func (s *Resends) Problem(err error) *problem.Problem {
	switch {
	case errors.Is(err, ErrEventNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such event.")
	case errors.Is(err, ErrEndpointNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such webhook endpoint.")
	case errors.Is(err, ErrEndpointDisabled):
		return problem.Titled(http.StatusConflict, CodeEndpointDisabled, "Webhook endpoint disabled", err.Error())
	case errors.Is(err, ErrEventNotResendable):
		return problem.Titled(http.StatusConflict, CodeEventNotResendable, "Event not resendable", err.Error())
	}
	return nil
}

var _ operation.Instance = (*Resends)(nil)
