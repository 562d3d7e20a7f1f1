// Package operation is the contract between an idempotent operation and the
// rest of the service. An operation is a module: one package (payments,
// refunds, ...) that exports one Module value declaring what the service
// needs from it, and internal/app registers the modules in one list. The
// engine, the reconciler, the HTTP adapter, the provider's webhooks, the
// outbox's consumers and the ledger loop over that list: no shared package
// names an operation.
//
// What a Module declares, and who reads it:
//   - Name: the scope of its idempotency keys (create_payment). The engine
//     and the reconciler run its keys through its Instance (Resume).
//   - Resource: the type of what its keys create, the name of that
//     resource's id in answers and problems, and the key the provider knows
//     it by: the HTTP adapter names the resource of an expired key; the
//     provider's webhooks find our resource behind the provider's object.
//   - Events: the event types it writes to the outbox (their public names:
//     the NATS subjects) and, for those the ledger books, how.
//   - ProviderEvents: a provider port of its own's webhook events about its
//     resources (those of the service's ports are their adapters' to
//     declare, by Resource.ProviderObject).
//   - Uses and Hooks: the other modules whose ports it acts through, and
//     what it runs at the points they offer. Build wires them, so the
//     order of the list changes nothing.
//   - Settings: the settings it reads, which package config loads and
//     lists with the service's own.
//   - New: the operation built on the service's collaborators (Env): its
//     routes, its rendering of results, its problems, its recovery.
//
// The state machine, the fingerprint of a command and the provider port an
// operation calls are its own business: they are checked by its own tests
// and, for the state machine, by the database (its rows in its migration).
package operation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/setting"
)

// Module is one idempotent operation, as the rest of the service needs it.
type Module struct {
	// Name is the operation's name: the scope of its idempotency keys, one
	// naming scheme for all (verb_noun: create_payment, create_refund).
	Name string
	// Resource is what a key of the operation creates.
	Resource Resource
	// Events are the event types the operation writes to the outbox.
	Events []Event
	// ProviderEvents are the webhook events about the operation's
	// resources of a provider port of its own. The events about the
	// objects of the service's ports are the adapter's to declare
	// (Resource.ProviderObject).
	ProviderEvents []ProviderEvent
	// Uses names the modules whose operations this one acts through, by
	// the ports they export (a refund through its payment's: Lookup).
	// Build builds them first, wherever they stand in the list, and New
	// may look up those alone.
	Uses []string
	// Hooks are what this operation runs at the points other operations
	// offer (the authorization's expiry, scheduled with each payment's
	// move to AUTHORIZED). Build hands each to the operation that offers
	// it once every operation is built.
	Hooks []Hook
	// Settings are the settings the operation reads where it is built
	// (setting.Value on Env.Settings): package config loads and lists
	// them with the service's own.
	Settings []setting.Setting
	// Routes are the routes its Instance adds, as "METHOD /pattern" (POST
	// /payouts): an operation the provider cannot serve answers them 501
	// (ErrUnsupported), and the tests of the spec name their parameters.
	Routes []string
	// ProblemCodes are the codes of the operation's own problems (Problem),
	// for the spec's list of codes.
	ProblemCodes []problem.Code
	// Spec is the operation's part of the OpenAPI document (YAML: its
	// paths, and its schemas under components.schemas), merged into
	// api/openapi.yaml by `make spec` (package apispec); nil: the document
	// holds its part already.
	Spec []byte
	// New builds the operation on the service's collaborators. When the
	// provider lacks a port the operation needs, New returns an error that
	// wraps ErrUnsupported: Build then stands in an operation that answers
	// each of Routes 501 OPERATION_NOT_SUPPORTED_BY_PROVIDER, and that the
	// reconciler skips (Supported).
	New func(Env) (Instance, error)
}

// Hook is what one operation runs at a point another operation offers. The
// offering package makes the Hooks of its points (payments.WhenAuthorized),
// so that the hook's type is checked where it is declared.
type Hook struct {
	// Module names the operation that offers the point, Point the point.
	Module, Point string
	// Of makes the hook from the declaring operation as built: a function
	// of the type the point runs.
	Of func(self Instance) (any, error)
}

