package payments

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// The event types a payment's life writes (their public names: the NATS
// subjects' last token).
const (
	EventCreated   = "PaymentCreated"
	EventSucceeded = "PaymentSucceeded"
	EventDeclined  = "PaymentDeclined"
	// EventAuthorized: a manual payment was authorized (REQUIRES_CAPTURE).
	EventAuthorized = "PaymentAuthorized"
	// EventCanceled: a payment ended CANCELED (abandoned, voided, expired).
	EventCanceled = "PaymentCanceled"
	// EventRequiresAction: the provider waits for the customer to
	// authenticate (REQUIRES_ACTION, with nextAction).
	EventRequiresAction = "PaymentRequiresAction"
)

// IDField is the member that holds a payment's id in its body and in its
// events' data (and in its refunds': they name their payment).
const IDField = "paymentId"

// EntrySucceeded is the ledger's entry of a payment that succeeded.
const EntrySucceeded = "PAYMENT_SUCCEEDED"

// Module is the create-payment operation as the service registers it
// (internal/app), with failpoints for tests (the zero Hooks do nothing).
func Module(hooks Hooks) operation.Module {
	return operation.Module{
		Name: OperationCreate,
		Resource: operation.Resource{
			Type: ResourceType, IDField: IDField, ProviderKey: ProviderKey, ProviderObject: provider.ObjectCharge,
		},
		Events: []operation.Event{
			{Type: EventCreated, Name: "payment.created"},
			{Type: EventSucceeded, Ledger: ledgerEntry, Name: "payment.succeeded"},
			{Type: EventDeclined, Name: "payment.declined"},
			{Type: EventAuthorized, Name: "payment.authorized"},
			{Type: EventCanceled, Name: "payment.canceled"},
			{Type: EventRequiresAction, Name: "payment.requires_action"},
		},
		New: func(env operation.Env) (operation.Instance, error) {
			port, ok := env.Provider.(provider.Charges)
			if !ok {
				return nil, fmt.Errorf("payments: the provider %T does not charge (provider.Charges)", env.Provider)
			}
			c := env.Config
			return NewService(Deps{
				DB: env.DB, Engine: env.Engine, Provider: port, Clock: env.Clock, Log: env.Log, Metrics: env.Metrics,
			}, Config{
				ProviderTimeout: c.ProviderTimeout, ProviderKeyWindow: c.ProviderKeyWindow,
				ProviderLookupLag: c.ProviderLookupLag, RefusalRecheck: c.RefusalRecheck,
				AbandonAfter: c.ReplayTTL, Hooks: hooks,
				PublicURL: c.PublicURL, AllowHTTPReturnURL: c.AllowHTTPReturnURL,
			}), nil
		},
	}
}

// ledgerEntry reads the entry a PaymentSucceeded event books: its payload
// is the payment's view, plus its tenant.
func ledgerEntry(e outbox.Event) (operation.LedgerEntry, error) {
	var p struct {
		View
		TenantID string `json:"tenantId"` // older events may lack it (booked NULL)
	}
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		return operation.LedgerEntry{}, fmt.Errorf("payload is not a payment: %w", err)
	}
	switch {
	case p.PaymentID != e.AggregateID:
		return operation.LedgerEntry{}, fmt.Errorf("payload id %q differs from the event's aggregateId %q", p.PaymentID, e.AggregateID)
	case p.PaymentID == "":
		return operation.LedgerEntry{}, errors.New("no paymentId")
	case p.Status != StatusSucceeded:
		return operation.LedgerEntry{}, fmt.Errorf("status %q in a %s event", p.Status, e.Type)
	case p.AccountID == "":
		return operation.LedgerEntry{}, errors.New("no accountId")
	}
	currency, err := money.NormalizeCurrency(p.Currency)
	if err != nil {
		return operation.LedgerEntry{}, err
	}
	// What moved is what was captured: all of the amount, or a manual
	// payment's capture (capturedAmount; events written before it existed
	// have none, and captured their whole amount).
	amount := p.Amount
	if p.CapturedAmount != "" {
		amount = p.CapturedAmount
	}
	minor, err := money.Parse(amount, currency)
	if err != nil {
		return operation.LedgerEntry{}, err
	}
	return operation.LedgerEntry{Type: EntrySucceeded, PaymentID: p.PaymentID, TenantID: p.TenantID, AccountID: p.AccountID,
		AmountMinor: minor, Currency: currency, ProviderReference: p.ProviderReference}, nil
}
