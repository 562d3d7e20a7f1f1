package httpapi

import (
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/audit"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/operators"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/query"
)

// authenticateOperator admits requests whose bearer secret is an
// operator's (OPERATOR_KEYS), as the actor operator:<name>. A tenant's
// valid API key is refused 403 (OPERATORS_ONLY); anything else is a failed
// authentication, 401 and throttled as on the tenants' routes.
func authenticateOperator(ops operators.Keys, keys *apikeys.Authenticator, throttle *authThrottle, m *metrics.Metrics, errs errorWriter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			secret, fail, ok := bearer(w, r, throttle, m, "Send an operator's key as `Authorization: Bearer <secret>`.")
			if !ok {
				return
			}
			if name, ok := ops.Authenticate(secret); ok {
				logging.Add(r.Context(), "operator", name)
				next.ServeHTTP(w, r.WithContext(actor.WithActor(r.Context(), actor.Operator(name))))
				return
			}
			id, err := keys.Authenticate(r.Context(), secret)
			switch {
			case errors.Is(err, apikeys.ErrUnknownKey):
				fail("The key is not an operator's key.")
			case err != nil:
				errs.write(w, r, err)
			default:
				logging.Add(r.Context(), "tenant", id.Tenant)
				logging.Add(r.Context(), "key_id", id.KeyID)
				problem.New(http.StatusForbidden, problem.OperatorsOnly,
					"Only an operator's key (OPERATOR_KEYS) may read this; a tenant's API key may not.").Write(w)
			}
		})
	}
}

// handleAuditEvents answers GET /audit-events: the audit log, newest first,
// every tenant's, paged like the other listings.
func handleAuditEvents(db *pgxpool.Pool, api api) http.Handler {
	return query.Declare(func(w http.ResponseWriter, r *http.Request) {
		v := query.Read(r)
		q := audit.Query{Tenant: v.Text("tenantId"), Action: v.Text("action"), Cursor: v.Cursor(), Limit: v.Limit()}
		if err := v.Err(); err != nil {
			api.Error(w, r, err)
			return
		}
		page, err := audit.List(r.Context(), db, q)
		switch {
		case errors.Is(err, audit.ErrInvalidCursor):
			api.InvalidParameter(w, "cursor", "is not a cursor from this API")
		case err != nil:
			api.Error(w, r, err)
		default:
			api.JSON(w, http.StatusOK, page)
		}
	}, "tenantId", "action", "limit", "cursor")
}
