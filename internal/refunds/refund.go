// Package refunds is the second idempotent operation, and the worked example
// of plugging an operation into the idempotency engine: POST
// /payments/{id}/refunds returns part or all of a succeeded payment, once,
// whatever the retries, crashes and concurrency.
//
// What it brings to the engine (internal/idempotency): its name
// (OperationCreate) and fingerprint (Command.Fingerprint), what it writes in
// the claim's transaction (create: the refund, its first transition, the
// RefundCreated event, after checking under a lock on the payment that it
// may be refunded by that much), and how an owner of a key resumes it
// (Resume: send, look up, settle, each write fenced through the Owner). Its
// state machine is its own table of moves (state.go), enforced by the
// database like every machine's. The reconciler needs nothing more.
package refunds

import (
	"strings"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// ResourceType names refunds in idempotency records and outbox events.
const ResourceType = "refund"

// State is where a refund stands.
type State string

// The states of a refund: the same kinds as a payment's.
const (
	StateReceived            State = "RECEIVED"
	StateProviderRequestSent State = "PROVIDER_REQUEST_SENT"
	StateSucceeded           State = "SUCCEEDED"
	StateDeclined            State = "DECLINED"
	StateFailedRetryable     State = "FAILED_RETRYABLE"
	StateUnknown             State = "UNKNOWN_REQUIRES_RECOVERY"
)

var machine = statemachine.New("refund",
	statemachine.Table{Name: "refunds", Transitions: "refund_transitions", ForeignKey: "refund_id"},
	StateReceived,
	map[State][]State{
		StateReceived:            {StateProviderRequestSent},
		StateProviderRequestSent: {StateSucceeded, StateDeclined, StateFailedRetryable, StateUnknown},
		StateUnknown:             {StateSucceeded, StateDeclined, StateProviderRequestSent},
		StateFailedRetryable:     {StateProviderRequestSent},
	})

// States lists every state.
func States() []State {
	return []State{StateReceived, StateProviderRequestSent, StateSucceeded, StateDeclined, StateFailedRetryable, StateUnknown}
}

// Machine returns the refund state machine.
func Machine() *statemachine.Machine[State] { return machine }

// Final reports whether no move leaves s.
func (s State) Final() bool { return machine.Final(s) }

// NeedsRecovery reports whether the refund may have reached the provider
// without its outcome being recorded.
func (s State) NeedsRecovery() bool { return s == StateProviderRequestSent || s == StateUnknown }

// Status is the state as clients see it: PROCESSING, SUCCEEDED, DECLINED or
// FAILED.
func (s State) Status() string {
	switch s {
	case StateSucceeded, StateDeclined:
		return string(s)
	case StateFailedRetryable:
		return "FAILED"
	default:
		return "PROCESSING"
	}
}

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
func (r Refund) Outcome() string { return strings.ToLower(r.State.Status()) }

// NewID returns a new refund's id, such as "re_5k3x...".
func NewID() string { return ids.New("re_") }

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
	Status            string    `json:"status"`
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
