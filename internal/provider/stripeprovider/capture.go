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

// The decline codes of the provider.Captures port that stand for Stripe's
// payment_intent_unexpected_state, by the PaymentIntent's status.
const (
	declineChargeCanceled        = "charge_canceled"
	declineChargeAlreadyCaptured = "charge_already_captured"
)

// refusedCapture holds the error codes with which Stripe refuses a capture
// and captures nothing: Capture answers them as a declined capture.
var refusedCapture = map[stripe.ErrorCode]bool{
	stripe.ErrorCodeAmountTooLarge:                    true,
	stripe.ErrorCodeChargeExpiredForCapture:           true,
	stripe.ErrorCodeCaptureChargeAuthorizationExpired: true,
	stripe.ErrorCodeCaptureUnauthorizedPayment:        true,
	stripe.ErrorCodePaymentIntentUnexpectedState:      true,
}

// voidReasons are the reasons Void takes: Stripe's cancellation_reason
// values that a caller may give.
var voidReasons = map[string]bool{"": true, "requested_by_customer": true, "duplicate": true, "fraudulent": true, "abandoned": true}

// Capture captures req.AmountMinor of the PaymentIntent req.ChargeID with
// req.IdempotencyKey, or gets Stripe's stored answer for that key. See the
// package documentation for what it sends and for errors.
func (p *Provider) Capture(ctx context.Context, req provider.CaptureRequest) (provider.Charge, error) {
	if err := checkCaptureRequest(req); err != nil {
		return provider.Charge{}, fmt.Errorf("stripeprovider: capture: %w", err)
	}
	what := fmt.Sprintf("stripeprovider: capture of %s with key %q", req.ChargeID, req.IdempotencyKey)
	amount, err := p.rules.ToProvider(req.AmountMinor, req.Currency)
	if err != nil {
		return provider.Charge{}, fmt.Errorf("%s: not sent: %w", what, err)
	}
	if err := ctx.Err(); err != nil {
		return provider.Charge{}, fmt.Errorf("%s: %w: not sent: %w", what, provider.ErrUnavailable, err)
	}
	ctx, trace := withCallTrace(ctx)
	params := &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(amount)}
	params.Context = ctx
	params.IdempotencyKey = stripe.String(req.IdempotencyKey)

	pi, err := p.intents.Capture(req.ChargeID, params)
	if err != nil {
		if se, ok := refusal(err); ok && (se.Type == stripe.ErrorTypeCard || refusedCapture[se.Code]) {
			ch, err := p.chargeOfError(se, req.ChargeID)
			if err != nil {
				return provider.Charge{}, fmt.Errorf("%s: %w", what, err)
			}
			ch.Status, ch.DeclineCode = provider.StatusDeclined, declineCode(se)
			if se.Code == stripe.ErrorCodePaymentIntentUnexpectedState {
				ch.DeclineCode = unexpectedState(se, req.ChargeID)
			}
			return ch, nil
		}
		return provider.Charge{}, fmt.Errorf("%s: %w", what, classify(err, trace))
	}
	ch, err := p.actionAnswer(pi, req.ChargeID, stripe.PaymentIntentStatusSucceeded)
	if err != nil {
		return provider.Charge{}, fmt.Errorf("%s: %w", what, err)
	}
	if ch.Currency != strings.ToUpper(req.Currency) {
		p.log.WarnContext(ctx, "Stripe captured in another currency than asked", "idempotency_key", req.IdempotencyKey,
			"payment_intent", ch.ID, "currency", ch.Currency, "asked", req.Currency)
	}
	return ch, nil
}

