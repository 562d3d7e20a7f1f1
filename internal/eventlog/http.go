package eventlog

import (
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/query"
)

// Routes adds GET /events and GET /events/{eventId}, the tenant's own only.
func (l *Log) Routes(r chi.Router, api operation.HTTP) {
	params := []string{"type", "createdFrom", "createdTo", "after", "limit", "cursor"}
	for _, s := range l.subjects {
		params = append(params, s.Member)
	}
	r.Method(http.MethodGet, "/events", query.Declare(l.list(api), params...))
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

// list handles GET /events: types as a comma-separated list, a creation
// range (from included, to excluded; after, the older form of from, is
// excluded), and each subject's id.
func (l *Log) list(api operation.HTTP) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := query.Read(r)
		q := Query{Types: v.List("type", l.names), After: v.Time("after"), Limit: v.Limit(), Cursor: v.Cursor()}
		q.CreatedFrom, q.CreatedTo = v.Range("createdFrom", "createdTo")
		for _, s := range l.subjects {
			if id := v.Text(s.Member); id != "" {
				q.About = append(q.About, SubjectID{Member: s.Member, ID: id})
			}
		}
		if err := v.Err(); err != nil {
			api.Error(w, r, err)
			return
		}
		page, err := l.List(r.Context(), api.Tenant(r), q)
		switch {
		case errors.Is(err, ErrInvalidCursor):
			api.InvalidParameter(w, "cursor", "is not a cursor from this API")
		case err != nil:
			api.Error(w, r, err)
		default:
			api.JSON(w, http.StatusOK, page)
		}
	}
}
