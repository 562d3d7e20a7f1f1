package stripeprovider

import "github.com/paymentsapi/paymentsapi/internal/provider"

// WebhookEvents are Stripe's webhook events about the objects of kind o
// that it keeps for the service, each naming our resource by the metadata
// Charge and Refund write: a payment's PaymentIntent, a refund's Refund.
// The service acts on these and answers every other type as ignored.
func WebhookEvents(o provider.Object) []provider.WebhookEvent {
	switch o {
	case provider.ObjectCharge:
		return []provider.WebhookEvent{
			{Type: "payment_intent.succeeded", Object: "payment_intent", MetadataID: MetadataPaymentID},
			// a manual payment's authorization, after its customer authenticated
			{Type: "payment_intent.amount_capturable_updated", Object: "payment_intent", MetadataID: MetadataPaymentID},
			{Type: "payment_intent.payment_failed", Object: "payment_intent", MetadataID: MetadataPaymentID},
			{Type: "payment_intent.canceled", Object: "payment_intent", MetadataID: MetadataPaymentID},
		}
	case provider.ObjectRefund:
		// charge.refunded is not one: its object is the Charge, which (API
		// version 2023-10-16) does not list its refunds.
		return []provider.WebhookEvent{
			{Type: "refund.created", Object: "refund", MetadataID: MetadataRefundID},
			{Type: "refund.updated", Object: "refund", MetadataID: MetadataRefundID},
			{Type: "charge.refund.updated", Object: "refund", MetadataID: MetadataRefundID},
		}
	}
	return nil
}
