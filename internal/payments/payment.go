// Package payments is the create-payment operation: POST /payments charges
// once, whatever the retries, crashes and concurrency. It is built as every
// operation is (internal/operation):
//   - module.go: the one value the service registers (Module): its name,
//     resource, events (PaymentSucceeded is booked by the ledger), the
//     provider's webhook events that name a payment;
//   - command.go: the command and its fingerprint;
//   - state.go: its state machine, a table of moves the database enforces;
//   - service.go: Create (the claim's batch: the payment if its merchant
//     reference is free, its first transition and PaymentCreated) and
//     Resume (send, look up, settle, through providerflow);
//   - http.go: its routes, answers and problems;
//   - port.go: what another operation may do with a payment (Port: a
//     refund's lock on it, its refunded amount);
//   - store.go: its statements.
package payments

import (
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/jsontext"
	"github.com/paymentsapi/paymentsapi/internal/money"
)

// ResourceType names payments in idempotency records and outbox events.
const ResourceType = "payment"

// Payment is a payment as stored.
type Payment struct {
	ID                string
	TenantID          string
	Command           Command
	State             State
	ProviderReference string
	DeclineCode       string
	RefundedMinor     int64 // sum of the refunds that succeeded
	// CapturedMinor is what a manual payment's capture took (nil until
	// then, and for an automatic payment: it captures its whole amount).
	CapturedMinor *int64
	// AuthorizationExpiresAt is when a manual payment's authorization runs
	// out (AUTHORIZATION_TTL after it was authorized); nil before.
	AuthorizationExpiresAt *time.Time
	// HeldBy is the id of the action (a capture, a void) that holds the
	// authorization while the payment is StateCaptureRequested or
	// StateVoidRequested (see HeldFor). Only that action moves the payment
	// on (Actions.QueueEnd).
	HeldBy    string
	CreatedAt time.Time
	UpdatedAt time.Time
	// FirstSentAt and LastSentAt are the payment's provider history
	// (providerflow.Columns).
	FirstSentAt, LastSentAt *time.Time
	// NextActionURL is where the customer authenticates, once the provider
	// asked for it (StateRequiresAction); kept after, as a record.
	NextActionURL string
}

var _ idempotency.Result = Payment{}

// Outcome names the payment's state for metrics: succeeded, declined,
// processing, failed or canceled.
func (p Payment) Outcome() string { return p.State.Status().Outcome() }

// The outcomes of a payment, as Outcome names them.
const (
	OutcomeSucceeded  = "succeeded"
	OutcomeDeclined   = "declined"
	OutcomeProcessing = "processing"
	OutcomeFailed     = "failed"
	OutcomeCanceled   = "canceled"
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
	case StatusCanceled:
		return OutcomeCanceled
	default:
		return OutcomeProcessing
	}
}

// Resource is the payment as an idempotency key's resource.
func (p Payment) Resource() idempotency.Resource {
	return idempotency.Resource{Type: ResourceType, ID: p.ID}
}

// NewID returns a new payment's id, such as "pay_5k3x...", at random: for
// tests and tools; the service derives its payments' ids (DeriveID).
func NewID() string { return ids.New(idPrefix) }

const idPrefix = "pay_"

// DeriveID is the id of the payment that cmd creates under the tenant's
// key: the same for the same tenant, key and command (idempotency.ResourceID),
// so that a retry after a failover that lost the payment recreates it under
// its id, and the provider, asked with the same ProviderKey, answers the
// original charge. It derives from fingerprintName, the operation's name
// that outlives the rename of its scope, so a retry across the rename
// derives the same id.
func DeriveID(tenant, key string, cmd Command) string {
	return deriveID(tenant, key, cmd.Fingerprint())
}

// deriveID is DeriveID of the command whose fingerprint is fp.
func deriveID(tenant, key string, fp []byte) string {
	return idempotency.ResourceID(idPrefix, idempotency.Scope{Tenant: tenant, Operation: fingerprintName, Key: key}, fp)
}

