package stripeprovider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// MetadataRefundID is set, with MetadataIdempotencyKey, on every Refund that
// Refund creates (when the request names our refund).
const MetadataRefundID = "refund_id"

// LookupRefund reads a PaymentIntent's refunds refundPageSize at a time, at
// most maxRefundPages pages.
const (
	refundPageSize = 100
	maxRefundPages = 10
)

// refusedRefund holds the error codes with which Stripe refuses a refund the
// charge cannot take. No Refund object is made and no money moves: Refund
// answers them as a declined refund.
var refusedRefund = map[stripe.ErrorCode]bool{
	stripe.ErrorCodeAmountTooLarge:        true,
	stripe.ErrorCodeChargeAlreadyRefunded: true,
	stripe.ErrorCodeChargeDisputed:        true,
	stripe.ErrorCodeChargeNotRefundable:   true,
	stripe.ErrorCodeRefundDisputedPayment: true,
}

// Refund creates a Refund of PaymentIntent req.ChargeID with
// req.IdempotencyKey, or gets Stripe's stored answer for that key. See the
// package documentation for what it sends and for errors.
func (p *Provider) Refund(ctx context.Context, req provider.RefundRequest) (provider.Refund, error) {
	if err := checkRefundRequest(req); err != nil {
		return provider.Refund{}, fmt.Errorf("stripeprovider: refund: %w", err)
	}
	amount, err := p.rules.ToProvider(req.AmountMinor, req.Currency)
	if err != nil {
		return provider.Refund{}, fmt.Errorf("stripeprovider: refund with key %q: not sent: %w", req.IdempotencyKey, err)
	}
	if err := ctx.Err(); err != nil {
		return provider.Refund{}, fmt.Errorf("stripeprovider: refund with key %q: %w: not sent: %w", req.IdempotencyKey, provider.ErrUnavailable, err)
	}
	ctx, trace := withCallTrace(ctx)
	params := &stripe.RefundParams{
		PaymentIntent: stripe.String(req.ChargeID),
		Amount:        stripe.Int64(amount),
		Metadata:      map[string]string{MetadataIdempotencyKey: req.IdempotencyKey},
	}
	if req.RefundID != "" {
		params.Metadata[MetadataRefundID] = req.RefundID
	}
	if req.Reason != "" {
		params.Reason = stripe.String(req.Reason)
	}
	params.Context = ctx
	params.IdempotencyKey = stripe.String(req.IdempotencyKey)

	rf, err := p.refunds.New(params)
	if err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && (se.HTTPStatusCode == http.StatusBadRequest || se.HTTPStatusCode == http.StatusPaymentRequired) &&
			(se.Type == stripe.ErrorTypeCard || refusedRefund[se.Code]) {
			return refusedByError(se, req), nil
		}
		return provider.Refund{}, fmt.Errorf("stripeprovider: refund with key %q: %w", req.IdempotencyKey, classify(err, trace))
	}
	out, err := p.refundFromStripe(rf, req.IdempotencyKey, req.ChargeID)
	if err != nil {
		return provider.Refund{}, fmt.Errorf("stripeprovider: refund with key %q: %w", req.IdempotencyKey, err)
	}
	if out.Currency != strings.ToUpper(req.Currency) {
		p.log.WarnContext(ctx, "Stripe refunded in another currency than asked", "idempotency_key", req.IdempotencyKey,
			"refund", out.ID, "currency", out.Currency, "asked", req.Currency)
	}
	return out, nil
}

// LookupRefund lists the refunds of PaymentIntent l.ChargeID and returns the
// one whose metadata carries l.IdempotencyKey. See the package documentation
// for errors.
func (p *Provider) LookupRefund(ctx context.Context, l provider.RefundLookup) (provider.Refund, error) {
	if err := checkKey(l.IdempotencyKey); err != nil {
		return provider.Refund{}, fmt.Errorf("stripeprovider: refund lookup: %w", err)
	}
	if l.ChargeID == "" {
		return provider.Refund{}, errors.New("stripeprovider: refund lookup: Stripe lists refunds per PaymentIntent, and the charge id is empty")
	}
	if err := ctx.Err(); err != nil {
		return provider.Refund{}, fmt.Errorf("stripeprovider: refund lookup of key %q: %w: not sent: %w", l.IdempotencyKey, provider.ErrUnavailable, err)
	}
	found, err := p.refundsWithKey(ctx, l)
	if err != nil {
		return provider.Refund{}, fmt.Errorf("stripeprovider: refund lookup of key %q: list the refunds of %s: %w", l.IdempotencyKey, l.ChargeID, err)
	}
	switch len(found) {
	case 0:
		return provider.Refund{}, fmt.Errorf("stripeprovider: refund lookup of key %q: no refund of %s carries the key: %w", l.IdempotencyKey, l.ChargeID, provider.ErrNotFound)
	case 1:
		rf, err := p.refundFromStripe(found[0], l.IdempotencyKey, l.ChargeID)
		if err != nil {
			return provider.Refund{}, fmt.Errorf("stripeprovider: refund lookup of key %q: %w", l.IdempotencyKey, err)
		}
		return rf, nil
	}
	ids := make([]string, len(found))
	for i, rf := range found {
		ids[i] = rf.ID
	}
	p.log.WarnContext(ctx, "several Stripe refunds carry one idempotency key", "idempotency_key", l.IdempotencyKey, "refunds", ids)
	return provider.Refund{}, fmt.Errorf("stripeprovider: refund lookup of key %q: %w: refunds %s", l.IdempotencyKey, provider.ErrAmbiguous, strings.Join(ids, ", "))
}

