// Package webhooks receives Stripe's webhooks (POST /webhooks/stripe) and
// turns the ones about our resources into a prompt to resolve them now, the
// way the reconciler would. Which events name which resource is said by
// the Stripe adapter for the kind of object that stands for each registered
// operation's resource (stripeprovider.WebhookEvents,
// operation.Resource.ProviderObject), and by an operation with a provider
// port of its own (operation.Module.ProviderEvents).
//
// What it trusts, and what it does not:
//   - The Stripe-Signature header is verified with stripe-go's webhook
//     package against STRIPE_WEBHOOK_SECRET, with a 5 minute tolerance on
//     its timestamp either way (measured on the service's clock): stripe-go
//     refuses one older than that, and construct one newer, which it would
//     take and which a captured request could be replayed with long after.
//     A bad or missing signature, or a stale one, is answered 400 and
//     nothing is written.
//   - A verified event is still not taken as the truth about money: it only
//     names a resource (from the object's metadata, which our Stripe
//     adapter writes: the resource's id under the key its operation names,
//     else its idempotency key) and says "look now". The resource is resolved by
//     idempotency.Reconciler.ResolveNow: the same takeover with a new
//     fencing token and the same Resume as the reconciler, by an owner that
//     only asks the provider and never sends. So the event's own status,
//     amount or ids are never booked, and no event can create a charge or a
//     refund.
//   - Each event id is handled once: it is recorded in the inbox (consumer
//     Consumer). A repeated delivery answers 200 and changes nothing.
//
// Events acted on: those the registered operations declare (for payments,
// payment_intent.succeeded, payment_intent.payment_failed and
// payment_intent.canceled; for refunds, refund.created, refund.updated and
// charge.refund.updated). Every other type is answered 200 and recorded as
// ignored.
package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	stripe "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/inbox"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/provider/stripeprovider"
	"github.com/paymentsapi/paymentsapi/internal/providerflow"
)

// Consumer is the inbox's consumer name of Stripe's events.
const Consumer = "stripe-webhooks"

// Tolerance is how old a signature may be (stripe-go's default, 5 minutes).
const Tolerance = webhook.DefaultTolerance

// MaxBodyBytes bounds an event's body.
const MaxBodyBytes = 512 << 10

// Outcomes of an event, as recorded in the inbox (outcome) and answered.
const (
	// OutcomeApplied: the event named a resource of ours that was
	// unfinished, and it was resolved as the reconciler would (Resolution
	// says what that came to).
	OutcomeApplied = "applied"
	// OutcomeIgnored: a type we do not act on, a resource we do not know,
	// or one that needs nothing from us (final, held by a live owner, or
	// left for a person).
	OutcomeIgnored = "ignored"
	// OutcomeRejected: a verified event of a type we act on whose object
	// cannot be read; recorded with the reason, for a person.
	OutcomeRejected = "rejected"
	// OutcomeDuplicate: the inbox already held the event (answer only).
	OutcomeDuplicate = "duplicate"
)

// ResolutionUnknownResource is the Resolution of an event that names a
// resource this service does not have (any more).
const ResolutionUnknownResource = "unknown_resource"

// Deps are the handler's collaborators.
type Deps struct {
	DB         *pgxpool.Pool
	Reconciler *idempotency.Reconciler
	// Modules are the registered operations: their ProviderEvents say
	// which events name which resource.
	Modules []operation.Module
	Clock   clock.Clock
	Log     *slog.Logger
	// Metrics counts the events by outcome
	// (paymentsapi_stripe_webhook_events_total); nil: not counted.
	Metrics *metrics.Metrics
}

// count counts one event of outcome.
func (d Deps) count(outcome string) {
	if d.Metrics != nil {
		d.Metrics.StripeWebhooks.WithLabelValues(outcome).Inc()
	}
}

// Answer is the body of a 200: what became of the event.
type Answer struct {
	EventID string `json:"eventId"`
	Outcome string `json:"outcome"`
	// Resolution is idempotency.Reconciler.ResolveNow's outcome when the
	// event named one of our resources (succeeded, declined, unresolved,
	// final, in_flight, ...).
	Resolution string `json:"resolution,omitempty"`
}