// ProviderKey is the idempotency key sent to the provider for payment id. It
// is derived from the payment, never from the client's key, so it is the same
// on every attempt for the payment and unique across tenants.
func ProviderKey(paymentID string) string { return "paymentsapi:" + paymentID }

// View is the representation of a payment that clients and events see.
type View struct {
	PaymentID         string    `json:"paymentId"`
	Status            Status    `json:"status"`
	AccountID         string    `json:"accountId"`
	Amount            string    `json:"amount"`
	Currency          string    `json:"currency"`
	MerchantReference string    `json:"merchantReference"`
	PaymentMethod     string    `json:"paymentMethod"`
	Channel           string    `json:"channel"`
	Description       string    `json:"description"`
	RefundedAmount    string    `json:"refundedAmount"`
	CreatedAt         time.Time `json:"createdAt"`
	UpdatedAt         time.Time `json:"updatedAt"`
	ProviderReference string    `json:"providerReference,omitempty"`
	DeclineCode       string    `json:"declineCode,omitempty"`
	CaptureMethod     string    `json:"captureMethod"`
	// CapturableAmount: while REQUIRES_CAPTURE, what a capture may take.
	CapturableAmount string `json:"capturableAmount,omitempty"`
	// AuthorizationExpiresAt: once authorized (manual capture).
	AuthorizationExpiresAt *time.Time `json:"authorizationExpiresAt,omitempty"`
	// CapturedAmount: once captured (SUCCEEDED).
	CapturedAmount string `json:"capturedAmount,omitempty"`
	// ReturnURL: the command's returnUrl, if it had one.
	ReturnURL string `json:"returnUrl,omitempty"`
	// NextAction: while REQUIRES_ACTION, what the customer must do.
	NextAction *NextAction `json:"nextAction,omitempty"`
}

// NextAction is what the customer must do before a payment goes on: go to
// URL (Type NextActionRedirect) and authenticate there.
type NextAction struct {
	Type string `json:"type"`
	URL  string `json:"url"`
}

// NextActionRedirect is the one type of NextAction: a redirect of the
// customer's browser.
const NextActionRedirect = "redirect"

// Captured is what p captured, in minor units: its capture's amount, its whole amount
// for a payment captured when it succeeded, 0 before.
func (p Payment) Captured() int64 {
	switch {
	case p.State != StateCompleted:
		return 0
	case p.CapturedMinor != nil:
		return *p.CapturedMinor
	default:
		return p.Command.AmountMinor
	}
}

// View returns the representation of p.
func (p Payment) View() View {
	c := p.Command
	v := View{
		PaymentID:         p.ID,
		Status:            p.State.Status(),
		AccountID:         c.AccountID,
		Amount:            money.Format(c.AmountMinor, c.Currency),
		Currency:          c.Currency,
		MerchantReference: c.MerchantReference,
		PaymentMethod:     c.PaymentMethod,
		Channel:           c.Channel,
		Description:       c.Description,
		RefundedAmount:    money.Format(p.RefundedMinor, c.Currency),
		CreatedAt:         p.CreatedAt,
		UpdatedAt:         p.UpdatedAt,
		ProviderReference: p.ProviderReference,
		DeclineCode:       p.DeclineCode,
		CaptureMethod:     c.CaptureMethod,
	}
	if p.AuthorizationExpiresAt != nil {
		at := p.AuthorizationExpiresAt.UTC()
		v.AuthorizationExpiresAt = &at
	}
	if p.State == StateAuthorized {
		v.CapturableAmount = money.Format(c.AmountMinor, c.Currency)
	}
	if captured := p.Captured(); captured > 0 {
		v.CapturedAmount = money.Format(captured, c.Currency)
	}
	v.ReturnURL = c.ReturnURL
	if p.State == StateRequiresAction && p.NextActionURL != "" {
		v.NextAction = &NextAction{Type: NextActionRedirect, URL: p.NextActionURL}
	}
	return v
}

