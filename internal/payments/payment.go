// Package payments holds the payment domain: the create command and its
// fingerprint, the state machine, the payment record, and the Service that
// runs a payment from an idempotent request through the provider.
package payments

import (
	"encoding/json"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/money"
)

// Payment is a payment as stored.
type Payment struct {
	ID                string
	TenantID          string
	Command           Command
	State             State
	ProviderReference string
	DeclineCode       string
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// ProviderKey is the idempotency key sent to the provider for payment id. It
// is derived from the payment, never from the client's key, so it is the same
// on every attempt for the payment and unique across tenants.
func ProviderKey(paymentID string) string { return "paymentsapi:" + paymentID }

// View is the JSON representation of a payment, as clients see it.
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
	CreatedAt         time.Time `json:"createdAt"`
	UpdatedAt         time.Time `json:"updatedAt"`
	ProviderReference string    `json:"providerReference,omitempty"`
	DeclineCode       string    `json:"declineCode,omitempty"`
}

// View returns the client representation of p.
func (p Payment) View() View {
	return View{
		PaymentID:         p.ID,
		Status:            p.State.Status(),
		AccountID:         p.Command.AccountID,
		Amount:            money.Format(p.Command.AmountMinor, p.Command.Currency),
		Currency:          p.Command.Currency,
		MerchantReference: p.Command.MerchantReference,
		PaymentMethod:     p.Command.PaymentMethod,
		Channel:           p.Command.Channel,
		Description:       p.Command.Description,
		CreatedAt:         p.CreatedAt,
		UpdatedAt:         p.UpdatedAt,
		ProviderReference: p.ProviderReference,
		DeclineCode:       p.DeclineCode,
	}
}

// JSON renders the client representation of p.
func (p Payment) JSON() []byte {
	b, _ := json.Marshal(p.View()) // strings and times only
	return b
}

// eventPayload is what outbox events about p carry: the client view plus the
// tenant, which consumers (the ledger) need and clients never see.
func (p Payment) eventPayload() any {
	return struct {
		View
		TenantID string `json:"tenantId"`
	}{p.View(), p.TenantID}
}

// Location is the URL path of the payment.
func (p Payment) Location() string { return "/payments/" + p.ID }
