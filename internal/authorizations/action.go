// Package authorizations holds the two operations on a payment made with
// captureMethod manual, which the provider only authorized
// (REQUIRES_CAPTURE): capture_payment (POST /payments/{id}/capture) takes
// the money, once; cancel_payment (POST /payments/{id}/cancel) voids the
// authorization. Each is built as every operation is (internal/operation)
// and registered as its own module (CaptureModule, CancelModule), on one
// shape:
//   - action.go: the resource both create, an action on the payment (a
//     capture or a void: the payment_actions table), its state machine and
//     its provider key;
//   - command.go: the two commands and their fingerprints;
//   - service.go: Create (the claim's batch: the payment's move out of
//     AUTHORIZED, taken through payments.Actions, which lets one action of
//     any number win, and the action's row) and Resume (send, look up,
//     settle, through providerflow; the payment moves on with the action's
//     end, through the same port);
//   - http.go: routes, answers and problems;
//   - module.go: the two modules;
//   - store.go: the statements on payment_actions.
package authorizations

import (
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// State is where an action stands: the same kinds of states as a refund's,
// and an end for one that moved no money and that nobody finished.
type State string

// The states of an action.
const (
	StateReceived            State = "RECEIVED"
	StateProviderRequestSent State = "PROVIDER_REQUEST_SENT"
	StateSucceeded           State = "SUCCEEDED"
	StateDeclined            State = "DECLINED"
	StateFailedRetryable     State = "FAILED_RETRYABLE"
	StateUnknown             State = "UNKNOWN_REQUIRES_RECOVERY"
	// StateCanceled: refused before processing (or never sent) and not
	// retried within the replay window; the payment is authorized again.
	StateCanceled State = "CANCELED"
)

var machine = statemachine.New("payment_action",
	statemachine.Table{Name: "payment_actions", Transitions: "payment_action_transitions", ForeignKey: "payment_action_id"},
	StateReceived,
	map[State][]State{
		// A cancel of a payment that moved no money ends without a call.
		StateReceived:            {StateProviderRequestSent, StateCanceled, StateSucceeded, StateDeclined},
		StateProviderRequestSent: {StateSucceeded, StateDeclined, StateFailedRetryable, StateUnknown},
		StateUnknown:             {StateSucceeded, StateDeclined, StateProviderRequestSent},
		// A refused capture past its authorization's expiry that the
		// provider surely never processed is declined without a call.
		StateFailedRetryable: {StateProviderRequestSent, StateCanceled, StateDeclined},
	})

// States lists every state.
func States() []State {
	return []State{StateReceived, StateProviderRequestSent, StateSucceeded, StateDeclined,
		StateFailedRetryable, StateUnknown, StateCanceled}
}

// Machine returns the actions' state machine.
func Machine() *statemachine.Machine[State] { return machine }

// Final reports whether no move leaves s.
func (s State) Final() bool { return machine.Final(s) }

// NeedsRecovery reports whether the action may have reached the provider
// without its outcome being recorded.
func (s State) NeedsRecovery() bool { return s == StateProviderRequestSent || s == StateUnknown }

// Action is a capture or a void of a payment's authorization, as stored.
type Action struct {
	ID                string
	TenantID          string
	PaymentID         string
	Kind              payments.Action
	AmountMinor       int64 // a capture's amount; 0 for a void
	Currency          string
	Reason            string // a void's reason
	State             State
	ProviderReference string
	DeclineCode       string
	CreatedAt         time.Time
	UpdatedAt         time.Time
	// FirstSentAt and LastSentAt are the action's provider history
	// (providerflow.Columns).
	FirstSentAt, LastSentAt *time.Time
}

// ProviderKey is the idempotency key sent to the provider for action id:
// derived from the action on the payment, never from the client's key.
func ProviderKey(id string) string { return "paymentsapi:" + id }

// Result is what an action's key answers: the action, and its payment as it
// stands after it.
type Result struct {
	Action  Action
	Payment payments.Payment
}

// Outcome names the action's state for metrics and webhooks: succeeded,
// declined, canceled or processing.
func (r Result) Outcome() string {
	switch r.Action.State {
	case StateSucceeded:
		return "succeeded"
	case StateDeclined:
		return "declined"
	case StateCanceled:
		return "canceled"
	default:
		return "processing"
	}
}

// kind is what tells the two operations apart: everything else is one code.
type kind struct {
	action    payments.Action
	operation string // the key scope
	resource  string // the resource type
	idField   string
	idPrefix  string
	sendOp    string // the provider call's metric label
	lookupOp  string
}

var (
	capture = kind{
		action: payments.ActionCapture, operation: OperationCapture, resource: ResourceCapture,
		idField: "captureId", idPrefix: "cap_", sendOp: "capture", lookupOp: "capture_lookup",
	}
	cancel = kind{
		action: payments.ActionVoid, operation: OperationCancel, resource: ResourceCancellation,
		idField: "cancellationId", idPrefix: "cxl_", sendOp: "void", lookupOp: "void_lookup",
	}
)

// kindOf is the operation of action a's kind (capture or cancel).
func kindOf(a payments.Action) kind {
	if a == payments.ActionVoid {
		return cancel
	}
	return capture
}

// The names of the two operations and of their resources.
const (
	OperationCapture     = "capture_payment"
	OperationCancel      = "cancel_payment"
	ResourceCapture      = "capture"
	ResourceCancellation = "cancellation"
)

// deriveID is the id of the action that the command with fingerprint
// creates under the tenant's key: the same for the same tenant, key and
// command (idempotency.ResourceID), so that a retry after a failover that
// lost the action recreates it under its id, and the provider, asked with
// the same ProviderKey, answers the original capture or void.
func (k kind) deriveID(tenant, key string, fingerprint []byte) string {
	return idempotency.ResourceID(k.idPrefix, idempotency.Scope{Tenant: tenant, Operation: k.operation, Key: key}, fingerprint)
}
