package refunds

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// The event types a refund's life writes.
const (
	EventCreated   = "RefundCreated"
	EventSucceeded = "RefundSucceeded"
	EventDeclined  = "RefundDeclined"
)

// EntrySucceeded is the ledger's entry of a refund that succeeded.
const EntrySucceeded = "REFUND_SUCCEEDED"

// Module is the create-refund operation as the service registers it
// (internal/app). It acts through the payments' Port.
func Module() operation.Module {
	return operation.Module{
		Name: OperationCreate,
		Resource: operation.Resource{
			Type: ResourceType, IDField: "refundId", ProviderKey: ProviderKey, ProviderObject: provider.ObjectRefund,
		},
		Events: []operation.Event{
			{Type: EventCreated, Name: "refund.created", Hidden: []string{"accountId"}},
			{Type: EventSucceeded, Ledger: ledgerEntry, Name: "refund.succeeded", Hidden: []string{"accountId"}},
			{Type: EventDeclined, Name: "refund.declined", Hidden: []string{"accountId"}},
		},
		Uses: []string{payments.OperationCreate},
		New: func(env operation.Env) (operation.Instance, error) {
			pay, err := operation.Lookup[payments.Port](env, payments.OperationCreate)
			if err != nil {
				return nil, err
			}
			port, ok := env.Provider.(provider.Refunds)
			if !ok {
				return nil, fmt.Errorf("refunds: the provider %T does not refund (provider.Refunds)", env.Provider)
			}
			c := env.Config
			return NewService(Deps{
				DB: env.DB, Engine: env.Engine, Provider: port, Clock: env.Clock, Log: env.Log, Metrics: env.Metrics,
			}, pay, Config{
				ProviderTimeout: c.ProviderTimeout, ProviderKeyWindow: c.ProviderKeyWindow,
				ProviderLookupLag: c.ProviderLookupLag, RefusalRecheck: c.RefusalRecheck,
			}), nil
		},
	}
}

// ledgerEntry reads the entry a RefundSucceeded event books: its payload is
// the refund's view, plus its tenant and its payment's account.
func ledgerEntry(e outbox.Event) (operation.LedgerEntry, error) {
	var r struct {
		View
		TenantID  string `json:"tenantId"`
		AccountID string `json:"accountId"`
	}
	if err := json.Unmarshal(e.Payload, &r); err != nil {
		return operation.LedgerEntry{}, fmt.Errorf("payload is not a refund: %w", err)
	}
	switch {
	case r.RefundID != e.AggregateID:
		return operation.LedgerEntry{}, fmt.Errorf("payload id %q differs from the event's aggregateId %q", r.RefundID, e.AggregateID)
	case r.PaymentID == "":
		return operation.LedgerEntry{}, errors.New("no paymentId")
	case r.Status != StatusSucceeded:
		return operation.LedgerEntry{}, fmt.Errorf("status %q in a %s event", r.Status, e.Type)
	case r.AccountID == "":
		return operation.LedgerEntry{}, errors.New("no accountId")
	}
	currency, err := money.NormalizeCurrency(r.Currency)
	if err != nil {
		return operation.LedgerEntry{}, err
	}
	minor, err := money.Parse(r.Amount, currency)
	if err != nil {
		return operation.LedgerEntry{}, err
	}
	return operation.LedgerEntry{Type: EntrySucceeded, PaymentID: r.PaymentID, Line: r.RefundID, TenantID: r.TenantID,
		AccountID: r.AccountID, AmountMinor: minor, Currency: currency, ProviderReference: r.ProviderReference}, nil
}
