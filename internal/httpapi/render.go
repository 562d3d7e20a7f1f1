package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/jsontext"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// ResourceResponse is an operation's answer with a resource: its JSON view
// with status, its Location, and a Retry-After when retryAfter is set (an
// answer that is not final: come back later).
func ResourceResponse(status int, view any, location string, retryAfter time.Duration) idempotency.Response {
	body, _ := jsontext.Marshal(view) // views hold strings and times only
	h := map[string]string{"Content-Type": "application/json", "Location": location}
	if retryAfter > 0 {
		h["Retry-After"] = retryAfterValue(retryAfter)
	}
	return idempotency.Response{Status: status, Body: body, Headers: h}
}

// ProblemResponse is an operation's answer with a problem (a final one, such
// as a decline, stored and replayed like any answer).
func ProblemResponse(p *problem.Problem) idempotency.Response {
	return idempotency.Response{Status: p.Status, Body: p.JSON(), Headers: map[string]string{"Content-Type": problem.ContentType}}
}

// retryAfterValue is the one rule for the Retry-After header: whole
// seconds, rounded up, at least 1.
func retryAfterValue(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}

// writeReply sends an engine reply: the stored (or fresh) answer, marked when
// it is a replay.
func writeReply(w http.ResponseWriter, reply idempotency.Reply) {
	for k, v := range reply.Response.Headers {
		w.Header().Set(k, v)
	}
	if reply.ComeBack > 0 && w.Header().Get("Retry-After") != "" {
		// Not known before then: the advice follows the engine's look.
		w.Header().Set("Retry-After", retryAfterValue(reply.ComeBack))
	}
	if reply.Replayed {
		w.Header().Set(ReplayedHeader, "true")
	}
	// An engine's reply with an error status is a final answer (a
	// decline), stored for its key whether or not this is its replay.
	problem.AdviseRetry(w.Header(), reply.Response.Status, "", true)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(reply.Response.Status)
	_, _ = w.Write(reply.Response.Body)
}
