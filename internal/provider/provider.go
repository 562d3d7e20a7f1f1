// Package provider declares what the payments service needs from a payment
// provider, and the errors that tell a caller whether money may have moved.
//
// The distinction between the errors is the whole point of this package:
//
//   - ErrUnavailable: the provider refused before processing (it answered 503,
//     or the connection was refused). No money moved; sending the same request
//     again with the same key is safe.
//   - ErrUnknownOutcome: the request may have been processed but the answer was
//     lost (timeout, reset connection, malformed answer). The caller must not
//     treat this as a failure; it must find out, by Lookup with the same key.
//   - ErrNotFound (Lookup only): the provider holds nothing for the key. That
//     is certain of every request that reached it at least LookupLag before
//     the lookup (see "Lookup lag" below).
//   - ErrAmbiguous: the provider's answer cannot be read as one outcome. A
//     lookup found more than one object for the key (money may have moved
//     twice), or an answer holds an amount that is no whole number of the
//     currency's minor units (see package units). Only a person can sort it
//     out.
//
// An adapter may also tell, before anything is stored or sent, that its
// provider would refuse a request as it stands (Checker): an amount its
// currency rules refuse, a payment method it does not have. Such a refusal
// is a *Refusal, and neither sentinel: nothing moved, and the same request
// would be refused again.
//
// Refunds follow the same rules as charges: a key derived from the refund,
// the same errors, and LookupRefund to resolve an unknown outcome.
//
// # Lookup lag
//
// A provider may show a new object to a lookup by key only some time after
// creating it (Stripe's Search API trails by about a minute, more during an
// incident). LookupLag declares that time for a Provider: how long after a
// create a lookup by key may still miss it. A not-found is certain only once
// this much time has passed since the last request that may have reached the
// provider; before that, an ErrNotFound may yet be contradicted by a charge
// or refund that an earlier request made. The lag is the provider's
// visibility delay alone: the caller measures it on its own clock, so clock
// skew between caller and provider plays no part in it. A provider whose
// lookups read what was written (read-after-write) declares zero.
//
// Lookup also takes a lower bound on the creation time of the charge
// (ChargeLookup.NotBefore), for providers that can only find a charge by
// listing the charges created in a window.
package provider

import (
	"context"
	"errors"
	"time"
)

// Errors returned by a Provider. Implementations wrap them with detail;
// callers test them with errors.Is.
var (
	ErrUnavailable    = errors.New("provider unavailable: request not processed")
	ErrUnknownOutcome = errors.New("provider outcome unknown")
	ErrNotFound       = errors.New("provider has no charge for this key")
	ErrAmbiguous      = errors.New("provider answer is ambiguous: only a person can tell what moved")
)

// Refusal is a request the provider would refuse as it stands, found by its
// adapter before anything was sent (Checker.Check, or a create that checks
// the same before it sends): no money moved, and the same request would be
// refused again. Detail says, for a person, what the provider would take.
type Refusal struct {
	Reason RefusalReason
	Detail string
}

// RefusalReason is what a Refusal refuses.
type RefusalReason string

// The reasons of a Refusal.
const (
	// RefusedAmount: an amount the provider's currency rules refuse
	// (package units).
	RefusedAmount RefusalReason = "amount"
	// RefusedPaymentMethod: a payment method the provider does not have
	// (the simulator's test payment methods).
	RefusedPaymentMethod RefusalReason = "payment_method"
)

func (r *Refusal) Error() string { return "the provider would refuse the request: " + r.Detail }

// Proposal is what a request would ask of the provider, as far as its
// adapter can check it before anything is stored: an amount in the
// service's unit (ISO 4217 minor units) and, for a charge, its payment
// method ("" for a capture or a refund: their charge was checked when it
// was made).
type Proposal struct {
	AmountMinor   int64
	Currency      string
	PaymentMethod string
}