// Void cancels the PaymentIntent req.ChargeID with req.IdempotencyKey, or
// gets Stripe's stored answer for that key. See the package documentation
// for what it sends and for errors.
func (p *Provider) Void(ctx context.Context, req provider.VoidRequest) (provider.Charge, error) {
	if err := checkVoidRequest(req); err != nil {
		return provider.Charge{}, fmt.Errorf("stripeprovider: void: %w", err)
	}
	what := fmt.Sprintf("stripeprovider: void of %s with key %q", req.ChargeID, req.IdempotencyKey)
	if err := ctx.Err(); err != nil {
		return provider.Charge{}, fmt.Errorf("%s: %w: not sent: %w", what, provider.ErrUnavailable, err)
	}
	ctx, trace := withCallTrace(ctx)
	params := &stripe.PaymentIntentCancelParams{}
	if req.Reason != "" {
		params.CancellationReason = stripe.String(req.Reason)
	}
	params.Context = ctx
	params.IdempotencyKey = stripe.String(req.IdempotencyKey)

	pi, err := p.intents.Cancel(req.ChargeID, params)
	if err != nil {
		if se, ok := refusal(err); ok && se.Code == stripe.ErrorCodePaymentIntentUnexpectedState {
			ch, err := p.chargeOfError(se, req.ChargeID)
			if err != nil {
				return provider.Charge{}, fmt.Errorf("%s: %w", what, err)
			}
			switch code := unexpectedState(se, req.ChargeID); code {
			case declineChargeCanceled:
				// Voided already: the void's end holds.
				ch.Status = provider.StatusCanceled
			default:
				ch.Status, ch.DeclineCode = provider.StatusDeclined, code
			}
			return ch, nil
		}
		return provider.Charge{}, fmt.Errorf("%s: %w", what, classify(err, trace))
	}
	ch, err := p.actionAnswer(pi, req.ChargeID, stripe.PaymentIntentStatusCanceled)
	if err != nil {
		return provider.Charge{}, fmt.Errorf("%s: %w", what, err)
	}
	return ch, nil
}

// LookupCapture reads the PaymentIntent l.ChargeID: Stripe keeps no record
// of a capture it refused (the PaymentIntent stays requires_capture), so a
// PaymentIntent captured is the capture found, and any other one is
// provider.ErrNotFound (the caller reads the charge for the rest).
func (p *Provider) LookupCapture(ctx context.Context, l provider.ActionLookup) (provider.Charge, error) {
	ch, err := p.GetCharge(ctx, l.ChargeID)
	switch {
	case err != nil:
		return provider.Charge{}, err
	case ch.Status != provider.StatusSucceeded:
		return provider.Charge{}, fmt.Errorf("stripeprovider: capture lookup of %s: %w: the PaymentIntent is not captured", l.ChargeID, provider.ErrNotFound)
	}
	return ch, nil
}

// GetCharge retrieves the PaymentIntent chargeID as it stands. See the
// package documentation for errors.
func (p *Provider) GetCharge(ctx context.Context, chargeID string) (provider.Charge, error) {
	if chargeID == "" {
		return provider.Charge{}, errors.New("stripeprovider: get charge: empty charge id")
	}
	what := "stripeprovider: get charge " + chargeID
	if err := ctx.Err(); err != nil {
		return provider.Charge{}, fmt.Errorf("%s: %w: not sent: %w", what, provider.ErrUnavailable, err)
	}
	ctx, trace := withCallTrace(ctx)
	params := &stripe.PaymentIntentParams{}
	params.Context = ctx
	pi, err := p.intents.Get(chargeID, params)
	if err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound && se.Code == stripe.ErrorCodeResourceMissing {
			return provider.Charge{}, fmt.Errorf("%s: %w: %w", what, provider.ErrNotFound, apiErrorFromStripe(se))
		}
		return provider.Charge{}, fmt.Errorf("%s: %w", what, classify(err, trace))
	}
	if pi != nil && pi.ID != "" && pi.ID != chargeID {
		return provider.Charge{}, fmt.Errorf("%s: %w: the answer is PaymentIntent %s", what, provider.ErrUnknownOutcome, pi.ID)
	}
	ch, err := p.chargeFromIntent(pi, intentKey(pi))
	if err != nil {
		return provider.Charge{}, fmt.Errorf("%s: %w", what, err)
	}
	return ch, nil
}