// refundsWithKey lists every refund of PaymentIntent l.ChargeID, page by
// page, and returns those whose metadata carries l.IdempotencyKey.
func (p *Provider) refundsWithKey(ctx context.Context, l provider.RefundLookup) ([]*stripe.Refund, error) {
	var found []*stripe.Refund
	params := stripe.RefundListParams{PaymentIntent: stripe.String(l.ChargeID)}
	err := readPages(ctx, "refunds", maxRefundPages, refundPageSize, p.refundPages(params), func(entry any) (string, error) {
		rf, _ := entry.(*stripe.Refund)
		if rf == nil {
			return "", nil
		}
		if rf.Metadata[MetadataIdempotencyKey] == l.IdempotencyKey {
			found = append(found, rf)
		}
		return rf.ID, nil
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// refundFromStripe maps a Stripe Refund of PaymentIntent chargeID to a
// provider.Refund, or to ErrUnknownOutcome when the answer is not one
// (ErrAmbiguous when its amount is no whole number of the service's unit).
func (p *Provider) refundFromStripe(rf *stripe.Refund, key, chargeID string) (provider.Refund, error) {
	if rf == nil || rf.ID == "" || rf.Object != "refund" {
		return provider.Refund{}, fmt.Errorf("%w: the answer is not a Refund", provider.ErrUnknownOutcome)
	}
	if pi := rf.PaymentIntent; pi != nil && pi.ID != "" && pi.ID != chargeID {
		return provider.Refund{}, fmt.Errorf("%w: Refund %s is of PaymentIntent %s, not %s", provider.ErrUnknownOutcome, rf.ID, pi.ID, chargeID)
	}
	out := provider.Refund{
		ID:             rf.ID,
		IdempotencyKey: key,
		ChargeID:       chargeID,
		Currency:       strings.ToUpper(string(rf.Currency)),
	}
	var err error
	if out.AmountMinor, err = p.rules.FromProvider(rf.Amount, out.Currency); err != nil {
		return provider.Refund{}, fmt.Errorf("Refund %s: %w", rf.ID, err)
	}
	switch rf.Status {
	case stripe.RefundStatusSucceeded:
		out.Status = provider.StatusSucceeded
	case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
		out.Status, out.DeclineCode = provider.StatusDeclined, string(rf.FailureReason)
		if out.DeclineCode == "" {
			out.DeclineCode = string(rf.Status)
		}
	case stripe.RefundStatusPending, stripe.RefundStatusRequiresAction:
		out.Status = provider.StatusPending
	default:
		return provider.Refund{}, fmt.Errorf("%w: Refund %s is %q", provider.ErrUnknownOutcome, rf.ID, rf.Status)
	}
	return out, nil
}

// refusedByError maps an error answer that refuses a refund to a declined
// Refund. Stripe made no Refund object, so its ID is empty.
func refusedByError(se *stripe.Error, req provider.RefundRequest) provider.Refund {
	code := string(se.DeclineCode)
	if code == "" {
		code = string(se.Code)
	}
	if code == "" {
		code = "refund_declined"
	}
	return provider.Refund{
		IdempotencyKey: req.IdempotencyKey,
		ChargeID:       req.ChargeID,
		Status:         provider.StatusDeclined,
		DeclineCode:    code,
		AmountMinor:    req.AmountMinor,
		Currency:       strings.ToUpper(req.Currency),
	}
}

// refundReasons are the reasons Stripe takes.
var refundReasons = map[string]bool{"": true, "requested_by_customer": true, "duplicate": true, "fraudulent": true}

func checkRefundRequest(req provider.RefundRequest) error {
	if err := checkKey(req.IdempotencyKey); err != nil {
		return err
	}
	switch {
	case req.ChargeID == "":
		return errors.New("empty charge id")
	case req.AmountMinor <= 0:
		return fmt.Errorf("amount %d: want a positive amount in minor units", req.AmountMinor)
	case len(req.Currency) != 3:
		return fmt.Errorf("currency %q: want an ISO 4217 code", req.Currency)
	case !refundReasons[req.Reason]:
		return fmt.Errorf("reason %q: want requested_by_customer, duplicate or fraudulent", req.Reason)
	}
	return nil
}