// Hooked is what an operation that offers hook points implements: Build
// adds to it, at point, each hook that a module declares for it.
type Hooked interface {
	AddHook(point string, hook any) error
}

// Resource describes the resource an operation's keys create.
type Resource struct {
	// Type names it in idempotency keys and outbox events (payment).
	Type string
	// IDField is the name of its id in answers and problems (paymentId).
	IDField string
	// ProviderKey derives from its id the idempotency key the provider
	// knows it by (nil: the operation calls no provider). It is also how a
	// provider's object names our resource when its metadata does not.
	ProviderKey func(id string) string
	// ProviderObject is the kind of the provider's object that stands for
	// it ("": none): the provider's webhook events about that kind, as
	// its adapter declares them, name the resource.
	ProviderObject provider.Object
}

// IDFromProviderKey is the id of the resource whose provider key is key, or
// "" when key is no key of this resource type.
func (r Resource) IDFromProviderKey(key string) string {
	if r.ProviderKey == nil {
		return ""
	}
	prefix := r.ProviderKey("")
	if len(key) <= len(prefix) || key[:len(prefix)] != prefix {
		return ""
	}
	id := key[len(prefix):]
	if r.ProviderKey(id) != key {
		return ""
	}
	return id
}

// Event is one event type an operation writes.
type Event struct {
	// Type is the event's public name: the outbox's event_type, the NATS
	// subject's last token, what consumers branch on (PaymentSucceeded).
	Type string
	// Ledger, if set, is how the ledger books an event of this type.
	Ledger func(outbox.Event) (LedgerEntry, error)
	// Name is the event's name for merchants (the event log, GET /events:
	// payment.succeeded); "" keeps it out of the log.
	Name string
	// Hidden are the keys of its payload, besides tenantId, that merchants
	// never see (those only consumers read, such as the ledger).
	//
	// The event log (GET /events) shows an event with a Name as its payload
	// without tenantId and the Hidden keys: the resource's body as of the
	// event. It does this in SQL on the payload as it is, so a payload must
	// be a JSON object that carries the tenant under "tenantId" and the
	// resource's id under the module's Resource.IDField; an event whose
	// payload does not is left out of the log, and logged.
	Hidden []string
}

// LedgerEntry is what the ledger books for one event: one entry per
// (payment, entry type, line), whatever how often the event comes.
type LedgerEntry struct {
	// Type names the entry (PAYMENT_SUCCEEDED).
	Type string
	// PaymentID is the payment the money moved for.
	PaymentID string
	// Line tells apart the entries of one type of one payment (a refund's
	// id); "" when a payment has at most one.
	Line              string
	TenantID          string // "" for events written before tenants were in payloads
	AccountID         string
	AmountMinor       int64
	Currency          string
	ProviderReference string // "" when none
}

// ProviderEvent is one type of a provider's webhook events that names a
// resource of the operation.
type ProviderEvent = provider.WebhookEvent

// Env is what every operation is built on.
type Env struct {
	DB      *pgxpool.Pool
	Engine  *idempotency.Engine
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// Provider is the payment provider's adapter; an operation that calls
	// it asserts the port it calls (provider.Charges, provider.Refunds).
	Provider provider.Adapter
	Config   Config
	// Settings are the values of the modules' settings (Module.Settings);
	// one without a value reads as its default.
	Settings setting.Values
	// Built holds, by name, the operations this one uses (Module.Uses),
	// built before it, so that it can act on another's resource through
	// the port that one exports (a refund through its payment's).
	Built map[string]Instance
	// Modules are all the registered modules, this one's included, for an
	// operation that needs what the others declare (the event names a
	// webhook endpoint may subscribe to).
	Modules []Module
}

// Config is the service's timing rules, as operations need them.
type Config struct {
	ReplayTTL         time.Duration // IDEMPOTENCY_TTL: the replay window
	ProviderTimeout   time.Duration // PROVIDER_TIMEOUT
	ProviderKeyWindow time.Duration // PROVIDER_KEY_TTL
	ProviderLookupLag time.Duration // the provider's and PROVIDER_LOOKUP_LAG, the longer
	RefusalRecheck    time.Duration // REFUSAL_RECHECK
	// PublicURL is the base URL customers' browsers reach the service at
	// (PUBLIC_URL), without a trailing slash.
	PublicURL string
	// AllowHTTPReturnURL: a customer may be sent back to a plain http URL
	// (dev mode only).
	AllowHTTPReturnURL bool
}

