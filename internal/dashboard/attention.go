package dashboard

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/orphans"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// The Needs attention page's bounds: how old an unfinished key must be to
// be listed, how many of each list it shows, how far back it asks the
// provider for orphans, and how long it waits for that answer.
const (
	defaultStuckAfter = 15 * time.Minute
	attentionLimit    = 50
	orphansWindow     = 7 * 24 * time.Hour
	orphansTimeout    = 5 * time.Second
)

// attentionView is the Needs attention page's.
type attentionView struct {
	Review, Old []idempotency.Stuck
	StuckAfter  time.Duration
	Parked      []outbox.ParkedEvent
	Orphans     []orphans.Orphan
	// OrphansOff: the provider cannot list its objects (no audit);
	// OrphansErr: it could not be asked now.
	OrphansOff bool
	OrphansErr string
	Result     *actionResult
}

func (s *server) attention(w http.ResponseWriter, r *http.Request) {
	s.showAttention(w, r, http.StatusOK, nil)
}

// showAttention renders the Needs attention page, with the result of an
// action just taken, if any. It reads the keys through the engine, the
// parked events through the outbox, and the orphans through their audit,
// which asks the provider: an operator's page, never a request's path.
func (s *server) showAttention(w http.ResponseWriter, r *http.Request, status int, result *actionResult) {
	ctx := r.Context()
	av := attentionView{StuckAfter: s.stuckAfter(), Result: result}
	stuck, err := s.Engine.Stuck(ctx, s.Clock.Now().Add(-av.StuckAfter), attentionLimit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, k := range stuck {
		if k.ManualReviewAt != nil {
			av.Review = append(av.Review, k)
		} else {
			av.Old = append(av.Old, k)
		}
	}
	if av.Parked, err = outbox.Parked(ctx, s.DB, attentionLimit); err != nil {
		s.fail(w, r, err)
		return
	}
	if s.Orphans == nil {
		av.OrphansOff = true
	} else {
		octx, cancel := context.WithTimeout(ctx, orphansTimeout)
		av.Orphans, err = s.Orphans.Find(octx, s.Clock.Now().Add(-orphansWindow))
		cancel()
		if err != nil {
			s.Log.WarnContext(ctx, "dashboard: could not audit the provider for orphans", "error", err)
			av.OrphansErr = "The provider could not be asked for its objects just now: " + err.Error()
		}
	}
	s.render(w, r, status, "attention.html", newView(r, "Needs attention", "/attention", &av))
}

func (s *server) stuckAfter() time.Duration {
	if s.StuckAfter > 0 {
		return s.StuckAfter
	}
	return defaultStuckAfter
}

// resourceOf is the key's resource a form names; false if it names none.
func resourceOf(r *http.Request) (idempotency.Resource, bool) {
	res := idempotency.Resource{Type: r.PostFormValue("resourceType"), ID: r.PostFormValue("resourceId")}
	ok := res.Type != "" && res.ID != "" && validate.StorableText(res.Type) && validate.StorableText(res.ID)
	return res, ok
}

// askNow asks the provider now what became of a key's resource, as the
// reconciler would (Reconciler.ResolveNow: a takeover that may only look),
// rather than when its backoff says.
func (s *server) askNow(w http.ResponseWriter, r *http.Request) {
	res, ok := resourceOf(r)
	if !ok {
		s.showAttention(w, r, http.StatusBadRequest, &actionResult{Action: "Ask the provider", Status: http.StatusBadRequest, Title: "No such key"})
		return
	}
	result := &actionResult{Action: "Ask the provider about " + res.ID, Key: r.PostFormValue("key")}
	outcome, err := s.Reconciler.ResolveNow(r.Context(), res)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		result.Status, result.Title = http.StatusNotFound, "No such key"
	case err != nil && outcome == "":
		s.fail(w, r, err)
		return
	case err != nil:
		result.Status, result.Title, result.Detail = http.StatusOK, "Still unknown",
			"The provider could not settle it: "+err.Error()+". The reconciler keeps looking."
	default:
		result.Status, result.OK, result.Title, result.Detail = http.StatusOK, true, outcomeTitle(outcome), outcomeDetail(outcome)
	}
	s.showAttention(w, r, result.Status, result)
}

