package simclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

var _ provider.Listing = (*Client)(nil)

// ListCharges returns the charges the simulator created at or after since
// (GET /_sim/charges?since=), each with its key and creation time. A
// listing larger than the client reads of an answer (maxResponse) is an
// error, never a shorter list.
func (c *Client) ListCharges(ctx context.Context, since time.Time) ([]provider.Charge, error) {
	var body struct {
		Charges []struct {
			chargeBody
			CreatedAt time.Time `json:"createdAt"`
		} `json:"charges"`
	}
	if err := c.list(ctx, "/_sim/charges", since, &body); err != nil {
		return nil, fmt.Errorf("simclient: list charges: %w", err)
	}
	out := make([]provider.Charge, 0, len(body.Charges))
	for _, cb := range body.Charges {
		ch, err := c.charge(cb.chargeBody)
		if err != nil {
			return nil, fmt.Errorf("simclient: list charges: %w", err)
		}
		ch.CreatedAt = cb.CreatedAt
		out = append(out, ch)
	}
	return out, nil
}

// ListRefunds returns the refunds the simulator created at or after since
// (GET /_sim/refunds?since=), as ListCharges does charges.
func (c *Client) ListRefunds(ctx context.Context, since time.Time) ([]provider.Refund, error) {
	var body struct {
		Refunds []struct {
			refundBody
			CreatedAt time.Time `json:"createdAt"`
		} `json:"refunds"`
	}
	if err := c.list(ctx, "/_sim/refunds", since, &body); err != nil {
		return nil, fmt.Errorf("simclient: list refunds: %w", err)
	}
	out := make([]provider.Refund, 0, len(body.Refunds))
	for _, rb := range body.Refunds {
		r, err := c.refund(rb.refundBody)
		if err != nil {
			return nil, fmt.Errorf("simclient: list refunds: %w", err)
		}
		r.CreatedAt = rb.CreatedAt
		out = append(out, r)
	}
	return out, nil
}

// list reads the simulator's listing at path from since into v.
func (c *Client) list(ctx context.Context, path string, since time.Time, v any) error {
	b, err := c.get(ctx, path, url.Values{"since": {since.UTC().Format(time.RFC3339Nano)}})
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: malformed listing: %w", provider.ErrUnknownOutcome, err)
	}
	return nil
}
