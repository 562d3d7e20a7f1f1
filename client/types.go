package client

import (
	"slices"
	"time"

	"github.com/paymentsapi/paymentsapi/client/internal/apigen"
)

// The resources and requests of the API, generated from api/openapi.yaml.
type (
	// CreatePaymentRequest is the body of POST /payments.
	CreatePaymentRequest = apigen.CreatePaymentRequest
	// Channel says where a payment was initiated; empty means ChannelWeb.
	Channel = apigen.CreatePaymentRequestChannel
	// CaptureMethod says whether a payment is captured at once (empty or
	// CaptureAutomatic) or only authorized, to be captured or canceled
	// later (CaptureManual).
	CaptureMethod = apigen.CaptureMethod
	// Payment is a payment as the API answers it.
	Payment = apigen.Payment
	// PaymentStatus is the status of a payment.
	PaymentStatus = apigen.PaymentStatus
	// NextAction is what a payment's customer must do before the payment
	// goes on (Payment.NextAction, set only while it is
	// PaymentRequiresAction): send the customer's browser to URL.
	NextAction = apigen.NextAction
	// NextActionType is the kind of a NextAction.
	NextActionType = apigen.NextActionType
	// PaymentList is one page of payments, newest first.
	PaymentList = apigen.PaymentList
	// CreateRefundRequest is the body of POST /payments/{paymentId}/refunds.
	CreateRefundRequest = apigen.CreateRefundRequest
	// RefundReason says why a payment is refunded; it is optional.
	RefundReason = apigen.RefundReason
	// Refund is a refund as the API answers it.
	Refund = apigen.Refund
	// RefundStatus is the status of a refund.
	RefundStatus = apigen.RefundStatus
	// RefundList is the refunds of one payment.
	RefundList = apigen.RefundList
	// CapturePaymentRequest is the body of POST /payments/{paymentId}/capture:
	// an empty Amount captures the whole capturable amount.
	CapturePaymentRequest = apigen.CapturePaymentRequest
	// CancelPaymentRequest is the body of POST /payments/{paymentId}/cancel;
	// its Reason is optional.
	CancelPaymentRequest = apigen.CancelPaymentRequest
	// CancelReason says why a payment is canceled; it is optional.
	CancelReason = apigen.CancelReason
	// FieldError names one invalid field of a VALIDATION_FAILED problem.
	FieldError = apigen.FieldError

	// CreateWebhookEndpointRequest is the body of POST /webhook-endpoints:
	// URL is required; empty EventTypes means every type.
	CreateWebhookEndpointRequest = apigen.CreateWebhookEndpointRequest
	// WebhookEndpoint is a webhook endpoint as the API answers it, without
	// its secret.
	WebhookEndpoint = apigen.WebhookEndpoint
	// WebhookEndpointWithSecret is a webhook endpoint with its signing
	// secret, as only its registration and its rotation answer it (the
	// secret in their first answer only: "" in a replay).
	WebhookEndpointWithSecret = apigen.WebhookEndpointWithSecret
	// RotateWebhookSecretRequest is the body of a rotation: how long the
	// replaced secret keeps signing (empty: 24 hours).
	RotateWebhookSecretRequest = apigen.RotateWebhookSecretRequest
	// WebhookEndpointSecret is the secret that signs an endpoint's
	// deliveries now.
	WebhookEndpointSecret = apigen.WebhookEndpointSecret
	// WebhookEndpointStatus says whether events are sent to an endpoint.
	WebhookEndpointStatus = apigen.WebhookEndpointStatus
	// WebhookEndpointList is the tenant's webhook endpoints, newest first.
	WebhookEndpointList = apigen.WebhookEndpointList
	// EventType is the type of an event, such as payment.succeeded.
	EventType = apigen.EventType
	// Event is one event of the tenant's log, as its webhook deliveries
	// carry it.
	Event = apigen.Event
	// EventData is an event's payment (payment.* types) or refund
	// (refund.* types): read it with AsPayment or AsRefund.
	EventData = apigen.Event_Data
	// EventList is one page of events, newest first.
	EventList = apigen.EventList
	// Delivery is one attempt to deliver an event to one endpoint.
	Delivery = apigen.Delivery
	// DeliveryList is the delivery attempts of one event, newest first.
	DeliveryList = apigen.DeliveryList
	// ResendEventRequest is the body of POST /events/{eventId}/resend: an
	// empty EndpointID sends the event to every endpoint subscribed to it.
	ResendEventRequest = apigen.ResendEventRequest
	// ResendReceipt is what a resend queued: the endpoints the event goes to.
	ResendReceipt = apigen.ResendReceipt
)

// The channels of a payment.
const (
	ChannelWeb    Channel = apigen.CreatePaymentRequestChannelWeb
	ChannelMobile Channel = apigen.CreatePaymentRequestChannelMobile
	ChannelPOS    Channel = apigen.CreatePaymentRequestChannelPos
	ChannelAPI    Channel = apigen.CreatePaymentRequestChannelAPI
)

// The capture methods of a payment.
const (
	CaptureAutomatic CaptureMethod = apigen.Automatic
	CaptureManual    CaptureMethod = apigen.Manual
)

// The statuses of a payment.
const (
	PaymentProcessing      PaymentStatus = apigen.PaymentStatusPROCESSING
	PaymentRequiresAction  PaymentStatus = apigen.PaymentStatusREQUIRESACTION
	PaymentRequiresCapture PaymentStatus = apigen.PaymentStatusREQUIRESCAPTURE
	PaymentSucceeded       PaymentStatus = apigen.PaymentStatusSUCCEEDED
	PaymentDeclined        PaymentStatus = apigen.PaymentStatusDECLINED
	PaymentFailed          PaymentStatus = apigen.PaymentStatusFAILED
	PaymentCanceled        PaymentStatus = apigen.PaymentStatusCANCELED
)

