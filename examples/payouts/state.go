package payouts

import "github.com/paymentsapi/paymentsapi/internal/statemachine"

// State is where a payout stands.
type State string

// The states of a payout: the same kinds as a refund's.
const (
	StateReceived            State = "RECEIVED"
	StateProviderRequestSent State = "PROVIDER_REQUEST_SENT"
	StateSucceeded           State = "SUCCEEDED"
	StateDeclined            State = "DECLINED"
	StateFailedRetryable     State = "FAILED_RETRYABLE"
	StateUnknown             State = "UNKNOWN_REQUIRES_RECOVERY"
)

// machine is the payout's state machine: the moves below, which
// migrations/00051_payouts.sql mirrors in state_machine_moves for the
// database's trigger to enforce.
var machine = statemachine.New("payout",
	statemachine.Table{Name: "payouts", Transitions: "payout_transitions", ForeignKey: "payout_id"},
	StateReceived,
	map[State][]State{
		StateReceived:            {StateProviderRequestSent},
		StateProviderRequestSent: {StateSucceeded, StateDeclined, StateFailedRetryable, StateUnknown},
		StateUnknown:             {StateSucceeded, StateDeclined, StateProviderRequestSent},
		StateFailedRetryable:     {StateProviderRequestSent},
	}).
	// A new payout is created already sent: its claim's transaction sends
	// it (providerflow.Flow.SendOnClaim).
	CreatedIn(StateProviderRequestSent)

// States lists every state.
func States() []State {
	return []State{StateReceived, StateProviderRequestSent, StateSucceeded, StateDeclined, StateFailedRetryable, StateUnknown}
}

// Machine returns the payout state machine.
func Machine() *statemachine.Machine[State] { return machine }

// Final reports whether no move leaves s.
func (s State) Final() bool { return machine.Final(s) }

// NeedsRecovery reports whether the payout may have reached the provider
// without its outcome being recorded.
func (s State) NeedsRecovery() bool { return s == StateProviderRequestSent || s == StateUnknown }

// Status is the state as clients see it.
func (s State) Status() Status {
	switch s {
	case StateSucceeded:
		return StatusSucceeded
	case StateDeclined:
		return StatusDeclined
	case StateFailedRetryable:
		return StatusFailed
	default:
		return StatusProcessing
	}
}

// Status is the client-facing status of a payout.
type Status string

// The statuses a client sees.
const (
	StatusProcessing Status = "PROCESSING"
	StatusSucceeded  Status = "SUCCEEDED"
	StatusDeclined   Status = "DECLINED"
	StatusFailed     Status = "FAILED"
)

// Outcome is s as metrics and logs name it.
func (s Status) Outcome() string {
	switch s {
	case StatusSucceeded:
		return "succeeded"
	case StatusDeclined:
		return "declined"
	case StatusFailed:
		return "failed"
	default:
		return "processing"
	}
}
