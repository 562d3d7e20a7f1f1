// Package actor carries who is acting, and under which request, through a
// context: the one place every writer of an audit record (a state
// machine's transition, an audit event) reads them from. Whoever starts
// work sets them once: the API's authentication for a request
// (api:<key id>), the reconciler for each key it resolves, the Stripe
// webhook handler, an operator's command or endpoint (operator:<name>).
package actor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// The actors that are not a key or a person.
const (
	// Reconciler is the reconciler resolving an unfinished key on its own
	// schedule (its own pass, in every server and in `paymentsapi
	// reconcile`).
	Reconciler = "reconciler"
	// Scheduler is work the service scheduled for itself and the
	// reconciler runs when it falls due: the void of an authorization that
	// expired (a service key, idempotency.ServiceKey).
	Scheduler = "scheduler"
	// ProviderWebhook is a move prompted by the provider's webhook (POST
	// /webhooks/stripe).
	ProviderWebhook = "provider-webhook"
	// System is the service acting on its configuration, with no request
	// or person behind it: the API_KEYS bootstrap at start-up.
	System = "system"
)

// API is the actor of a request authenticated by the API key keyID.
func API(keyID string) string { return "api:" + keyID }

// Operator is the actor of an operator called name (OPERATOR_KEYS, or the
// person running a `paymentsapi` command).
func Operator(name string) string { return "operator:" + name }

// Stamp is who acted and under which request: what an audit record names.
type Stamp struct {
	Actor     string
	RequestID string
}

type stampKey struct{}

// From returns the stamp ctx carries; its fields are "" where nothing set
// them.
func From(ctx context.Context) Stamp {
	s, _ := ctx.Value(stampKey{}).(Stamp)
	return s
}

// WithRequestID returns ctx under request id, its actor kept.
func WithRequestID(ctx context.Context, id string) context.Context {
	s := From(ctx)
	s.RequestID = id
	return context.WithValue(ctx, stampKey{}, s)
}

// WithActor returns ctx acting as a, its request id kept.
func WithActor(ctx context.Context, a string) context.Context {
	s := From(ctx)
	s.Actor = a
	return context.WithValue(ctx, stampKey{}, s)
}

// Ensure returns ctx as it is if it names an actor already (an operator
// who asked for the work), else acting as a under a new request id of its
// own: background work that starts a unit of its own (the reconciler's
// key).
func Ensure(ctx context.Context, a string) context.Context {
	if From(ctx).Actor != "" {
		return ctx
	}
	return context.WithValue(ctx, stampKey{}, Stamp{Actor: a, RequestID: NewRequestID()})
}

// NewRequestID returns a fresh request id, as the API gives a request
// that brings none.
func NewRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}