// refusal returns the Stripe error of an answer that refuses the request
// itself (HTTP 400 or 402): Stripe did what it answers, nothing.
func refusal(err error) (*stripe.Error, bool) {
	var se *stripe.Error
	if errors.As(err, &se) && (se.HTTPStatusCode == http.StatusBadRequest || se.HTTPStatusCode == http.StatusPaymentRequired) {
		return se, true
	}
	return nil, false
}

// unexpectedState names what a payment_intent_unexpected_state error says
// of the PaymentIntent chargeID when it carries it: canceled, captured, or
// else (or when it carries none) the error's code.
func unexpectedState(se *stripe.Error, chargeID string) string {
	if pi := se.PaymentIntent; pi != nil && (pi.ID == "" || pi.ID == chargeID) {
		switch pi.Status {
		case stripe.PaymentIntentStatusCanceled:
			return declineChargeCanceled
		case stripe.PaymentIntentStatusSucceeded:
			return declineChargeAlreadyCaptured
		}
	}
	return string(se.Code)
}

// chargeOfError is the charge chargeID as an error answer shows it: the
// PaymentIntent it carries when that is the one, else only the id.
func (p *Provider) chargeOfError(se *stripe.Error, chargeID string) (provider.Charge, error) {
	pi := se.PaymentIntent
	if pi == nil || (pi.ID != "" && pi.ID != chargeID) {
		return provider.Charge{ID: chargeID}, nil
	}
	ch, err := p.intentAmounts(pi)
	if err != nil {
		return provider.Charge{}, err
	}
	ch.ID, ch.IdempotencyKey = chargeID, intentKey(pi)
	if pi.Status != stripe.PaymentIntentStatusSucceeded {
		ch.AmountCapturedMinor = 0
	}
	return ch, nil
}

// actionAnswer maps the PaymentIntent that a capture or void of chargeID
// answered with 200: it must be that one, in status done; anything else
// leaves the outcome unknown.
func (p *Provider) actionAnswer(pi *stripe.PaymentIntent, chargeID string, done stripe.PaymentIntentStatus) (provider.Charge, error) {
	if pi != nil && pi.ID != "" && pi.ID != chargeID {
		return provider.Charge{}, fmt.Errorf("%w: the answer is PaymentIntent %s", provider.ErrUnknownOutcome, pi.ID)
	}
	ch, err := p.chargeFromIntent(pi, intentKey(pi))
	if err != nil {
		return provider.Charge{}, err
	}
	if pi.Status != done {
		return provider.Charge{}, fmt.Errorf("%w: PaymentIntent %s is %q, want %q", provider.ErrUnknownOutcome, pi.ID, pi.Status, done)
	}
	// A canceled PaymentIntent made without capture_method=manual maps to
	// a declined charge; voided, it is canceled whatever it was made with.
	if done == stripe.PaymentIntentStatusCanceled {
		ch.Status, ch.DeclineCode = provider.StatusCanceled, ""
	}
	return ch, nil
}

// intentKey is the idempotency key the PaymentIntent was created with, as
// its metadata carries it.
func intentKey(pi *stripe.PaymentIntent) string {
	if pi == nil {
		return ""
	}
	return pi.Metadata[MetadataIdempotencyKey]
}

func checkCaptureRequest(req provider.CaptureRequest) error {
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
	}
	return nil
}

func checkVoidRequest(req provider.VoidRequest) error {
	if err := checkKey(req.IdempotencyKey); err != nil {
		return err
	}
	switch {
	case req.ChargeID == "":
		return errors.New("empty charge id")
	case !voidReasons[req.Reason]:
		return fmt.Errorf("reason %q: want requested_by_customer, duplicate, fraudulent or abandoned", req.Reason)
	}
	return nil
}