// Checker is what an adapter implements when it can tell that its provider
// would refuse a request before the request is sent. The operations ask it
// before they claim a key (Check), so that such a request stores nothing:
// no resource, no key, no event.
type Checker interface {
	// Check returns nil when the provider would take p, else a *Refusal.
	Check(p Proposal) error
}

// Check returns a's refusal of p (a *Refusal), or nil when a would take
// it or checks nothing (it is no Checker).
func Check(a Adapter, p Proposal) error {
	c, ok := a.(Checker)
	if !ok {
		return nil
	}
	return c.Check(p)
}

// Status is the provider's verdict on a charge.
type Status string

// The statuses a charge can have.
const (
	StatusSucceeded Status = "succeeded"
	StatusDeclined  Status = "declined"
	// StatusPending: the provider accepted the request but has not decided
	// yet (a refund Stripe still processes). Not final: look it up later.
	StatusPending Status = "pending"
	// StatusAuthorized: a charge made with CaptureManual is authorized and
	// waits for its capture (Stripe's requires_capture). Final for the
	// charge request; Captures.Capture or Captures.Void moves it on.
	StatusAuthorized Status = "requires_capture"
	// StatusCanceled: an authorized charge was voided (Captures.Void, or
	// the provider's own expiry of the authorization): no money moved.
	StatusCanceled Status = "canceled"
	// StatusRequiresAction: the charge waits for the customer to
	// authenticate (3-D Secure): Charge.NextActionURL is where the customer
	// goes. Final for the charge request; the charge later succeeds (or is
	// authorized), is declined (authentication failed), or is canceled (a
	// Captures.Void of it, when the customer never came back).
	StatusRequiresAction Status = "requires_action"
)

// ChargeRequest asks the provider to move money once. IdempotencyKey is
// derived from the payment, never taken from the client, and is the same on
// every attempt for that payment.
type ChargeRequest struct {
	IdempotencyKey string
	AmountMinor    int64  // amount in the currency's minor unit
	Currency       string // ISO 4217, upper case
	PaymentMethod  string
	Description    string
	PaymentID      string // our payment id, for the provider's metadata
	// CaptureManual asks for an authorization only: a charge that would
	// succeed answers StatusAuthorized and moves money only once captured
	// (Captures). False: the charge is captured at once.
	CaptureManual bool
	// ReturnURL is where the provider sends the customer back after an
	// authentication the charge requires (StatusRequiresAction): the
	// service's own return route, never the merchant's URL. Empty: no
	// return page.
	ReturnURL string
}

// Charge is the provider's record of a charge.
type Charge struct {
	ID             string
	IdempotencyKey string
	Status         Status
	DeclineCode    string // set when Status is StatusDeclined
	AmountMinor    int64
	Currency       string
	// AmountCapturedMinor is how much of AmountMinor was captured: all of
	// it for a charge captured at once, the captured part after a partial
	// capture, 0 while authorized or once voided.
	AmountCapturedMinor int64
	// CreatedAt is when the provider created the charge: set by listings
	// (Listing), zero in other answers.
	CreatedAt time.Time
	// NextActionURL is where the customer authenticates, while Status is
	// StatusRequiresAction.
	NextActionURL string
}

// CaptureRequest asks the provider to capture an authorized charge once.
// IdempotencyKey is derived from our capture (never the client's key) and
// is the same on every attempt for it.
type CaptureRequest struct {
	IdempotencyKey string
	ChargeID       string // the provider's id of the authorized charge (Charge.ID)
	AmountMinor    int64  // at most the authorized amount; the rest is released
	Currency       string // the charge's currency
	PaymentID      string // our payment id, for the provider's metadata
}

// VoidRequest asks the provider to cancel an authorized charge (release the
// authorization, move no money). IdempotencyKey is derived from our
// cancellation.
type VoidRequest struct {
	IdempotencyKey string
	ChargeID       string // the provider's id of the authorized charge
	Reason         string // "", requested_by_customer, duplicate, fraudulent or abandoned
	PaymentID      string
}

