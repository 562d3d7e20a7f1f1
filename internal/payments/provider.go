package payments

import (
	"context"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/providerflow"
)

// inFlow is payment p as the provider flow takes it: the flow's
// providerflow.Operation, whose Send charges it.
type inFlow struct {
	s *Service
	p Payment
}

// Send asks the provider to charge the payment, with the key derived from
// it.
func (f inFlow) Send(ctx context.Context) (providerflow.Answer, error) {
	p := f.p
	c, err := f.s.d.Provider.Charge(ctx, provider.ChargeRequest{
		IdempotencyKey: ProviderKey(p.ID),
		AmountMinor:    p.Command.AmountMinor,
		Currency:       p.Command.Currency,
		PaymentMethod:  p.Command.PaymentMethod,
		Description:    p.Command.Description,
		PaymentID:      p.ID,
		CaptureManual:  p.Command.CaptureMethod == CaptureManual,
		ReturnURL:      f.s.returnRoute(p.ID),
	})
	return answer(p, c), err
}

// clockSkewMargin is how long before the payment's CreatedAt a lookup asks
// the provider to look from (ChargeLookup.NotBefore). CreatedAt is read from
// our clock before the first charge request is sent, but the provider dates
// the charge on its own clock (Stripe to the whole second, rounded down): if
// our clock runs ahead of the provider's by d, the charge can look up to d
// older than the payment. A charge dated before NotBefore could be missed and
// reported as not found, which is the one wrong answer; a wider margin only
// makes a provider that lists charges by creation time read more of them
// (and, past its page limit, answer "unknown", never "not found"). An hour is
// far beyond the skew of any host whose clock is kept by NTP.
const clockSkewMargin = time.Hour

// Lookup asks the provider what became of the payment's key.
func (f inFlow) Lookup(ctx context.Context) (providerflow.Answer, error) {
	p := f.p
	c, err := f.s.d.Provider.Lookup(ctx, provider.ChargeLookup{
		IdempotencyKey: ProviderKey(p.ID),
		NotBefore:      p.CreatedAt.Add(-clockSkewMargin),
	})
	return answer(p, c), err
}

// answer is what the provider said of p's charge, as the flow reads it: for
// a manual payment, an authorization is its success (the manual flow's
// Succeeded is StateAuthorized), and an authorization the provider voided
// before we knew of it moved no money: a decline. Its amount is the
// charge's, which the flow holds to the payment's.
func answer(p Payment, c provider.Charge) providerflow.Answer {
	a := providerflow.Answer{ID: c.ID, Status: c.Status, DeclineCode: c.DeclineCode, AmountMinor: c.AmountMinor,
		NextActionURL: c.NextActionURL}
	if p.Command.CaptureMethod == CaptureManual {
		switch c.Status {
		case provider.StatusAuthorized:
			a.Status = provider.StatusSucceeded
		case provider.StatusCanceled:
			a.Status, a.DeclineCode = provider.StatusDeclined, "authorization_canceled"
		}
	}
	return a
}
