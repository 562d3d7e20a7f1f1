package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/carddata"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// RequestIDHeader carries the request id, in and out.
const RequestIDHeader = "X-Request-Id"

// requestContext gives every request its log fields, a request id (the
// client's X-Request-Id if it is sane, a fresh one otherwise), which the
// audit records too (package actor), and its client address.
func requestContext(log *slog.Logger, addrs clientAddresses) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.Header.Get(RequestIDHeader)
			if !saneRequestID(id) {
				id = actor.NewRequestID()
			}
			ctx := withLogger(logging.WithFields(r.Context()), log)
			ctx = withClientAddr(actor.WithRequestID(ctx, id), addrs.of(r))
			logging.Add(ctx, "request_id", id)
			w.Header().Set(RequestIDHeader, id)
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// saneRequestID reports whether a client's request id may be used and
// logged as it is: at most 64 characters of [-_.0-9A-Za-z], and no card
// number (every log line of the request carries it).
func saneRequestID(id string) bool {
	if id == "" || len(id) > 64 || carddata.Contains(id) {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c == '-' || c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// recoverPanics turns a panic into a logged 500 problem.
func recoverPanics(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					log.ErrorContext(r.Context(), "panic serving request", "panic", v)
					problem.New(http.StatusInternalServerError, problem.Internal, "An unexpected error occurred.").Write(w)
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// observe logs every request once, and measures it by route pattern.
func observe(log *slog.Logger, m *metrics.Metrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			route := "unmatched"
			if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
				route = rc.RoutePattern()
			}
			status := ww.Status()
			if status == 0 {
				status = http.StatusOK
			}
			elapsed := time.Since(start)
			m.HTTPRequests.WithLabelValues(route, r.Method, strconv.Itoa(status)).Observe(elapsed.Seconds())
			if route == "/healthz" || route == "/readyz" || route == "/metrics" {
				return
			}
			log.InfoContext(r.Context(), "http request", "method", r.Method, "route", route,
				"status", status, "duration_ms", elapsed.Milliseconds(),
				"replayed", ww.Header().Get(ReplayedHeader) == "true",
				"client_addr", clientAddr(r), "user_agent", userAgent(r))
		})
	}
}

// maxLoggedUserAgent bounds the user agent a request's log line carries.
const maxLoggedUserAgent = 256

// userAgent is r's User-Agent, as logged: cut to maxLoggedUserAgent bytes.
func userAgent(r *http.Request) string {
	ua := r.UserAgent()
	if len(ua) > maxLoggedUserAgent {
		ua = strings.ToValidUTF8(ua[:maxLoggedUserAgent], "")
	}
	return ua
}

// bearer reads a request's `Authorization: Bearer <secret>`, the start of
// every authentication: an address that failed too often is refused 429
// before its key is looked at, and a missing or malformed header is a
// failure, answered 401 with detail. fail records another failure and
// answers 401; ok is false when the request has been answered.
func bearer(w http.ResponseWriter, r *http.Request, throttle *authThrottle, m *metrics.Metrics, detail string) (secret string, fail func(detail string), ok bool) {
	addr := clientAddr(r)
	if wait, refused := throttle.refused(addr); refused {
		tooManyFailedAuthentications(w, wait)
		return "", nil, false
	}
	fail = func(detail string) {
		throttle.fail(addr)
		m.AuthFailures.Inc()
		unauthorized(w, detail)
	}
	scheme, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	secret = strings.TrimSpace(secret)
	if !strings.EqualFold(scheme, "Bearer") || secret == "" {
		fail(detail)
		return "", nil, false
	}
	return secret, fail, true
}

// authenticate admits requests with a valid `Authorization: Bearer <secret>`
// and records their tenant, and their key as the actor of what they do
// (api:<key id>, package actor) and in their log lines (key_id, never the
// secret). Others get 401 and nothing is written; an address that failed
// too often is refused 429 before its key is looked at.
func authenticate(auth *apikeys.Authenticator, throttle *authThrottle, m *metrics.Metrics, errs errorWriter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			secret, fail, ok := bearer(w, r, throttle, m, "Send your API key as `Authorization: Bearer <secret>`.")
			if !ok {
				return
			}
			id, err := auth.Authenticate(r.Context(), secret)
			switch {
			case errors.Is(err, apikeys.ErrUnknownKey):
				fail("The API key is not valid.")
				return
			case err != nil:
				errs.write(w, r, err)
				return
			}
			logging.Add(r.Context(), "tenant", id.Tenant)
			logging.Add(r.Context(), "key_id", id.KeyID)
			ctx := actor.WithActor(withTenant(r.Context(), id.Tenant), actor.API(id.KeyID))
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

func unauthorized(w http.ResponseWriter, detail string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="paymentsapi"`)
	problem.New(http.StatusUnauthorized, problem.Unauthorized, detail).Write(w)
}

// rejectUnstorableIDs answers 404 for a path id that PostgreSQL text cannot
// hold (invalid UTF-8, or a NUL): no resource has such an id, and the query
// would fail with a 500. It runs after routing, so it sees the route's
// parameters ({paymentId}: "No such payment.").
func rejectUnstorableIDs(errs errorWriter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if rc := chi.RouteContext(r.Context()); rc != nil {
				for i, name := range rc.URLParams.Keys {
					if validate.StorableText(rc.URLParams.Values[i]) {
						continue
					}
					problem.New(http.StatusNotFound, problem.NotFound, "No such "+strings.TrimSuffix(name, "Id")+".").Write(w)
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}