// ActionLookup names a capture to look up: its key, and the charge it acts
// on.
type ActionLookup struct {
	IdempotencyKey string
	ChargeID       string
}

// RefundRequest asks the provider to return money of a charge once.
// IdempotencyKey is derived from the refund (never from the client's key)
// and is the same on every attempt for that refund.
type RefundRequest struct {
	IdempotencyKey string
	ChargeID       string // the provider's id of the charge (Charge.ID)
	AmountMinor    int64  // in the charge's currency's minor unit
	Currency       string // ISO 4217, upper case; the charge's currency
	Reason         string // "", requested_by_customer, duplicate or fraudulent
	RefundID       string // our refund id, for the provider's metadata
}

// ChargeLookup names a charge to look up: its key, and a time the provider
// cannot have created it before (some providers find a charge by listing
// those created since a time). NotBefore must be early enough for any clock
// skew between the caller's clock and the provider's: a charge the provider
// dates before NotBefore may be missed, and reported as not found.
type ChargeLookup struct {
	IdempotencyKey string
	NotBefore      time.Time
}

// RefundLookup names a refund to look up: its key, and the charge it
// belongs to (some providers list refunds per charge only).
type RefundLookup struct {
	IdempotencyKey string
	ChargeID       string
}

// Refund is the provider's record of a refund.
type Refund struct {
	ID             string
	IdempotencyKey string
	ChargeID       string
	Status         Status // succeeded, declined, or pending (not final)
	DeclineCode    string // set when Status is StatusDeclined
	AmountMinor    int64
	Currency       string
	// CreatedAt is when the provider created the refund: set by listings
	// (Listing), zero in other answers.
	CreatedAt time.Time
}

// Adapter is what every provider adapter declares, whatever ports it
// implements.
type Adapter interface {
	// LookupLag is how long after a create a lookup by key (Lookup or
	// LookupRefund) may still miss it: a not-found is certain only once this
	// much time has passed since the last request that may have reached the
	// provider. Zero means lookups are read-after-write.
	LookupLag() time.Duration
}

// Charges is the port of the operations that charge (payments): create a
// charge by key, look it up by key.
type Charges interface {
	Adapter
	// Charge creates a charge, or returns the existing one for the key.
	// A decline is a Charge with StatusDeclined and a nil error.
	Charge(ctx context.Context, req ChargeRequest) (Charge, error)
	// Lookup returns the charge created with l.IdempotencyKey as it now
	// stands (a manual charge: StatusAuthorized, then StatusSucceeded once
	// captured or StatusCanceled once voided), ErrNotFound
	// when the provider is certain there is none (see LookupLag), or another
	// error when it cannot say.
	Lookup(ctx context.Context, l ChargeLookup) (Charge, error)
}

// Refunds is the port of the operations that refund: create a refund of a
// charge by key, look it up by key.
type Refunds interface {
	Adapter
	// Refund creates a refund of a charge, or returns the existing one for
	// the key. A refused refund (the provider declined it, or the charge
	// cannot be refunded by that much) is a Refund with StatusDeclined and
	// a nil error.
	Refund(ctx context.Context, req RefundRequest) (Refund, error)
	// LookupRefund returns the refund created with the key, ErrNotFound
	// when the provider is certain there is none, or another error when it
	// cannot say.
	LookupRefund(ctx context.Context, l RefundLookup) (Refund, error)
}

