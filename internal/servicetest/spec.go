package servicetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/paymentsapi/paymentsapi/api"
)

// Exchange is one request and what CONTRACT.md promises for its answer.
type Exchange struct {
	Name   string
	Method string
	Path   string
	Header map[string]string
	Body   string

	Status  int
	Code    string   // the problem's code; "" for a success
	Headers []string // headers the contract promises on this answer; the spec must declare them
	// Members are the members the contract adds to this problem (a
	// declined payment's paymentId and declineCode); each must be there,
	// not empty. A VALIDATION_FAILED problem must always name its errors.
	Members  []string
	Replayed bool // Idempotent-Replayed: true, and only then
	// SpecRejects: the request breaks a rule the spec states (a missing
	// required header, a body that does not match the schema, ...), so
	// validating it against the spec must fail, with an error that contains
	// this text (it names the rule). Other requests must pass.
	SpecRejects string
}

// SpecGroup is a group of exchanges that run on one environment, started
// with Options.
type SpecGroup struct {
	Name    string
	Options []Option
	Run     func(t *testing.T, c *Conformance)
}

// CheckSpec runs each group, in parallel, on a service of its own, and
// checks every request and every answer against api/openapi.yaml (the
// document served at /openapi.yaml): the status is documented for the
// operation, the Content-Type is one the spec lists for it, the body
// matches its schema, the headers the spec declares are well formed (and
// present where it requires them). Each exchange also states what
// CONTRACT.md promises (status, problem code and members, headers), and the
// spec must declare those headers for that answer, so a spec that stops
// documenting them fails too.
//
// Requests an exchange breaks on purpose (no Idempotency-Key, malformed
// JSON, ...) must be rejected by the spec as well: that proves the spec
// documents the rule the server enforces.
func CheckSpec(t *testing.T, groups ...SpecGroup) {
	// Load and validate once, up front, so that a broken document fails
	// here with the loader's message rather than in every group.
	loadSpec(t)
	for _, g := range groups {
		t.Run(g.Name, func(t *testing.T) {
			t.Parallel()
			g.Run(t, &Conformance{t: t, E: New(t, g.Options...), router: loadSpec(t)})
		})
	}
}

