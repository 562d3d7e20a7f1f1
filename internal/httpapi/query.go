package httpapi

import (
	"net/http"

	"github.com/paymentsapi/paymentsapi/internal/query"
)

// refuseUnknownParameters answers 400 VALIDATION_FAILED, naming each, for
// the query parameters a route does not take, given twice, or not
// URL-encoded (query.Check): every API route takes only the parameters its
// handler declares (query.Declare), and none if it declares none.
//
// It must be the last middleware of its group. chi builds each route's
// chain when the route is registered, handing the last middleware the
// route's own handler: that is when the parameters the route takes are
// read from it, once. A middleware added to one route (chi's With) would
// hide the declaration, and the route would refuse every parameter: loud,
// never a parameter silently ignored.
func refuseUnknownParameters(errs errorWriter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		names := query.Names(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.RawQuery != "" {
				if err := query.Check(r.URL.RawQuery, names); err != nil {
					errs.write(w, r, err)
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}
