// Package httpapitest helps test an operation's HTTP decoding outside a
// server.
package httpapitest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// DecodeCommand runs body through what an operation's create handler does
// before the idempotency engine: the service's command decoding
// (operation.HTTP.Command) and validate, and returns the command if both
// accept it. A refusal is written as the handler would write it
// (operation.HTTP.Error), and must be a 4xx problem+json with a code and
// the status it is served with: never a 5xx.
func DecodeCommand[Req, Cmd any](t *testing.T, body []byte, validate func(Req) (Cmd, error)) (Cmd, bool) {
	t.Helper()
	var req Req
	w, r, ok := Send(body, &req)
	if ok { // else answered already
		cmd, err := validate(req)
		if err == nil {
			return cmd, true
		}
		httpapi.NewAPI(httpapi.Deps{}).Error(w, r, err)
	}
	var p problem.Problem
	if jerr := json.Unmarshal(w.Body.Bytes(), &p); jerr != nil || w.Code < 400 || w.Code > 499 ||
		w.Header().Get("Content-Type") != problem.ContentType || p.Code == "" || p.Status != w.Code {
		t.Fatalf("%q refused with %d %s %s (%v): want a 4xx problem with a code", body, w.Code, w.Header().Get("Content-Type"), w.Body, jerr)
	}
	var none Cmd
	return none, false
}

// Send sends body as a command into dst, as a handler reads one (JSON, with
// an Idempotency-Key), through an API with no dependencies, outside a
// server. It returns the recorder, holding the answer if the command was
// refused, the request, and whether the command was accepted.
func Send(body []byte, dst any) (*httptest.ResponseRecorder, *http.Request, bool) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "k")
	_, ok := httpapi.NewAPI(httpapi.Deps{}).Command(w, r, dst)
	return w, r, ok
}