// Stripe returns the handler of POST /webhooks/stripe, verifying signatures
// with secret (STRIPE_WEBHOOK_SECRET).
func Stripe(d Deps, secret string) http.Handler {
	kinds := kindsOf(d.Modules)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payload, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				problem.New(http.StatusRequestEntityTooLarge, problem.PayloadTooLarge,
					fmt.Sprintf("The body must be at most %d bytes.", MaxBodyBytes)).Write(w)
				return
			}
			problem.New(http.StatusBadRequest, problem.MalformedJSON, "The body could not be read.").Write(w)
			return
		}
		event, err := construct(payload, r.Header.Get("Stripe-Signature"), secret, d.Clock.Now())
		if err != nil {
			d.Log.WarnContext(r.Context(), "stripe webhook refused", "error", err)
			if errors.Is(err, errMalformed) {
				d.count("malformed")
				problem.New(http.StatusBadRequest, problem.MalformedJSON, "The event is not a Stripe event object with an id and a type.").Write(w)
				return
			}
			d.count("signature_invalid")
			problem.New(http.StatusBadRequest, problem.WebhookSignatureInvalid,
				"The Stripe-Signature header is missing, invalid, or older than the tolerance.").Write(w)
			return
		}
		answer, err := handle(r.Context(), d, kinds, event)
		if err != nil {
			// Nothing recorded: Stripe delivers the event again later, and
			// the resource is looked at again (the reconciler does too).
			d.Log.WarnContext(r.Context(), "stripe webhook not handled; Stripe will deliver it again",
				"event_id", event.ID, "event_type", event.Type, "error", err)
			d.count("error")
			problem.New(http.StatusInternalServerError, problem.Internal, "An unexpected error occurred.").Write(w)
			return
		}
		d.count(answer.Outcome)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(answer)
	})
}

var errMalformed = errors.New("malformed event")

// errFromTheFuture: a signature's timestamp is more than Tolerance ahead of
// the service's clock.
var errFromTheFuture = errors.New("the signature's timestamp is more than the tolerance ahead of the service's clock")

// construct verifies payload's signature and reads the event. stripe-go
// refuses a signature when time.Since(its timestamp) > tolerance; the
// tolerance it is given is shifted by how far now (the service's clock)
// is behind the wall clock, so that the age is measured on the service's
// clock: a test's fake one, or the wall clock itself (a shift of ~0).
func construct(payload []byte, header, secret string, now time.Time) (stripe.Event, error) {
	tolerance := Tolerance + time.Since(now)
	if err := webhook.ValidatePayloadWithTolerance(payload, header, secret, tolerance); err != nil {
		return stripe.Event{}, err
	}
	// Verified, so the header's timestamp is the one signed.
	if at, ok := signedAt(header); !ok || at.After(now.Add(Tolerance)) {
		return stripe.Event{}, errFromTheFuture
	}
	// Read as any API version: only stable fields are used (id, type, the
	// object's id, object and metadata).
	var e stripe.Event
	if err := json.Unmarshal(payload, &e); err != nil || e.ID == "" || e.Type == "" {
		return stripe.Event{}, fmt.Errorf("%w: %v", errMalformed, err) //nolint:errorlint
	}
	return e, nil
}

// signedAt is the timestamp of a Stripe-Signature header ("t=<unix
// seconds>,v1=...").
func signedAt(header string) (time.Time, bool) {
	for part := range strings.SplitSeq(header, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "t="); ok {
			secs, err := strconv.ParseInt(v, 10, 64)
			return time.Unix(secs, 0), err == nil
		}
	}
	return time.Time{}, false
}

// handle acts on a verified event once. An error means nothing was
// recorded, so that the event is delivered again.
func handle(ctx context.Context, d Deps, kinds map[stripe.EventType][]kind, e stripe.Event) (Answer, error) {
	answer := Answer{EventID: e.ID, Outcome: OutcomeIgnored}
	log := d.Log.With("event_id", e.ID, "event_type", e.Type)
	resources, objectID, err := target(kinds, e)
	var reason string
	switch {
	case err != nil:
		answer.Outcome, reason = OutcomeRejected, err.Error()
	case len(resources) > 0:
		seen, err := inbox.Has(ctx, d.DB, Consumer, InboxID(e.ID))
		if err != nil {
			return Answer{}, err
		}
		if seen {
			answer.Outcome = OutcomeDuplicate
			return answer, nil
		}
		objectID = resources[0].ID
		// Every resource the event may name is resolved (a payment's
		// charge names the payment's key and, once its customer was asked
		// to authenticate, the authentication's): one that is final or
		// unknown says nothing of the others.
		// The answer tells of the resource the event did most for, as
		// telling ranks them; acting on one ends the loop.
		for i, res := range resources {
			outcome, resolution, err := resolve(ctx, d, res)
			if err != nil {
				return Answer{}, err
			}
			if i == 0 || telling(outcome, resolution) > telling(answer.Outcome, answer.Resolution) {
				answer.Outcome, answer.Resolution = outcome, resolution
			}
			if outcome == OutcomeApplied {
				break
			}
		}
	}
	// aggregate_id: our resource when the event names one, else the
	// event's object.
	recorded, err := inbox.Record(ctx, d.DB, inbox.Entry{
		Consumer: Consumer, EventID: InboxID(e.ID), EventType: string(e.Type), AggregateID: objectID,
		Outcome: answer.Outcome, Error: reason, ReceivedAt: d.Clock.Now(),
	})
	if err != nil {
		return Answer{}, err
	}
	if !recorded {
		answer.Outcome = OutcomeDuplicate
	}
	switch answer.Outcome {
	case OutcomeRejected:
		log.ErrorContext(ctx, "stripe webhook rejected: its object cannot be read; recorded in the inbox", "reason", reason)
	default:
		log.InfoContext(ctx, "stripe webhook handled", "object", objectID, "outcome", answer.Outcome, "resolution", answer.Resolution)
	}
	return answer, nil
}