// NextActionRedirect is the NextAction that sends the customer's browser
// to its URL, the provider's authentication (3-D Secure) page.
const NextActionRedirect NextActionType = apigen.Redirect

// The statuses of a refund.
const (
	RefundProcessing RefundStatus = apigen.RefundStatusPROCESSING
	RefundSucceeded  RefundStatus = apigen.RefundStatusSUCCEEDED
	RefundDeclined   RefundStatus = apigen.RefundStatusDECLINED
	RefundFailed     RefundStatus = apigen.RefundStatusFAILED
)

// The reasons of a refund.
const (
	ReasonRequestedByCustomer RefundReason = apigen.RefundReasonRequestedByCustomer
	ReasonDuplicate           RefundReason = apigen.RefundReasonDuplicate
	ReasonFraudulent          RefundReason = apigen.RefundReasonFraudulent
)

// The reasons of a cancel.
const (
	CancelRequestedByCustomer CancelReason = apigen.CancelReasonRequestedByCustomer
	CancelDuplicate           CancelReason = apigen.CancelReasonDuplicate
	CancelFraudulent          CancelReason = apigen.CancelReasonFraudulent
	CancelAbandoned           CancelReason = apigen.CancelReasonAbandoned
)

// The types of events.
const (
	EventPaymentCreated        EventType = apigen.PaymentCreated
	EventPaymentAuthorized     EventType = apigen.PaymentAuthorized
	EventPaymentSucceeded      EventType = apigen.PaymentSucceeded
	EventPaymentDeclined       EventType = apigen.PaymentDeclined
	EventPaymentCanceled       EventType = apigen.PaymentCanceled
	EventPaymentRequiresAction EventType = apigen.PaymentRequiresAction
	EventRefundCreated         EventType = apigen.RefundCreated
	EventRefundSucceeded       EventType = apigen.RefundSucceeded
	EventRefundDeclined        EventType = apigen.RefundDeclined
)

// The statuses of a webhook endpoint.
const (
	WebhookEndpointEnabled  WebhookEndpointStatus = apigen.Enabled
	WebhookEndpointDisabled WebhookEndpointStatus = apigen.Disabled
)

// ListPaymentsParams filters and pages GET /payments; zero fields are left
// out. A page holds the payments that meet every filter given.
type ListPaymentsParams struct {
	// AccountID keeps the payments of one account.
	AccountID string
	// MerchantReference keeps the payments with this reference (every
	// attempt at it: the one that holds it and those declined or canceled).
	MerchantReference string
	// Statuses keeps the payments in any of these statuses.
	Statuses []PaymentStatus
	// CreatedFrom keeps the payments created at or after it.
	CreatedFrom time.Time
	// CreatedTo keeps the payments created before it.
	CreatedTo time.Time
	// Currency keeps the payments in it; AmountMin and AmountMax, written
	// as a payment's amount is ("10.00", in Currency, which they need),
	// keep those whose amount lies between them, both included.
	Currency             string
	AmountMin, AmountMax string
	// Limit is the page size, 1 to 100 (the server's default is 20).
	Limit int
	// Cursor is the NextCursor of the previous page: a position in the
	// listing, which with the same filters pages through them.
	Cursor string
}

// generated returns p as the generated call takes it.
func (p ListPaymentsParams) generated() *apigen.ListPaymentsParams {
	return &apigen.ListPaymentsParams{
		AccountID: optional(p.AccountID), MerchantReference: optional(p.MerchantReference),
		Status: optionalList(p.Statuses), CreatedFrom: optional(p.CreatedFrom), CreatedTo: optional(p.CreatedTo),
		Currency: optional(p.Currency), AmountMin: optional(p.AmountMin), AmountMax: optional(p.AmountMax),
		Limit: optional(p.Limit), Cursor: optional(p.Cursor),
	}
}

// ListEventsParams filters and pages GET /events; zero fields are left out.
// A page holds the events that meet every filter given.
type ListEventsParams struct {
	// Type keeps the events of one type; with Types, those of any of them.
	Type EventType
	// Types keeps the events of any of these types.
	Types []EventType
	// PaymentID keeps the events of one payment: its own and its refunds'.
	PaymentID string
	// CreatedFrom keeps the events that happened at or after it.
	CreatedFrom time.Time
	// CreatedTo keeps the events that happened before it.
	CreatedTo time.Time
	// After keeps the events that happened after this time.
	After time.Time
	// Limit is the page size, 1 to 100 (the server's default is 20).
	Limit int
	// Cursor is the NextCursor of the previous page, with the same filters.
	Cursor string
}

// generated returns p as the generated call takes it.
func (p ListEventsParams) generated() *apigen.ListEventsParams {
	types := p.Types
	if p.Type != "" && !slices.Contains(types, p.Type) {
		types = append([]EventType{p.Type}, types...)
	}
	return &apigen.ListEventsParams{
		Type: optionalList(types), PaymentID: optional(p.PaymentID), CreatedFrom: optional(p.CreatedFrom),
		CreatedTo: optional(p.CreatedTo), After: optional(p.After), Limit: optional(p.Limit), Cursor: optional(p.Cursor),
	}
}

// optional is v as the generated calls take an optional parameter: nil
// when v is its type's zero value (left out of the query).
func optional[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// optionalList is a list parameter as the generated calls take it: nil
// when empty.
func optionalList[T any](v []T) *[]T {
	if len(v) == 0 {
		return nil
	}
	return &v
}
