package dashboard

import (
	"errors"
	"net/http"

	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/endpoints"
	"github.com/paymentsapi/paymentsapi/internal/eventlog"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
)

// recentEvents is how many of the tenant's latest events the Webhooks page
// shows with their deliveries.
const recentEvents = 20

// webhooksView is the Webhooks page's.
type webhooksView struct {
	Endpoints []endpoints.View
	Events    []eventView
	Tenants   []tenantRow // an operator who chose no tenant yet
	Key       string      // the resend forms' idempotency key
	Result    *actionResult
}

func (s *server) webhooks(w http.ResponseWriter, r *http.Request) {
	s.showWebhooks(w, r, http.StatusOK, nil)
}

// showWebhooks renders the tenant's endpoints and its latest events with
// each delivery attempt, read as GET /webhook-endpoints, GET /events and
// GET /events/{id}/deliveries read them.
func (s *server) showWebhooks(w http.ResponseWriter, r *http.Request, status int, result *actionResult) {
	wv := webhooksView{Result: result}
	v := newView(r, "Webhooks", "/webhooks", &wv)
	tenant := tenantOf(r)
	if tenant == "" {
		tenants, err := s.tenants(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		wv.Tenants = tenants
		s.render(w, r, status, "webhooks.html", v)
		return
	}
	ctx := r.Context()
	list, err := s.Endpoints.List(ctx, tenant)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, e := range list {
		wv.Endpoints = append(wv.Endpoints, e.View())
	}
	page, err := s.Events.List(ctx, tenant, eventlog.Query{Limit: recentEvents})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, e := range page.Items {
		attempts, err := s.Deliveries.Attempts(ctx, tenant, e.ID)
		if err != nil && !errors.Is(err, delivery.ErrEventNotFound) {
			s.fail(w, r, err)
			return
		}
		wv.Events = append(wv.Events, eventView{Entry: e, Attempts: attempts})
	}
	if len(wv.Endpoints) > 0 && len(wv.Events) > 0 {
		wv.Key = newKey()
	}
	s.render(w, r, status, "webhooks.html", v)
}

// resend sends an event again to the tenant's endpoints (or the one
// named), through the resend_event operation the API's
// POST /events/{eventId}/resend calls, under the key the page made.
func (s *server) resend(w http.ResponseWriter, r *http.Request) {
	tenant := tenantOf(r)
	eventID, endpoint := r.PostFormValue("eventId"), r.PostFormValue("endpointId")
	result := &actionResult{Action: "Resend event " + eventID}
	if tenant == "" {
		s.problem(w, r, http.StatusNotFound, "No such event.")
		return
	}
	key, err := idempotency.ParseKey([]string{r.PostFormValue("key")})
	if err != nil {
		result.Status, result.Title, result.Detail = http.StatusBadRequest, "No idempotency key", err.Error()
		s.showWebhooks(w, r, result.Status, result)
		return
	}
	result.Key = key
	reply, err := s.Deliveries.Resend(r.Context(), tenant, key, eventID, delivery.ResendRequest{EndpointID: endpoint}, 0)
	if err != nil {
		if !describe(result, s.Deliveries, err) {
			s.fail(w, r, err)
			return
		}
		s.showWebhooks(w, r, result.Status, result)
		return
	}
	answered(result, reply)
	if result.OK {
		result.Detail = "The event is due again now: its new attempts appear below as they are made."
		if reply.Replayed {
			result.Detail = "This answer is a replay: the key was used before, and the event was not made due again."
		}
	}
	s.showWebhooks(w, r, http.StatusOK, result)
}