// AppendJSON appends v's JSON, byte for byte as json.Marshal writes it
// (TestAViewWritesWhatMarshalWrites): every answer and event about a
// payment carries it, without reflection (jsontext.Marshal).
func (v View) AppendJSON(dst []byte) []byte {
	dst = append(dst, '{')
	dst = jsontext.AppendString(jsontext.Field(dst, "paymentId"), v.PaymentID)
	dst = jsontext.AppendString(jsontext.Field(dst, "status"), string(v.Status))
	dst = jsontext.AppendString(jsontext.Field(dst, "accountId"), v.AccountID)
	dst = jsontext.AppendString(jsontext.Field(dst, "amount"), v.Amount)
	dst = jsontext.AppendString(jsontext.Field(dst, "currency"), v.Currency)
	dst = jsontext.AppendString(jsontext.Field(dst, "merchantReference"), v.MerchantReference)
	dst = jsontext.AppendString(jsontext.Field(dst, "paymentMethod"), v.PaymentMethod)
	dst = jsontext.AppendString(jsontext.Field(dst, "channel"), v.Channel)
	dst = jsontext.AppendString(jsontext.Field(dst, "description"), v.Description)
	dst = jsontext.AppendString(jsontext.Field(dst, "refundedAmount"), v.RefundedAmount)
	dst = jsontext.AppendTime(jsontext.Field(dst, "createdAt"), v.CreatedAt)
	dst = jsontext.AppendTime(jsontext.Field(dst, "updatedAt"), v.UpdatedAt)
	if v.ProviderReference != "" {
		dst = jsontext.AppendString(jsontext.Field(dst, "providerReference"), v.ProviderReference)
	}
	if v.DeclineCode != "" {
		dst = jsontext.AppendString(jsontext.Field(dst, "declineCode"), v.DeclineCode)
	}
	dst = jsontext.AppendString(jsontext.Field(dst, "captureMethod"), v.CaptureMethod)
	if v.CapturableAmount != "" {
		dst = jsontext.AppendString(jsontext.Field(dst, "capturableAmount"), v.CapturableAmount)
	}
	if v.AuthorizationExpiresAt != nil {
		dst = jsontext.AppendTime(jsontext.Field(dst, "authorizationExpiresAt"), *v.AuthorizationExpiresAt)
	}
	if v.CapturedAmount != "" {
		dst = jsontext.AppendString(jsontext.Field(dst, "capturedAmount"), v.CapturedAmount)
	}
	if v.ReturnURL != "" {
		dst = jsontext.AppendString(jsontext.Field(dst, "returnUrl"), v.ReturnURL)
	}
	if v.NextAction != nil {
		dst = append(jsontext.Field(dst, "nextAction"), '{')
		dst = jsontext.AppendString(jsontext.Field(dst, "type"), v.NextAction.Type)
		dst = jsontext.AppendString(jsontext.Field(dst, "url"), v.NextAction.URL)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// eventPayload is what outbox events about p carry: the client view plus the
// tenant, which consumers (the ledger) need and clients never see.
func (p Payment) eventPayload() any { return eventPayload{p.View(), p.TenantID} }

// eventPayload is a payment's view and its tenant, in one JSON object:
// the view's members, then tenantId.
type eventPayload struct {
	View
	TenantID string `json:"tenantId"`
}

// AppendJSON appends e's JSON, as json.Marshal writes it.
func (e eventPayload) AppendJSON(dst []byte) []byte {
	dst = e.View.AppendJSON(dst)
	dst = jsontext.Field(dst[:len(dst)-1], "tenantId")
	return append(jsontext.AppendString(dst, e.TenantID), '}')
}

// HeldFor reports whether action actionID holds p: p is in action's
// requested state and names it.
func (p Payment) HeldFor(action Action, actionID string) bool {
	return p.State == action.requested() && p.HeldBy == actionID
}

// HeldAs is the kind of action whose requested state p is in (a capture
// or a void holds its authorization), or false when none holds it.
func (p Payment) HeldAs() (Action, bool) {
	for _, a := range []Action{ActionCapture, ActionVoid} {
		if p.State == a.requested() {
			return a, true
		}
	}
	return "", false
}