// Instance is an operation built on its collaborators.
type Instance interface {
	// Name, Resume and Render plug it into the engine and the reconciler.
	idempotency.Operation
	// Routes adds the operation's routes (its command, and the reads of its
	// resource) to r, handled with api.
	Routes(r chi.Router, api HTTP)
	// Problem is the problem document of err when err is one of the
	// operation's own errors, else nil.
	Problem(err error) *problem.Problem
}

// PublicRouter is what an Instance also implements when it has routes that
// no API key authenticates: a customer's browser reaches them (the return
// from an authentication). Such a handler trusts nothing of the request
// but the resource's id, and reads the rest from the database and the
// provider.
type PublicRouter interface {
	PublicRoutes(r chi.Router)
}

// HTTP is what the HTTP adapter (package httpapi) offers an operation's
// handlers: the service's one way to read a command and to answer, so that
// each handler only decodes, calls and writes.
type HTTP interface {
	// Tenant is the authenticated tenant of r.
	Tenant(r *http.Request) string
	// Command reads r's Idempotency-Key and its JSON body into dst. If
	// either is missing or malformed it answers the problem and ok is false.
	// An empty body sent as JSON is {}: it leaves dst as it is, for the
	// command's validation to name the fields it requires.
	Command(w http.ResponseWriter, r *http.Request, dst any) (key string, ok bool)
	// OptionalCommand is Command for a command whose every field is
	// optional: a request without a body (no Content-Type, no bytes) leaves
	// dst as it is, as the body {} would, and as an empty JSON body does.
	OptionalCommand(w http.ResponseWriter, r *http.Request, dst any) (key string, ok bool)
	// Wait is how long r may wait for an in-flight original (Prefer: wait).
	Wait(r *http.Request) time.Duration
	// Reply writes the engine's answer.
	Reply(w http.ResponseWriter, r *http.Request, reply idempotency.Reply)
	// Error answers err: the engine's errors, a validation failure, an
	// unavailable database, any registered operation's own (Problem), or
	// a 500.
	Error(w http.ResponseWriter, r *http.Request, err error)
	// JSON writes v with status.
	JSON(w http.ResponseWriter, status int, v any)
	// InvalidParameter answers 400 VALIDATION_FAILED for a query parameter.
	InvalidParameter(w http.ResponseWriter, name, message string)
}

// Checked is what a command's request body may implement so that a body
// with unknown members is answered with every problem at once: the
// unknown members, and what Check finds wrong with the known ones (a
// *validate.Error), in one VALIDATION_FAILED.
type Checked interface {
	Check() error
}

// Lookup returns the built operation called name as a T, the port its
// package exports. The caller's module must name it in Module.Uses.
func Lookup[T any](env Env, name string) (T, error) {
	var zero T
	in, ok := env.Built[name]
	if !ok {
		return zero, fmt.Errorf("operation %q is not among the modules this one uses: name it in Module.Uses", name)
	}
	port, ok := in.(T)
	if !ok {
		return zero, fmt.Errorf("operation %q does not export a %T", name, zero)
	}
	return port, nil
}

// Build builds mods on env and answers them in the list's order. Each is
// built after the modules it uses and sees those alone (Env.Built); then
// each hook is handed to the operation that offers it. So the list's order
// changes nothing of what is built. It refuses two modules of one name or of
// one resource type, a use or a hook of a module not in the list, and uses
// in a circle.
func Build(mods []Module, env Env) ([]Instance, error) {
	env.Modules = mods
	order, err := buildOrder(mods)
	if err != nil {
		return nil, err
	}
	built := make(map[string]Instance, len(mods))
	for _, m := range order {
		menv := env
		menv.Built = make(map[string]Instance, len(m.Uses))
		for _, u := range m.Uses {
			menv.Built[u] = built[u]
		}
		in, err := m.New(menv)
		if errors.Is(err, ErrUnsupported) {
			in, err = unsupported{module: m, reason: err}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("build %s: %w", m.Name, err)
		}
		if in.Name() != m.Name {
			return nil, fmt.Errorf("operation: module %q builds an operation called %q", m.Name, in.Name())
		}
		built[m.Name] = in
	}
	out := make([]Instance, 0, len(mods))
	for _, m := range mods {
		for _, h := range m.Hooks {
			if err := addHook(built, m.Name, h); err != nil {
				return nil, err
			}
		}
		out = append(out, built[m.Name])
	}
	return out, nil
}

