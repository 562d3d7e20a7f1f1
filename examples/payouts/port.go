package payouts

import (
	"context"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// Port is the provider port a payout is sent through. The service's
// provider adapter (env.Provider) implements it, or the operation answers
// 501 OPERATION_NOT_SUPPORTED_BY_PROVIDER (operation.ErrUnsupported). Its
// errors are the provider package's sentinels, which providerflow reads:
// provider.ErrUnavailable (refused before anything happened, retried),
// provider.ErrUnknownOutcome (the request may have been acted on: looked
// up), provider.ErrNotFound (a lookup certain there is none).
type Port interface {
	provider.Adapter
	// Payout creates a payout, or returns the existing one for the key. A
	// payout the bank refuses is a ProviderAnswer with provider.StatusDeclined
	// and a nil error.
	Payout(ctx context.Context, req ProviderRequest) (ProviderAnswer, error)
	// LookupPayout returns the payout created with key as it now stands.
	LookupPayout(ctx context.Context, key string) (ProviderAnswer, error)
}

// ProviderRequest is a payout as sent to the provider.
type ProviderRequest struct {
	IdempotencyKey string // ProviderKey of the payout
	PayoutID       string // our id, for the provider's metadata (webhooks)
	AmountMinor    int64
	Currency       string
	Destination    string // the bank account
}

// ProviderAnswer is what the provider says about one payout.
type ProviderAnswer struct {
	ID          string // the provider's reference
	Status      provider.Status
	DeclineCode string
	// AmountMinor is the amount the provider holds for the payout: the flow
	// refuses to settle a payout on an answer for another amount.
	AmountMinor int64
}

// MetadataID is the metadata key under which the provider's payout objects
// name our payout (as stripeprovider.MetadataPaymentID names a payment).
const MetadataID = "payout_id"