// resolve resolves res now (idempotency.Reconciler.ResolveNow) and says
// what came of it: the event's outcome and the resolution.
func resolve(ctx context.Context, d Deps, res idempotency.Resource) (outcome, resolution string, _ error) {
	// Resolved before the event is recorded: if this fails, the event is
	// delivered again and resolves again, which is harmless (a resolved
	// key is final; a held one is left to its owner).
	resolution, err := d.Reconciler.ResolveNow(ctx, res)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		return OutcomeIgnored, ResolutionUnknownResource, nil
	case errors.Is(err, providerflow.ErrUnavailable):
		// The provider refused to say, or holds nothing for a resource
		// it had refused: it stays as it was, for its client's retry
		// and the reconciler. The prompt was acted on.
		return OutcomeApplied, resolution, nil
	case err != nil:
		return "", "", fmt.Errorf("resolve %s %s: %w", res.Type, res.ID, err)
	case resolution != idempotency.OutcomeFinal && resolution != idempotency.OutcomeInFlight &&
		resolution != idempotency.OutcomeManualReview:
		return OutcomeApplied, resolution, nil
	}
	return OutcomeIgnored, resolution, nil
}

// telling ranks what resolving one resource came to, for the answer of an
// event that names several: acted on, then a resource still in flight or
// in review, then one already final, then one we do not hold.
func telling(outcome, resolution string) int {
	switch {
	case outcome == OutcomeApplied:
		return 3
	case resolution == ResolutionUnknownResource:
		return 0
	case resolution == idempotency.OutcomeFinal:
		return 1
	}
	return 2
}

// object is what is read of an event's object: stable fields only.
type object struct {
	ID       string            `json:"id"`
	Object   string            `json:"object"`
	Metadata map[string]string `json:"metadata"`
}

// kind is how an event type acted on names our resource.
type kind struct {
	event    operation.ProviderEvent
	resource operation.Resource
}

// kindsOf are the event types acted on, from the registered operations:
// Stripe's events about the kind of object that stands for each one's
// resource, and those a module declares for a port of its own. One type
// may name the resources of several operations (a charge stands for a
// payment and for its authentication), in the modules' order.
func kindsOf(mods []operation.Module) map[stripe.EventType][]kind {
	kinds := map[stripe.EventType][]kind{}
	for _, m := range mods {
		events := append(stripeprovider.WebhookEvents(m.Resource.ProviderObject), m.ProviderEvents...)
		for _, e := range events {
			kinds[stripe.EventType(e.Type)] = append(kinds[stripe.EventType(e.Type)], kind{event: e, resource: m.Resource})
		}
	}
	return kinds
}

// target returns the resources of ours that e names (none: none, or a
// type we do not act on) and the id of e's object. An error says the
// object of a type we act on cannot be read.
func target(kinds map[stripe.EventType][]kind, e stripe.Event) ([]idempotency.Resource, string, error) {
	var obj object
	readErr := errors.New("the event has no data.object")
	if e.Data != nil {
		readErr = json.Unmarshal(e.Data.Raw, &obj)
	}
	ks, ok := kinds[e.Type]
	switch {
	case !ok:
		return nil, obj.ID, nil
	case readErr != nil:
		return nil, obj.ID, fmt.Errorf("data.object: %w", readErr)
	}
	var resources []idempotency.Resource
	for _, k := range ks {
		if obj.Object != k.event.Object || obj.ID == "" {
			return nil, obj.ID, fmt.Errorf("data.object is a %q with id %q, want a %s", obj.Object, obj.ID, k.event.Object)
		}
		id := obj.Metadata[k.event.MetadataID]
		if id == "" {
			id = k.resource.IDFromProviderKey(obj.Metadata[stripeprovider.MetadataIdempotencyKey])
		}
		if id != "" { // else not created by this service
			resources = append(resources, idempotency.Resource{Type: k.resource.Type, ID: id})
		}
	}
	return resources, obj.ID, nil
}

// InboxID is the inbox's event_id (a UUID) of Stripe event eventID: the
// name-based UUID (version 5, RFC 9562) of the event's URL,
// https://api.stripe.com/v1/events/<eventID>, in the URL namespace. Every
// delivery of one event has the same InboxID; two events never share one.
func InboxID(eventID string) string {
	namespaceURL := [16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	return ids.NameBasedUUID(namespaceURL, "https://api.stripe.com/v1/events/"+eventID)
}
