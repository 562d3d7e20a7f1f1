package payments

import (
	"context"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/providerflow"
)

// charge asks the provider to charge p, with the key derived from p.
func (s *Service) charge(ctx context.Context, p Payment) (providerflow.Answer, error) {
	c, err := s.provider.Charge(ctx, provider.ChargeRequest{
		IdempotencyKey: ProviderKey(p.ID),
		AmountMinor:    p.Command.AmountMinor,
		Currency:       p.Command.Currency,
		PaymentMethod:  p.Command.PaymentMethod,
		Description:    p.Command.Description,
		PaymentID:      p.ID,
	})
	return answer(c), err
}

// lookup asks the provider what became of p's key.
func (s *Service) lookup(ctx context.Context, p Payment) (providerflow.Answer, error) {
	c, err := s.provider.Lookup(ctx, ProviderKey(p.ID))
	return answer(c), err
}

func answer(c provider.Charge) providerflow.Answer {
	return providerflow.Answer{ID: c.ID, Status: c.Status, DeclineCode: c.DeclineCode}
}
