package eventlog

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// Routes adds GET /events and GET /events/{eventId}, the tenant's own only.
func (l *Log) Routes(r chi.Router, api operation.HTTP) {
	r.Get("/events", func(w http.ResponseWriter, r *http.Request) {
		v := r.URL.Query()
		q := Query{Type: v.Get("type"), Cursor: v.Get("cursor"), Limit: 20}
		if s := v.Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 100 {
				api.InvalidParameter(w, "limit", "must be an integer from 1 to 100")
				return
			}
			q.Limit = n
		}
		if s := v.Get("after"); s != "" {
			at, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				api.InvalidParameter(w, "after", "must be an RFC 3339 date-time")
				return
			}
			q.After = at
		}
		page, err := l.List(r.Context(), api.Tenant(r), q)
		switch {
		case errors.Is(err, ErrUnknownType):
			api.InvalidParameter(w, "type", "must be an event type such as payment.succeeded")
		case errors.Is(err, ErrInvalidCursor):
			api.InvalidParameter(w, "cursor", "is not a cursor from this API")
		case err != nil:
			api.Error(w, r, err)
		default:
			api.JSON(w, http.StatusOK, page)
		}
	})
	r.Get("/events/{eventId}", func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "eventId")
		logging.Add(r.Context(), "event_id", id)
		e, err := l.Get(r.Context(), api.Tenant(r), id)
		switch {
		case errors.Is(err, ErrNotFound):
			problem.New(http.StatusNotFound, problem.NotFound, "No such event.").Write(w)
		case err != nil:
			api.Error(w, r, err)
		default:
			api.JSON(w, http.StatusOK, e)
		}
	})
}
