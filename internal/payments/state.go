package payments

import "fmt"

// State is where a payment stands in its life. The allowed moves between
// states are declared once, in transitions, and enforced in the database by
// guarded updates (UPDATE ... WHERE state = <from>).
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
)

// transitions is the state machine: for each state, the states it may move to.
var transitions = map[State][]State{
	StateReceived: {StateProviderRequestSent},
	StateProviderRequestSent: {
		StateCompleted, StateDeclined, StateFailedRetryable, StateUnknown,
	},
	// The provider answered a lookup: it charged, it declined, or it is
	// certain it never saw the key, so the request is sent again.
	StateUnknown:         {StateCompleted, StateDeclined, StateProviderRequestSent},
	StateFailedRetryable: {StateProviderRequestSent},
	StateCompleted:       nil,
	StateDeclined:        nil,
}

// States lists every state, in the order of the life of a payment.
func States() []State {
	return []State{StateReceived, StateProviderRequestSent, StateCompleted,
		StateDeclined, StateFailedRetryable, StateUnknown}
}

// CanTransition reports whether the state machine allows from → to.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// allowedPairs returns the transition table as two parallel lists.
func allowedPairs() (froms, tos []string) {
	for _, from := range States() {
		for _, to := range transitions[from] {
			froms, tos = append(froms, string(from)), append(tos, string(to))
		}
	}
	return froms, tos
}

// Final reports whether no transition leaves s.
func (s State) Final() bool { return len(transitions[s]) == 0 }

// Status is the state as clients see it.
func (s State) Status() Status {
	switch s {
	case StateCompleted:
		return StatusSucceeded
	case StateDeclined:
		return StatusDeclined
	case StateFailedRetryable:
		return StatusFailed
	default:
		return StatusProcessing
	}
}

// Status is the client-facing status of a payment.
type Status string

// The statuses a client sees.
const (
	StatusProcessing Status = "PROCESSING"
	StatusSucceeded  Status = "SUCCEEDED"
	StatusDeclined   Status = "DECLINED"
	StatusFailed     Status = "FAILED"
)

// ErrIllegalTransition is returned for a move the state machine does not allow.
type ErrIllegalTransition struct{ From, To State }

func (e ErrIllegalTransition) Error() string {
	return fmt.Sprintf("illegal payment transition %s -> %s", e.From, e.To)
}