// buildOrder is mods checked and ordered so that each comes after the
// modules it uses; otherwise as listed.
func buildOrder(mods []Module) ([]Module, error) {
	byName := make(map[string]Module, len(mods))
	types := map[string]bool{}
	for _, m := range mods {
		switch {
		case m.Name == "" || m.New == nil || m.Resource.Type == "" || m.Resource.IDField == "":
			return nil, fmt.Errorf("operation: module %q needs a Name, New, a Resource.Type and a Resource.IDField", m.Name)
		case byName[m.Name].Name != "":
			return nil, fmt.Errorf("operation: %q registered twice", m.Name)
		case types[m.Resource.Type]:
			return nil, fmt.Errorf("operation: resource type %q registered twice", m.Resource.Type)
		}
		byName[m.Name], types[m.Resource.Type] = m, true
	}
	const visiting, placed = 1, 2
	seen := map[string]int{}
	order := make([]Module, 0, len(mods))
	var place func(m Module) error
	place = func(m Module) error {
		switch seen[m.Name] {
		case placed:
			return nil
		case visiting:
			return fmt.Errorf("operation: %q uses itself, through the modules it uses", m.Name)
		}
		seen[m.Name] = visiting
		for _, u := range m.Uses {
			used, ok := byName[u]
			if !ok {
				return fmt.Errorf("operation: %q uses %q, which is not registered", m.Name, u)
			}
			if err := place(used); err != nil {
				return err
			}
		}
		seen[m.Name] = placed
		order = append(order, m)
		return nil
	}
	for _, m := range mods {
		if err := place(m); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// addHook hands hook h, declared by the module called by, to the operation
// that offers its point.
func addHook(built map[string]Instance, by string, h Hook) error {
	target, ok := built[h.Module].(Hooked)
	if !ok {
		return fmt.Errorf("operation: %q hooks into %q, which is not registered or offers no hooks", by, h.Module)
	}
	fn, err := h.Of(built[by])
	if err == nil {
		err = target.AddHook(h.Point, fn)
	}
	if err != nil {
		return fmt.Errorf("operation: %q's hook at %s %s: %w", by, h.Module, h.Point, err)
	}
	return nil
}

// ErrUnsupported is what a module's New wraps when the service's provider
// lacks a port the operation needs (provider capabilities are optional):
// the service starts, and the operation answers 501.
var ErrUnsupported = errors.New("the provider does not support this operation")

// Supported reports whether in is an operation the provider can serve: one
// that Build did not stand in for (ErrUnsupported). The reconciler takes
// only the keys of supported operations; the keys of the others wait for a
// provider that supports them.
func Supported(in Instance) bool {
	_, stub := in.(unsupported)
	return !stub
}

// unsupported stands in for a module whose New returned ErrUnsupported.
type unsupported struct {
	module Module
	reason error
}

func (u unsupported) Name() string { return u.module.Name }

func (u unsupported) Resume(context.Context, *idempotency.Owner) (idempotency.Result, error) {
	return nil, u.reason
}

func (u unsupported) Render(idempotency.Result) (idempotency.Response, error) {
	return idempotency.Response{}, u.reason
}

// Routes answers each of the module's declared routes with the 501.
func (u unsupported) Routes(r chi.Router, api HTTP) {
	for _, route := range u.module.Routes {
		method, pattern, _ := strings.Cut(route, " ")
		r.Method(method, pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			api.Error(w, r, u.reason)
		}))
	}
}

func (u unsupported) Problem(err error) *problem.Problem {
	if !errors.Is(err, ErrUnsupported) {
		return nil
	}
	return problem.Titled(http.StatusNotImplemented, problem.OperationNotSupportedByProvider,
		"Operation not supported by the provider", err.Error())
}
