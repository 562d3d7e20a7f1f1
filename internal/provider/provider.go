// Package provider declares what the payments service needs from a payment
// provider, and the errors that tell a caller whether money may have moved.
//
// The distinction between the errors is the whole point of this package:
//
//   - ErrUnavailable: the provider refused before processing (it answered 503,
//     or the connection was refused). No money moved; sending the same request
//     again with the same key is safe.
//   - ErrUnknownOutcome: the request may have been processed but the answer was
//     lost (timeout, reset connection, malformed answer). The caller must not
//     treat this as a failure; it must find out, by Lookup with the same key.
//   - ErrNotFound (Lookup only): the provider is certain it never saw the key.
package provider

import (
	"context"
	"errors"
)

// Errors returned by a Provider. Implementations wrap them with detail;
// callers test them with errors.Is.
var (
	ErrUnavailable    = errors.New("provider unavailable: request not processed")
	ErrUnknownOutcome = errors.New("provider outcome unknown")
	ErrNotFound       = errors.New("provider has no charge for this key")
)

// Status is the provider's verdict on a charge.
type Status string

// The statuses a charge can have.
const (
	StatusSucceeded Status = "succeeded"
	StatusDeclined  Status = "declined"
)

// ChargeRequest asks the provider to move money once. IdempotencyKey is
// derived from the payment, never taken from the client, and is the same on
// every attempt for that payment.
type ChargeRequest struct {
	IdempotencyKey string
	AmountMinor    int64  // amount in the currency's minor unit
	Currency       string // ISO 4217, upper case
	PaymentMethod  string
	Description    string
	PaymentID      string // our payment id, for the provider's metadata
}

// Charge is the provider's record of a charge.
type Charge struct {
	ID             string
	IdempotencyKey string
	Status         Status
	DeclineCode    string // set when Status is StatusDeclined
	AmountMinor    int64
	Currency       string
}

// Provider charges and looks charges up by idempotency key.
type Provider interface {
	// Charge creates a charge, or returns the existing one for the key.
	// A decline is a Charge with StatusDeclined and a nil error.
	Charge(ctx context.Context, req ChargeRequest) (Charge, error)
	// Lookup returns the charge created with key, ErrNotFound when the
	// provider is certain there is none, or another error when it cannot say.
	Lookup(ctx context.Context, key string) (Charge, error)
}
