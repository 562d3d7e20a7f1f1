package httpapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/paymentsapi/paymentsapi/internal/problem"
)

type loggerKey struct{}

// logFrom returns the service logger carried by the request.
func logFrom(r *http.Request) *slog.Logger {
	if l, ok := r.Context().Value(loggerKey{}).(*slog.Logger); ok {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

func withLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// handleHealthz answers 200 while the process is up.
func handleHealthz() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}

// handleReadyz answers 200 when the database is reachable and migrated.
func handleReadyz(ready func(context.Context) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r.Context()); err != nil {
			logFrom(r).WarnContext(r.Context(), "not ready", "error", err)
			w.Header().Set("Retry-After", "1")
			problem.New(http.StatusServiceUnavailable, problem.ServiceUnavailable, "Not ready: "+err.Error()).Write(w)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}

// handleOpenAPI serves the OpenAPI document.
func handleOpenAPI(doc []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(doc)
	}
}

func handleNotFound() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		problem.New(http.StatusNotFound, problem.NotFound, "No such resource.").Write(w)
	}
}

func handleMethodNotAllowed() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		problem.New(http.StatusMethodNotAllowed, problem.MethodNotAllowed, "This resource does not support that method.").Write(w)
	}
}
