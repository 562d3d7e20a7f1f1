package sim

import (
	"fmt"
	"strings"
)

// Effect is what the simulator does with a new charge, refund or capture
// once it has decided its status: how (and whether) it answers.
type Effect int

// The effects.
const (
	// Answer records the object and answers at once.
	Answer Effect = iota
	// AnswerSlowly records the object and answers after Options.SlowDelay;
	// a client that goes away first gets nothing, but the object stays
	// recorded.
	AnswerSlowly
	// LoseAnswer records the object, then holds the request until the
	// client goes away or Options.HangFor passes, and drops the connection
	// without an answer: the response is lost.
	LoseAnswer
	// Refuse answers 503 unavailable and records nothing.
	Refuse
)

// Behaviour is what the simulator does for one payment method: with a new
// charge made with it, and with a new capture or refund of such a charge.
type Behaviour struct {
	Method string
	// Charge is what a new charge does. ChargeDecline, when set, declines
	// it with that code; otherwise it succeeds, or, made with captureMethod
	// manual, is authorized (requires_capture).
	Charge        Effect
	ChargeDecline string
	// FlakyLookups: the first Options.FlakyLookups lookups of the charge
	// answer 503.
	FlakyLookups bool
	// Refund is what a new refund of such a charge does. RefundDecline,
	// when set, declines it with that code; otherwise it succeeds, unless
	// the refund rules of the package documentation decline it first.
	Refund        Effect
	RefundDecline string
	// Capture is what a new capture of such a charge's authorization
	// does. CaptureDecline, when set, declines it with that code;
	// otherwise it succeeds, unless the capture rules of the package
	// documentation decline it first.
	Capture        Effect
	CaptureDecline string
	// Authenticate: a new charge that would not be declined waits for the
	// customer to authenticate (requires_action, nextActionUrl: the
	// challenge page). AuthenticationFails: the customer's approval fails
	// all the same (declined, authentication_failed).
	Authenticate        bool
	AuthenticationFails bool
}

// Behaviours is the simulator's table of payment methods, in the spirit of a
// card network's test cards. It is the one place that says what each method
// does; a method missing from it behaves like UnknownMethod. Changing it
// after New has no effect on that Simulator. `providersim -methods` prints
// it as a Markdown table.
var Behaviours = []Behaviour{
	{Method: MethodVisa},
	{Method: MethodMastercard},
	{Method: MethodChargeDeclined, ChargeDecline: DeclineGeneric},
	{Method: MethodInsufficientFunds, ChargeDecline: DeclineInsufficientFunds},
	{Method: MethodSlow, Charge: AnswerSlowly},
	{Method: MethodTimeoutAfterSuccess, Charge: LoseAnswer},
	{Method: MethodUnavailable, Charge: Refuse},
	{Method: MethodLookupFlaky, FlakyLookups: true},
	{Method: MethodRefundDeclined, RefundDecline: DeclineRefund},
	{Method: MethodRefundTimeoutAfterSuccess, Refund: LoseAnswer},
	{Method: MethodCaptureDeclined, CaptureDecline: DeclineCapture},
	{Method: MethodCaptureTimeoutAfterSuccess, Capture: LoseAnswer},
	{Method: MethodThreeDSecureRequired, Authenticate: true},
	{Method: MethodThreeDSecureFail, Authenticate: true, AuthenticationFails: true},
}

// UnknownMethod is the behaviour of a payment method that is not in
// Behaviours: its charges are declined, so nothing of them can be captured
// or refunded.
var UnknownMethod = Behaviour{ChargeDecline: DeclineUnsupportedMethod}

// behaviourTable indexes a copy of Behaviours by method.
func behaviourTable() map[string]Behaviour {
	t := make(map[string]Behaviour, len(Behaviours))
	for _, b := range Behaviours {
		t[b.Method] = b
	}
	return t
}

// MethodRow is one payment method of Behaviours in words: what its
// charges, the captures of their authorizations and their refunds do.
type MethodRow struct {
	PaymentMethod string `json:"paymentMethod"` // "" for UnknownMethod, any other method
	Charge        string `json:"charge"`
	Capture       string `json:"capture"`
	Refund        string `json:"refund"`
}

// Methods describes Behaviours, one row per payment method (GET
// /_sim/methods answers it).
func Methods() []MethodRow {
	rows := make([]MethodRow, 0, len(Behaviours))
	for _, b := range Behaviours {
		rows = append(rows, methodRow(b))
	}
	return rows
}

// methodRow describes what the payment method of b does.
func methodRow(b Behaviour) MethodRow {
	row := MethodRow{PaymentMethod: b.Method, Charge: describe(b.Charge, b.ChargeDecline),
		Capture: describe(b.Capture, b.CaptureDecline), Refund: describe(b.Refund, b.RefundDecline)}
	if b.FlakyLookups {
		row.Charge += "; the first lookups by key answer 503 (-flaky-lookups)"
	}
	switch {
	case b.Authenticate && b.AuthenticationFails:
		row.Charge = "requires_action: the customer's challenge page fails, whatever is pressed (" + DeclineAuthenticationFailed + ")"
	case b.Authenticate:
		row.Charge = "requires_action: succeeds once the customer presses Approve on the challenge page (Fail: " + DeclineAuthenticationFailed + ")"
	}
	switch {
	case b.Charge == Refuse:
		row.Capture, row.Refund = "none: no charge is ever made", "none: no charge is ever made"
	case b.ChargeDecline != "":
		row.Capture = "declined (" + DeclineChargeNotCapturable + ")"
		row.Refund = "declined (" + DeclineChargeNotRefundable + ")"
	}
	return row
}

// MethodsMarkdown renders Behaviours, and UnknownMethod, as a Markdown
// table: one row per payment method, what its charges, the captures of
// their authorizations and their refunds do.
func MethodsMarkdown() string {
	var b strings.Builder
	b.WriteString("| paymentMethod | charge (with captureMethod manual, a success is an authorization: requires_capture) | capture of the authorization (within its amount) | a refund of the charge (within its captured amount, in its currency) |\n| --- | --- | --- | --- |\n")
	for _, row := range append(Methods(), methodRow(UnknownMethod)) {
		method := "any other"
		if row.PaymentMethod != "" {
			method = "`" + row.PaymentMethod + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", method, row.Charge, row.Capture, row.Refund)
	}
	return b.String()
}

// describe says in words what an effect and a decline code make of a new
// charge, capture or refund.
func describe(e Effect, decline string) string {
	verdict := "succeeds"
	if decline != "" {
		verdict = "declined (" + decline + ")"
	}
	switch e {
	case AnswerSlowly:
		return verdict + ", answered after a delay (-slow)"
	case LoseAnswer:
		return verdict + ", but the answer is lost: the request is held (-hang), then the connection drops"
	case Refuse:
		return "refused: 503 unavailable, nothing recorded"
	}
	return verdict
}