// loadSpec parses and validates api/openapi.yaml as embedded in the binary,
// and returns its router. Every caller gets its own copy: nothing is shared
// between parallel tests.
func loadSpec(t *testing.T) routers.Router {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatalf("loading api/openapi.yaml: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("api/openapi.yaml declares openapi %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context, openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("api/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	// Hold the server to the members the spec documents: an answer with a
	// member the spec does not name (a renamed or undocumented field) fails.
	// The document leaves its object schemas open so that clients tolerate
	// additions; this copy closes them. Inline schemas (such as the allOf
	// branch of PaymentDeclinedProblem) stay open, as closing one would
	// reject the members its sibling branches define.
	closed := false
	for _, s := range doc.Components.Schemas {
		if v := s.Value; v != nil && v.Type.Is(openapi3.TypeObject) && len(v.Properties) > 0 &&
			v.AdditionalProperties.Has == nil && v.AdditionalProperties.Schema == nil {
			v.AdditionalProperties.Has = &closed
		}
	}
	// The declared server is the dev one on localhost:8080; the test server
	// listens elsewhere. Match routes by path alone.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return router
}

// Conformance sends exchanges to one environment and checks them.
type Conformance struct {
	E      *Env
	t      *testing.T
	router routers.Router
}

// Check sends x and verifies the exchange; it returns the answer.
func (c *Conformance) Check(x Exchange) Response {
	c.t.Helper()
	r := c.Send(x)
	c.Verify(x, r)
	return r
}

// Send only sends x: it may run on another goroutine.
func (c *Conformance) Send(x Exchange) Response {
	return c.E.Do(x.Method, x.Path, []byte(x.Body), x.Header)
}

// Verify checks the request and the answer of x against the spec, and the
// answer against the contract's promises in x.
func (c *Conformance) Verify(x Exchange, r Response) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s: %s %s: %s\nanswer: %d %v\n%.2000s", x.Name, x.Method, x.Path, fmt.Sprintf(format, args...), r.Status, r.Header, r.Body)
	}

	req, err := http.NewRequest(x.Method, c.E.URL+x.Path, bytes.NewReader([]byte(x.Body)))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range x.Header {
		req.Header.Set(k, v)
	}
	route, pathParams, err := c.router.FindRoute(req)
	if err != nil {
		fail("the spec documents no such operation: %v", err)
		return
	}
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: pathParams, Route: route,
		Options: &openapi3filter.Options{
			MultiError: true,
			// The spec can say a Bearer secret is required, not which
			// secrets exist: check that one is sent, as a client would.
			AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
				scheme, secret, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
				if in.SecurityScheme.Type != "http" || !strings.EqualFold(scheme, in.SecurityScheme.Scheme) || secret == "" {
					return errors.New("no Bearer secret")
				}
				return nil
			},
		},
	}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	switch {
	case x.SpecRejects != "" && reqErr == nil:
		fail("the request breaks the contract, but the spec accepts it: the spec does not document the rule (%s)", x.SpecRejects)
	case x.SpecRejects != "" && !strings.Contains(reqErr.Error(), x.SpecRejects):
		fail("the spec rejects the request, but not for %s: %v", x.SpecRejects, reqErr)
	case x.SpecRejects == "" && reqErr != nil:
		fail("the request does not conform to the spec: %v", reqErr)
	}

	// The answer against the spec: documented status, media type, body
	// schema, declared headers.
	if err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 r.Status,
		Header:                 r.Header,
		Body:                   io.NopCloser(bytes.NewReader(r.Body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}); err != nil {
		fail("the answer does not conform to the spec: %v", err)
	}

	// The answer against the contract.
	if r.Status != x.Status {
		fail("status %d, want %d", r.Status, x.Status)
		return
	}
	documented := route.Operation.Responses.Status(r.Status)
	for _, h := range x.Headers {
		if r.Header.Get(h) == "" {
			fail("no %s header", h)
		}
		if documented == nil || documented.Value == nil || documented.Value.Headers[h] == nil {
			fail("the spec does not declare the %s header of this answer", h)
		}
	}
	// Every error answer says whether to retry it, as the spec declares.
	if r.Status >= 400 {
		want := strconv.FormatBool(!x.Replayed && (r.Status >= 500 || r.Status == http.StatusTooManyRequests ||
			x.Code == "IDEMPOTENCY_KEY_IN_USE"))
		if got := r.Header.Get("Payments-Should-Retry"); got != want {
			fail("Payments-Should-Retry: %q, want %q", got, want)
		}
		if documented == nil || documented.Value == nil || documented.Value.Headers["Payments-Should-Retry"] == nil {
			fail("the spec does not declare the Payments-Should-Retry header of this answer")
		}
	}
	if got := r.Header.Get("Idempotent-Replayed"); (got == "true") != x.Replayed {
		fail("Idempotent-Replayed: %q, want replayed=%v", got, x.Replayed)
	}
	if x.Code == "" {
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		fail("a problem served as %q", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(r.Body, &p); err != nil {
		fail("problem body: %v", err)
		return
	}
	text := func(member string) string { s, _ := p[member].(string); return s }
	if text("code") != x.Code || p["status"] != float64(r.Status) || text("type") == "" || text("title") == "" || text("detail") == "" {
		fail("want code %s with type, title, detail and status %d", x.Code, r.Status)
	}
	members := x.Members
	if x.Code == "VALIDATION_FAILED" {
		members = append(members, "errors")
	}
	for _, m := range members {
		if v, ok := p[m]; !ok || v == "" || v == nil {
			fail("%s without %s", x.Code, m)
		} else if list, isList := v.([]any); isList && len(list) == 0 {
			fail("%s without %s", x.Code, m)
		}
	}
}
