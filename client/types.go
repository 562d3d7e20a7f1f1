package client

import (
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
	PaymentRequiresCapture PaymentStatus = apigen.PaymentStatusREQUIRESCAPTURE
	PaymentSucceeded       PaymentStatus = apigen.PaymentStatusSUCCEEDED
	PaymentDeclined        PaymentStatus = apigen.PaymentStatusDECLINED
	PaymentFailed          PaymentStatus = apigen.PaymentStatusFAILED
	PaymentCanceled        PaymentStatus = apigen.PaymentStatusCANCELED
)

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
	EventPaymentCreated    EventType = apigen.PaymentCreated
	EventPaymentAuthorized EventType = apigen.PaymentAuthorized
	EventPaymentSucceeded  EventType = apigen.PaymentSucceeded
	EventPaymentDeclined   EventType = apigen.PaymentDeclined
	EventPaymentCanceled   EventType = apigen.PaymentCanceled
	EventRefundCreated     EventType = apigen.RefundCreated
	EventRefundSucceeded   EventType = apigen.RefundSucceeded
	EventRefundDeclined    EventType = apigen.RefundDeclined
)

// The statuses of a webhook endpoint.
const (
	WebhookEndpointEnabled  WebhookEndpointStatus = apigen.Enabled
	WebhookEndpointDisabled WebhookEndpointStatus = apigen.Disabled
)

// ListPaymentsParams filters and pages GET /payments; zero fields are left
// out.
type ListPaymentsParams struct {
	// AccountID keeps the payments of one account.
	AccountID string
	// Limit is the page size, 1 to 100 (the server's default is 20).
	Limit int
	// Cursor is the NextCursor of the previous page.
	Cursor string
}

// generated returns p as the generated call takes it.
func (p ListPaymentsParams) generated() *apigen.ListPaymentsParams {
	var g apigen.ListPaymentsParams
	if p.AccountID != "" {
		g.AccountID = &p.AccountID
	}
	if p.Limit != 0 {
		g.Limit = &p.Limit
	}
	if p.Cursor != "" {
		g.Cursor = &p.Cursor
	}
	return &g
}

// ListEventsParams filters and pages GET /events; zero fields are left out.
type ListEventsParams struct {
	// Type keeps the events of one type.
	Type EventType
	// After keeps the events that happened after this time.
	After time.Time
	// Limit is the page size, 1 to 100 (the server's default is 20).
	Limit int
	// Cursor is the NextCursor of the previous page, with the same filters.
	Cursor string
}

// generated returns p as the generated call takes it.
func (p ListEventsParams) generated() *apigen.ListEventsParams {
	var g apigen.ListEventsParams
	if p.Type != "" {
		g.Type = &p.Type
	}
	if !p.After.IsZero() {
		g.After = &p.After
	}
	if p.Limit != 0 {
		g.Limit = &p.Limit
	}
	if p.Cursor != "" {
		g.Cursor = &p.Cursor
	}
	return &g
}
