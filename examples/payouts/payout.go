// Package payouts is the example operation: POST /payouts sends part of a
// merchant account's balance to a bank account, through a provider port of
// its own (Port), once, whatever the retries, crashes and concurrency. It is
// built as internal/refunds is, in the same files, so that it can be copied
// into a new operation (README.md, `make new-operation NAME=...`):
//   - module.go: the one value the service registers (Module): its name,
//     resource, events (PayoutSucceeded is booked by the ledger), its routes
//     and the provider's webhook events that name a payout;
//   - command.go: the request, its validation, and the fingerprint that
//     defines "the same payout";
//   - state.go: its state machine, a table of moves the database enforces
//     (migrations/00051_payouts.sql);
//   - port.go: the provider port a payout is sent through;
//   - service.go: Create (the claim's batch: the payout, created already
//     sent, and PayoutCreated) and Resume (send, look up, settle, through
//     providerflow, each write fenced through the Owner);
//   - http.go: its routes, answers and problems;
//   - store.go: its statements.
package payouts

import (
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/money"
)

// ResourceType names payouts in idempotency records and outbox events.
const ResourceType = "payout"

// IDField is the name of a payout's id in answers, problems and events.
const IDField = "payoutId"

// Payout is a payout as stored.
type Payout struct {
	ID                string
	TenantID          string
	AccountID         string
	AmountMinor       int64
	Currency          string
	Destination       string
	State             State
	ProviderReference string
	DeclineCode       string
	CreatedAt         time.Time
	UpdatedAt         time.Time
	// FirstSentAt and LastSentAt are the payout's provider history
	// (providerflow.Columns).
	FirstSentAt, LastSentAt *time.Time
}

var _ idempotency.Result = Payout{}

// Outcome names the payout's status for metrics: succeeded, declined,
// failed or processing.
func (p Payout) Outcome() string { return p.State.Status().Outcome() }

const idPrefix = "po_"

// NewID returns a new payout id at random: for tests that write rows with
// plain SQL. The service derives its payouts' ids (DeriveID).
func NewID() string { return ids.New(idPrefix) }

// DeriveID is the id of the payout that cmd creates under the tenant's key:
// the same for the same tenant, key and command (idempotency.ResourceID).
// So a retry after a failover that lost the payout recreates it under its
// id, and the provider, asked with the same ProviderKey, answers the
// original payout instead of paying out twice.
func DeriveID(tenant, key string, cmd Command) string {
	return deriveID(tenant, key, cmd.Fingerprint())
}

// deriveID is DeriveID of the command whose fingerprint is fp.
func deriveID(tenant, key string, fp []byte) string {
	return idempotency.ResourceID(idPrefix, idempotency.Scope{Tenant: tenant, Operation: OperationCreate, Key: key}, fp)
}

// ProviderKey is the idempotency key sent to the provider for payout id:
// derived from the payout, never from the client's key.
func ProviderKey(payoutID string) string { return "paymentsapi-payout:" + payoutID }

// View is the representation of a payout that clients and events see.
type View struct {
	PayoutID          string    `json:"payoutId"`
	AccountID         string    `json:"accountId"`
	Amount            string    `json:"amount"`
	Currency          string    `json:"currency"`
	Destination       string    `json:"destination"`
	Status            Status    `json:"status"`
	CreatedAt         time.Time `json:"createdAt"`
	UpdatedAt         time.Time `json:"updatedAt"`
	ProviderReference string    `json:"providerReference,omitempty"`
}

// View returns the representation of p.
func (p Payout) View() View {
	return View{
		PayoutID: p.ID, AccountID: p.AccountID, Amount: money.Format(p.AmountMinor, p.Currency), Currency: p.Currency,
		Destination: p.Destination, Status: p.State.Status(), CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
		ProviderReference: p.ProviderReference,
	}
}

// eventPayload adds what consumers (the ledger, the event log) need and
// clients never see.
func (p Payout) eventPayload() any {
	return struct {
		View
		TenantID string `json:"tenantId"`
	}{p.View(), p.TenantID}
}