// Captures is the port of the operations that act on an authorized charge
// (manual capture): capture it, void it, read it. Capture and Void are
// idempotent by their key; GetCharge reads the charge by the provider's id,
// read-after-write (a capture or a void shows at once).
type Captures interface {
	Adapter
	// Capture captures req.AmountMinor of the authorized charge and returns
	// the charge (its IdempotencyKey is the charge's creation key): Status
	// is the capture's verdict, StatusSucceeded with AmountCapturedMinor
	// once captured (also when the key's earlier request captured it), or
	// StatusDeclined with a DeclineCode and a nil error when the provider
	// refuses the capture (the charge then stays authorized, or was voided:
	// charge_canceled, or was captured by another key:
	// charge_already_captured). The provider's errors are those of
	// Charges.Charge (ErrUnavailable, ErrUnknownOutcome); an unknown charge
	// id is an error that wraps none of the sentinels.
	Capture(ctx context.Context, req CaptureRequest) (Charge, error)
	// Void cancels the authorization and returns the charge:
	// StatusCanceled (also for a charge already voided), or StatusDeclined
	// with a DeclineCode and a nil error when it cannot be voided (already
	// captured: charge_already_captured).
	Void(ctx context.Context, req VoidRequest) (Charge, error)
	// LookupCapture returns the charge as the capture made with
	// l.IdempotencyKey left it, its Status the capture's verdict (as
	// Capture answers it), or ErrNotFound when the provider holds no
	// capture of that key; another error when the provider cannot say. A
	// declined capture is found: the charge stays authorized after it as
	// after a capture that never arrived, and only the capture's own
	// record tells them apart. (A provider that keeps no record of a
	// refused capture, as Stripe, reports any charge not captured as not
	// found.)
	LookupCapture(ctx context.Context, l ActionLookup) (Charge, error)
	// GetCharge returns the charge with the provider's id chargeID as it now
	// stands (StatusAuthorized, StatusSucceeded, StatusCanceled, ...), or
	// ErrNotFound; another error when the provider cannot say.
	GetCharge(ctx context.Context, chargeID string) (Charge, error)
}

// Listing is the port of the audit of the provider (paymentsapi orphans,
// and its gauge): the charges and refunds it holds that were created since
// a time, whoever made them. It is how a charge that no local row explains
// is found, such as one whose payment a database failover lost (the last
// commits of an asynchronous standby). An adapter that implements it is
// asserted to (operation.Env.Provider).
type Listing interface {
	Adapter
	// ListCharges returns the charges created at or after since, each with
	// the idempotency key it was created with ("" when the provider cannot
	// tell) and CreatedAt, in no particular order; an error when it cannot
	// list them all.
	ListCharges(ctx context.Context, since time.Time) ([]Charge, error)
	// ListRefunds is ListCharges for refunds.
	ListRefunds(ctx context.Context, since time.Time) ([]Refund, error)
}

// Provider is every port: what each adapter of this service implements (the
// simulator's client, Stripe) and what the service is built with. Each
// operation asserts the one port it calls (operation.Env.Provider), so an
// operation that calls the provider in a new way adds a port here and its
// methods to the adapters, and changes none of the existing ports' code.
type Provider interface {
	Charges
	Refunds
	Captures
}

// Object is a kind of object the provider keeps for the service, named by
// the port that creates it. An operation says which kind stands for its
// resource (operation.Resource.ProviderObject); an adapter that sends
// webhooks says which of its events are about each kind.
type Object string

// The kinds of objects the ports create.
const (
	ObjectCharge Object = "charge" // Charges.Charge: a payment's
	ObjectRefund Object = "refund" // Refunds.Refund: a refund's
)

// WebhookEvent is one type of a provider's webhook events that is about an
// object it keeps for the service, and how that object names our resource.
type WebhookEvent struct {
	// Type is the provider's event type (payment_intent.succeeded).
	Type string
	// Object is the type of the event's object (payment_intent).
	Object string
	// MetadataID is the object's metadata key that holds our resource's id
	// (payment_id); an object without it is matched by its idempotency key
	// (operation.Resource.ProviderKey).
	MetadataID string
}

// Outcome names the outcome of one provider call for metrics: the status
// answered, or not_found, unavailable, ambiguous or unknown.
func Outcome(status Status, err error) string {
	switch {
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrAmbiguous):
		return "ambiguous"
	case err != nil:
		return "unknown"
	}
	return string(status)
}
