package payments

import (
	"slices"

	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// State is where a payment stands in its life. The allowed moves are the
// table in machine, which the database enforces too (state_machine_moves,
// migrations/00006).
type State string

// The states of a payment.
const (
	// StateReceived: the key is claimed and the payment row exists; the
	// provider has not been called.
	StateReceived State = "RECEIVED"
	// StateProviderRequestSent is recorded, and committed, before the
	// provider is called: from here on money may have moved.
	StateProviderRequestSent State = "PROVIDER_REQUEST_SENT"
	// StateCompleted: the provider confirmed the charge. Final.
	StateCompleted State = "COMPLETED"
	// StateDeclined: the provider declined. Final.
	StateDeclined State = "DECLINED"
	// StateFailedRetryable: the provider refused before processing; no money
	// moved, and the same payment may be sent again with the same key.
	StateFailedRetryable State = "FAILED_RETRYABLE"
	// StateUnknown: the provider may or may not have charged (timeout, lost
	// answer). Resolved only by asking the provider, never by charging again.
	StateUnknown State = "UNKNOWN_REQUIRES_RECOVERY"
	// StateCanceled: provably no money moved (never sent, or refused and
	// unknown to the provider) and nobody finished it within the replay
	// window. Final; frees the merchant reference.
	StateCanceled State = "CANCELED"
	// StateAuthorized: a payment made with captureMethod manual that the
	// provider authorized; no money moved yet. It holds its merchant
	// reference until an operation on it (internal/authorizations)
	// captures or voids it, or its authorization expires.
	StateAuthorized State = "AUTHORIZED"
	// StateCaptureRequested and StateVoidRequested: a capture or a void of
	// the authorization is at the provider. The move out of AUTHORIZED is
	// the lock that lets one action win; the action that made it moves the
	// payment on when the provider answers.
	StateCaptureRequested State = "CAPTURE_REQUESTED"
	StateVoidRequested    State = "VOID_REQUESTED"
	// StateCancelRequested: a cancel_payment asked a payment that moved no
	// money (never sent, or refused) to end. Whoever owns the payment's key
	// next ends it as an abandoned one is ended: CANCELED once the provider
	// surely never saw it, or settled if it did.
	StateCancelRequested State = "CANCEL_REQUESTED"
	// StateRequiresAction: the provider holds the payment until the
	// customer authenticates (3-D Secure, nextAction). The create key's
	// answer is stored here; the outcome comes later, by any of three
	// roads (the customer's return, the provider's webhook, the
	// reconciler's look), as one move of the payment (authentication.go).
	StateRequiresAction State = "REQUIRES_ACTION"
)

// AuditSQL reads payment $1's audit trail, oldest first. Each record gives
// its id, from_state (NULL for the creation), to_state, reason,
// occurred_at, actor and request_id (who moved the payment, under which
// request: package actor). Records written before migration 00044, or by
// the release before it, have no actor and no request_id.
//
// Each record repeats its payment's created_at (the machine's
// Table.CreatedAt), so the query finds the records through the index on
// that column alone, where a new payment's records go to the right edge.
// The index also finds the records of any payment created in the same
// microsecond, so the join tests the payment's id too.
//
// Operators read it too (docs/operations.md, "A payment's audit trail").
const AuditSQL = `
	SELECT t.id, t.from_state, t.to_state, t.reason, t.occurred_at, t.actor, t.request_id
	FROM payments p
	JOIN payment_transitions t ON t.payment_created_at = p.created_at AND t.payment_id = p.id
	WHERE p.id = $1
	ORDER BY 1`

// machine is the payment state machine: for each state, the states it may
// move to.
var machine = statemachine.New("payment",
	statemachine.Table{Name: "payments", Transitions: "payment_transitions", ForeignKey: "payment_id", CreatedAt: "payment_created_at"},
	StateReceived,
	map[State][]State{
		StateProviderRequestSent: {
			StateCompleted, StateDeclined, StateFailedRetryable, StateUnknown, StateAuthorized, StateRequiresAction,
		},
		// The provider answered a lookup: it charged (or authorized), it
		// declined, or it is certain it never saw the key, so the request
		// is sent again.
		StateUnknown:         {StateCompleted, StateDeclined, StateProviderRequestSent, StateAuthorized, StateRequiresAction},
		StateReceived:        {StateProviderRequestSent, StateCanceled, StateCancelRequested},
		StateFailedRetryable: {StateProviderRequestSent, StateCanceled, StateCancelRequested},
		// The provider never saw it, or it did after all (settled through
		// the sent state, as a refusal that hid a processed request is).
		StateCancelRequested: {StateCanceled, StateProviderRequestSent},
		StateAuthorized:      {StateCaptureRequested, StateVoidRequested},
		// A capture ends captured, or back where it was (declined, or
		// abandoned unsent), or canceled if the provider voided the
		// authorization first; a void ends canceled or back where it was.
		StateCaptureRequested: {StateCompleted, StateAuthorized, StateCanceled},
		StateVoidRequested:    {StateCanceled, StateAuthorized, StateCompleted},
		// The customer authenticated (a manual payment is then only
		// authorized), failed, or never came back.
		StateRequiresAction: {StateCompleted, StateDeclined, StateCanceled, StateAuthorized},
	}).
	// A new payment is created already sent: its claim's transaction
	// sends it (providerflow.Flow.SendOnClaim).
	CreatedIn(StateProviderRequestSent)

// States lists every state, in the order of the life of a payment.
func States() []State {
	return []State{StateReceived, StateProviderRequestSent, StateCompleted,
		StateDeclined, StateFailedRetryable, StateUnknown, StateCanceled,
		StateAuthorized, StateCaptureRequested, StateVoidRequested, StateCancelRequested, StateRequiresAction}
}

// Machine returns the payment state machine (for tests that compare it
// with the database's).
func Machine() *statemachine.Machine[State] { return machine }

// Final reports whether no move leaves s.
func (s State) Final() bool { return machine.Final(s) }

// NeedsRecovery reports whether a payment in s may have reached the
// provider without its outcome being recorded: if its owner dies, the
// reconciler must find out by asking the provider.
func (s State) NeedsRecovery() bool {
	return s == StateProviderRequestSent || s == StateUnknown
}

// HoldsReference reports whether a payment in s keeps its (account,
// merchant reference) from a new payment: all but a decline or a
// cancellation, which free it for another attempt.
func (s State) HoldsReference() bool { return s != StateDeclined && s != StateCanceled }

// Status is the state as clients see it.
func (s State) Status() Status {
	switch s {
	case StateCompleted:
		return StatusSucceeded
	case StateDeclined:
		return StatusDeclined
	case StateFailedRetryable:
		return StatusFailed
	case StateCanceled:
		return StatusCanceled
	case StateAuthorized:
		return StatusRequiresCapture
	case StateRequiresAction:
		return StatusRequiresAction
	default:
		return StatusProcessing
	}
}

// Status is the client-facing status of a payment.
type Status string

// Statuses lists every status a client may see, in the order of the life
// of a payment: those of States (State.Status is the one map between the
// two).
func Statuses() []Status {
	var all []Status
	for _, s := range States() {
		if !slices.Contains(all, s.Status()) {
			all = append(all, s.Status())
		}
	}
	return all
}

// States lists the states a client sees as s, in the order of States.
func (s Status) States() []State {
	var states []State
	for _, st := range States() {
		if st.Status() == s {
			states = append(states, st)
		}
	}
	return states
}

// The statuses a client sees.
const (
	StatusProcessing Status = "PROCESSING"
	StatusSucceeded  Status = "SUCCEEDED"
	StatusDeclined   Status = "DECLINED"
	StatusFailed     Status = "FAILED"
	StatusCanceled   Status = "CANCELED"
	// StatusRequiresCapture: authorized, waiting for its capture.
	StatusRequiresCapture Status = "REQUIRES_CAPTURE"
	// StatusRequiresAction: waiting for the customer to authenticate
	// (nextAction says where).
	StatusRequiresAction Status = "REQUIRES_ACTION"
)