// resolve settles a key in manual review as the operator decided, through
// the engine (Reconciler.ResolveAs): the provider is asked first, and a
// decision it contradicts is refused; the audit log records the decision
// with the change.
func (s *server) resolve(w http.ResponseWriter, r *http.Request) {
	res, ok := resourceOf(r)
	decided := idempotency.Resolution{Outcome: r.PostFormValue("outcome"), Reason: strings.TrimSpace(r.PostFormValue("reason"))}
	result := &actionResult{Action: "Resolve " + res.ID + " as " + decided.Outcome, Key: r.PostFormValue("key")}
	if !ok {
		result.Status, result.Title = http.StatusBadRequest, "No such key"
		s.showAttention(w, r, result.Status, result)
		return
	}
	outcome, err := s.Reconciler.ResolveAs(r.Context(), res, decided)
	var contradicted *idempotency.ContradictedError
	switch {
	case errors.Is(err, idempotency.ErrBadResolution):
		result.Status, result.Title, result.Detail = http.StatusBadRequest, "Invalid", "Choose succeeded or declined, and give a reason: the audit log keeps it."
	case errors.Is(err, idempotency.ErrNotFound):
		result.Status, result.Title = http.StatusNotFound, "No such key"
	case errors.Is(err, idempotency.ErrNotInReview):
		result.Status, result.Title, result.Detail = http.StatusConflict, "Not in manual review", "Only a key the reconciler left for a person can be resolved by one: ask the provider instead."
	case errors.As(err, &contradicted):
		result.Status, result.Title, result.Detail = http.StatusConflict, "Refused", contradicted.Error()+". Nothing was changed."
	case errors.Is(err, idempotency.ErrNotResolvable):
		result.Status, result.Title, result.Detail = http.StatusConflict, "Cannot be resolved by a person", err.Error()
	case err != nil:
		s.fail(w, r, err)
		return
	default:
		result.Status, result.OK, result.Title, result.Detail = http.StatusOK, true, outcomeTitle(outcome), outcomeDetail(outcome)
	}
	s.showAttention(w, r, result.Status, result)
}

// unpark releases a parked event (and those of its payment behind it), and
// records it in the audit log, as `paymentsapi outbox unpark` does.
func (s *server) unpark(w http.ResponseWriter, r *http.Request) {
	id := r.PostFormValue("eventId")
	result := &actionResult{Action: "Unpark event " + id}
	err := outbox.ErrNotParked
	if ids.IsUUID(id) {
		err = outbox.UnparkAudited(r.Context(), s.DB, id, s.Clock.Now())
	}
	switch {
	case errors.Is(err, outbox.ErrNotParked):
		result.Status, result.Title, result.Detail = http.StatusOK, "Not parked", "It was unparked already, or never parked: nothing changed."
	case err != nil:
		s.fail(w, r, err)
		return
	default:
		result.Status, result.OK, result.Title, result.Detail = http.StatusOK, true, "Unparked",
			"The relay publishes it, and those of its payment parked behind it, in order, within seconds."
	}
	s.showAttention(w, r, result.Status, result)
}

// outcomeTitle names what the engine did with a key.
func outcomeTitle(outcome string) string {
	switch outcome {
	case idempotency.OutcomeFinal:
		return "Already resolved"
	case idempotency.OutcomeInFlight:
		return "In progress"
	case idempotency.OutcomeManualReview:
		return "Left for a person"
	case idempotency.OutcomeUnresolved, idempotency.OutcomeRescheduled:
		return "Still unknown"
	}
	return "Resolved: " + outcome
}

func outcomeDetail(outcome string) string {
	switch outcome {
	case idempotency.OutcomeFinal:
		return "The key has its final answer already: nothing changed."
	case idempotency.OutcomeInFlight:
		return "A request or the reconciler holds the key now and resolves it: look again in a moment."
	case idempotency.OutcomeManualReview:
		return "The reconciler gave up on it: resolve it below, with a reason."
	case idempotency.OutcomeUnresolved, idempotency.OutcomeRescheduled:
		return "The provider could not settle it yet; the reconciler keeps looking."
	}
	return "The key has its final answer, and the resource its final state."
}
