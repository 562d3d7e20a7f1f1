package payouts_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/paymentsapi/paymentsapi/examples/payouts"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// The destinations that make the bank answer each way, as the simulator's
// test payment methods do for charges.
const (
	toBank        = "ba_test_ok"          // paid
	toClosed      = "ba_test_closed"      // declined: account_closed
	toSlowBank    = "ba_test_slow"        // paid after slowFor
	toLostAnswer  = "ba_test_lost_answer" // paid, but the answer is lost
	toUnavailable = "ba_test_unavailable" // refused before anything happened
)

// slowFor is how long toSlowBank holds a payout: longer than the contract's
// wait for the key to be claimed.
const slowFor = 2 * time.Second

// bank is the provider's payout service, in memory: idempotent per key, its
// answer chosen by the destination, with counts of the calls per key.
type bank struct {
	mu      sync.Mutex
	held    map[string]payouts.ProviderAnswer
	payouts map[string]int
	lookups map[string]int
}

func newBank() *bank {
	return &bank{held: map[string]payouts.ProviderAnswer{}, payouts: map[string]int{}, lookups: map[string]int{}}
}

func (b *bank) Payout(ctx context.Context, req payouts.ProviderRequest) (payouts.ProviderAnswer, error) {
	b.mu.Lock()
	b.payouts[req.IdempotencyKey]++
	if t, ok := b.held[req.IdempotencyKey]; ok {
		b.mu.Unlock()
		return t, nil
	}
	paid := payouts.ProviderAnswer{ID: "tr_" + strconv.Itoa(len(b.held)+1), Status: provider.StatusSucceeded, AmountMinor: req.AmountMinor}
	switch req.Destination {
	case toUnavailable:
		b.mu.Unlock()
		return payouts.ProviderAnswer{}, fmt.Errorf("%w: the bank is down", provider.ErrUnavailable)
	case toClosed:
		paid.Status, paid.DeclineCode = provider.StatusDeclined, "account_closed"
	case toLostAnswer:
		b.held[req.IdempotencyKey] = paid
		b.mu.Unlock()
		return payouts.ProviderAnswer{}, fmt.Errorf("%w: timeout", provider.ErrUnknownOutcome)
	case toSlowBank:
		b.mu.Unlock()
		select {
		case <-time.After(slowFor):
		case <-ctx.Done():
			return payouts.ProviderAnswer{}, fmt.Errorf("%w: %w", provider.ErrUnknownOutcome, ctx.Err())
		}
		b.mu.Lock()
	}
	b.held[req.IdempotencyKey] = paid
	b.mu.Unlock()
	return paid, nil
}

func (b *bank) LookupPayout(_ context.Context, key string) (payouts.ProviderAnswer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lookups[key]++
	if t, ok := b.held[key]; ok {
		return t, nil
	}
	return payouts.ProviderAnswer{}, fmt.Errorf("%w: no payout for %s", provider.ErrNotFound, key)
}

// calls returns the payouts and lookups of payout id's key.
func (b *bank) calls(id string) (sent, looked int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.payouts[payouts.ProviderKey(id)], b.lookups[payouts.ProviderKey(id)]
}

// withPayouts is the service's provider with the payout port added: the
// way a provider adapter that pays out offers the port.
type withPayouts struct {
	provider.Provider
	*bank
}

var _ payouts.Port = withPayouts{}
