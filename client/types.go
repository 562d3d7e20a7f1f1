package client

import "github.com/paymentsapi/paymentsapi/client/internal/apigen"

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
