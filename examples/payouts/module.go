package payouts

import (
	_ "embed"
	"encoding/json"
	"fmt"

	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// The event types a payout's life writes.
const (
	EventCreated   = "PayoutCreated"
	EventSucceeded = "PayoutSucceeded"
	EventDeclined  = "PayoutDeclined"
)

// EntrySucceeded is the ledger's entry of a payout that succeeded.
const EntrySucceeded = "PAYOUT_SUCCEEDED"

// spec is the payouts' part of the OpenAPI document (Module.Spec).
//
//go:embed openapi.yaml
var spec []byte

// Module is the create-payout operation as the service registers it: the
// one line a fork adds to internal/app's Modules is payouts.Module().
func Module() operation.Module {
	return operation.Module{
		Name:     OperationCreate,
		Resource: operation.Resource{Type: ResourceType, IDField: IDField, ProviderKey: ProviderKey},
		Events: []operation.Event{
			{Type: EventCreated, Name: "payout.created"},
			{Type: EventSucceeded, Ledger: ledgerEntry, Name: "payout.succeeded"},
			{Type: EventDeclined, Name: "payout.declined"},
		},
		// The provider's webhook events about its payout objects (Stripe
		// names them so): they name our payout by MetadataID, or by its
		// ProviderKey.
		ProviderEvents: []operation.ProviderEvent{
			{Type: "payout.paid", Object: "payout", MetadataID: MetadataID},
			{Type: "payout.failed", Object: "payout", MetadataID: MetadataID},
		},
		Routes:       []string{"POST /payouts", "GET /payouts/{payoutId}"},
		ProblemCodes: []problem.Code{CodeDeclined},
		Spec:         spec,
		New: func(env operation.Env) (operation.Instance, error) {
			port, ok := env.Provider.(Port)
			if !ok {
				return nil, fmt.Errorf("payouts: the provider %T does not pay out (payouts.Port): %w", env.Provider, operation.ErrUnsupported)
			}
			c := env.Config
			return NewService(Deps{DB: env.DB, Engine: env.Engine, Provider: port, Clock: env.Clock, Log: env.Log, Metrics: env.Metrics},
				Config{
					ProviderTimeout: c.ProviderTimeout, ProviderKeyWindow: c.ProviderKeyWindow,
					ProviderLookupLag: max(c.ProviderLookupLag, port.LookupLag()), RefusalRecheck: c.RefusalRecheck,
				}), nil
		},
	}
}

// ledgerEntry reads the entry a PayoutSucceeded event books: its payload is
// the payout's view, plus its tenant.
func ledgerEntry(e outbox.Event) (operation.LedgerEntry, error) {
	var p struct {
		View
		TenantID string `json:"tenantId"`
	}
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		return operation.LedgerEntry{}, fmt.Errorf("payload is not a payout: %w", err)
	}
	if p.PayoutID != e.AggregateID || p.Status != StatusSucceeded || p.AccountID == "" {
		return operation.LedgerEntry{}, fmt.Errorf("not a payout that succeeded: %s", e.Payload)
	}
	currency, err := money.NormalizeCurrency(p.Currency)
	if err != nil {
		return operation.LedgerEntry{}, err
	}
	minor, err := money.Parse(p.Amount, currency)
	if err != nil {
		return operation.LedgerEntry{}, err
	}
	// The ledger keys its entries by payment_id: a payout's entry is keyed
	// by the payout.
	return operation.LedgerEntry{Type: EntrySucceeded, PaymentID: p.PayoutID, TenantID: p.TenantID, AccountID: p.AccountID,
		AmountMinor: minor, Currency: currency, ProviderReference: p.ProviderReference}, nil
}
