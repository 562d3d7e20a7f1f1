// Package refunds is the create-refund operation: POST
// /payments/{id}/refunds returns part or all of a succeeded payment, once,
// whatever the retries, crashes and concurrency. It is built as every
// operation is (internal/operation), in the same shape as payments:
//   - module.go: the one value the service registers (Module): its name,
//     resource, events (RefundSucceeded is booked by the ledger), the
//     provider's webhook events that name a refund;
//   - command.go: the command and its fingerprint;
//   - state.go: its state machine, a table of moves the database enforces;
//   - service.go: Create (the claim's batch: under the payment's lock,
//     taken through payments.Port, the refund if it fits, its first
//     transition and RefundCreated) and Resume (send, look up, settle,
//     through providerflow, each write fenced through the Owner);
//   - http.go: its routes, answers and problems;
//   - store.go: its statements.
package refunds

import (
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/money"
)

// ResourceType names refunds in idempotency records and outbox events.
const ResourceType = "refund"

// Refund is a refund as stored.
type Refund struct {
	ID                string
	TenantID          string
	PaymentID         string
	AccountID         string // the payment's, for events
	AmountMinor       int64
	Currency          string
	Reason            string
	State             State
	ProviderReference string
	DeclineCode       string
	CreatedAt         time.Time
	UpdatedAt         time.Time
	// FirstSentAt and LastSentAt are the refund's provider history
	// (providerflow.Columns).
	FirstSentAt, LastSentAt *time.Time
}

var _ idempotency.Result = Refund{}

// Outcome names the refund's status for metrics: succeeded, declined,
// failed or processing.
func (r Refund) Outcome() string { return r.State.Status().Outcome() }

// The outcomes of a refund, as Outcome names them.
const (
	OutcomeSucceeded  = "succeeded"
	OutcomeDeclined   = "declined"
	OutcomeProcessing = "processing"
	OutcomeFailed     = "failed"
)

// Outcome is s as metrics and logs name it.
func (s Status) Outcome() string {
	switch s {
	case StatusSucceeded:
		return OutcomeSucceeded
	case StatusDeclined:
		return OutcomeDeclined
	case StatusFailed:
		return OutcomeFailed
	default:
		return OutcomeProcessing
	}
}

// NewID returns a new refund's id, such as "re_5k3x...", at random: for
// tests and tools; the service derives its refunds' ids (DeriveID).
func NewID() string { return ids.New(idPrefix) }

const idPrefix = "re_"

// DeriveID is the id of the refund that cmd creates under the tenant's key:
// the same for the same tenant, key and command (idempotency.ResourceID),
// so that a retry after a failover that lost the refund recreates it under
// its id and the provider, asked with the same ProviderKey, answers the
// original refund.
func DeriveID(tenant, key string, cmd Command) string {
	return deriveID(tenant, key, cmd.Fingerprint())
}

// deriveID is DeriveID of the command whose fingerprint is fp.
func deriveID(tenant, key string, fp []byte) string {
	return idempotency.ResourceID(idPrefix, idempotency.Scope{Tenant: tenant, Operation: OperationCreate, Key: key}, fp)
}

// ProviderKey is the idempotency key sent to the provider for refund id:
// derived from the refund, never from the client's key.
func ProviderKey(refundID string) string { return "paymentsapi:" + refundID }

// View is the representation of a refund that clients and events see.
type View struct {
	RefundID          string    `json:"refundId"`
	PaymentID         string    `json:"paymentId"`
	Amount            string    `json:"amount"`
	Currency          string    `json:"currency"`
	Reason            string    `json:"reason,omitempty"`
	Status            Status    `json:"status"`
	CreatedAt         time.Time `json:"createdAt"`
	UpdatedAt         time.Time `json:"updatedAt"`
	ProviderReference string    `json:"providerReference,omitempty"`
}

// View returns the representation of r.
func (r Refund) View() View {
	return View{
		RefundID: r.ID, PaymentID: r.PaymentID, Amount: money.Format(r.AmountMinor, r.Currency),
		Currency: r.Currency, Reason: r.Reason, Status: r.State.Status(),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, ProviderReference: r.ProviderReference,
	}
}

// eventPayload adds what consumers (the ledger) need and clients never see.
func (r Refund) eventPayload() any {
	return struct {
		View
		TenantID  string `json:"tenantId"`
		AccountID string `json:"accountId"`
	}{r.View(), r.TenantID, r.AccountID}
}
