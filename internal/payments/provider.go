package payments

import (
	"context"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/providerflow"
)

// charge asks the provider to charge p, with the key derived from p.
func (s *Service) charge(ctx context.Context, p Payment) (providerflow.Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ProviderTimeout)
	defer cancel()
	start := time.Now()
	c, err := s.provider.Charge(ctx, provider.ChargeRequest{
		IdempotencyKey: ProviderKey(p.ID),
		AmountMinor:    p.Command.AmountMinor,
		Currency:       p.Command.Currency,
		PaymentMethod:  p.Command.PaymentMethod,
		Description:    p.Command.Description,
		PaymentID:      p.ID,
	})
	s.observe("charge", start, c.Status, err)
	return answer(c), err
}

// lookup asks the provider what became of p's key.
func (s *Service) lookup(ctx context.Context, p Payment) (providerflow.Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ProviderTimeout)
	defer cancel()
	start := time.Now()
	c, err := s.provider.Lookup(ctx, ProviderKey(p.ID))
	s.observe("lookup", start, c.Status, err)
	return answer(c), err
}

func answer(c provider.Charge) providerflow.Answer {
	return providerflow.Answer{ID: c.ID, Status: c.Status, DeclineCode: c.DeclineCode}
}

// observe records one provider call in the provider metric.
func (s *Service) observe(op string, start time.Time, status provider.Status, err error) {
	s.metrics.ProviderCalls.WithLabelValues(op, provider.Outcome(status, err)).Observe(time.Since(start).Seconds())
}
