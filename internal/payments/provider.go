package payments

import (
	"context"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// charge asks the provider to charge p, with the key derived from p.
func (s *Service) charge(ctx context.Context, p Payment) (provider.Charge, error) {
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
	return c, err
}

// lookup asks the provider what became of p's key.
func (s *Service) lookup(ctx context.Context, p Payment) (provider.Charge, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ProviderTimeout)
	defer cancel()
	start := time.Now()
	c, err := s.provider.Lookup(ctx, ProviderKey(p.ID))
	s.observe("lookup", start, c.Status, err)
	return c, err
}

// observe records one provider call in the provider metric.
func (s *Service) observe(op string, start time.Time, status provider.Status, err error) {
	s.metrics.ProviderCalls.WithLabelValues(op, provider.Outcome(status, err)).Observe(time.Since(start).Seconds())
}
