package httpapi

import (
	"net/http"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/operation"
)

// api is what an operation's handlers get (operation.HTTP): every handler
// of every operation reads its command, answers and fails the same way.
type api struct{ errs errorWriter }

var _ operation.HTTP = api{}

// NewAPI is what the server gives each operation's routes, on d's
// operations (for the error answers) and retry advice: for tests of an
// operation's decoding outside a server.
func NewAPI(d Deps) operation.HTTP {
	return api{errs: newErrorWriter(d.RetryAfter, d.Modules, d.Operations)}
}

func (api) Tenant(r *http.Request) string { return tenantOf(r.Context()) }

func (api) Command(w http.ResponseWriter, r *http.Request, dst any) (string, bool) {
	key, prob := idempotencyKey(r)
	if prob == nil {
		prob = decodeJSON(w, r, dst)
	}
	if prob != nil {
		prob.Write(w)
		return "", false
	}
	return key, true
}

func (a api) OptionalCommand(w http.ResponseWriter, r *http.Request, dst any) (string, bool) {
	if r.ContentLength == 0 && r.Header.Get("Content-Type") == "" {
		key, prob := idempotencyKey(r)
		if prob != nil {
			prob.Write(w)
			return "", false
		}
		return key, true
	}
	return a.Command(w, r, dst)
}

func (api) Wait(r *http.Request) time.Duration { return preferWait(r.Header.Values("Prefer")) }

func (api) Reply(w http.ResponseWriter, _ *http.Request, reply idempotency.Reply) {
	writeReply(w, reply)
}

func (a api) Error(w http.ResponseWriter, r *http.Request, err error) { a.errs.write(w, r, err) }

func (api) JSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

func (api) InvalidParameter(w http.ResponseWriter, name, message string) {
	invalidParameter(w, name, message)
}
