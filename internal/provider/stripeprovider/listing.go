package stripeprovider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

var _ provider.Listing = (*Provider)(nil)

// maxListPages bounds a listing of the audit (ListCharges, ListRefunds):
// 100,000 objects, three days of a busy account. Past it the listing is an
// error, never a shorter list that would hide an orphan.
const maxListPages = 1000

// page is one page of a Stripe listing, as readPages reads it: its
// iterator, and the raw answer it was read from.
type page struct {
	it   *stripe.Iter
	last func() *stripe.APIResponse
}

// readPages reads a Stripe listing of kind (PaymentIntents, refunds) page
// by page, at most maxPages of pageSize: open requests the page after the
// entry `after` ("" the first), and visit is handed each entry and returns
// its id, or an error that ends the listing. A listing is only ever
// complete or an error: an entry without an id, an answer that is no list,
// a page that says there are more but lists none, or more pages than
// maxPages all fail it with ErrUnknownOutcome, so that no caller reads
// "not there" from a listing it did not finish.
func readPages(ctx context.Context, kind string, maxPages, pageSize int,
	open func(ctx context.Context, after string) page, visit func(entry any) (id string, err error)) error {
	after := ""
	for range maxPages {
		ctx, trace := withCallTrace(ctx)
		pg := open(ctx, after)
		read := 0
		for pg.it.Next() {
			read++
			id, err := visit(pg.it.Current())
			if err != nil {
				return err
			}
			if id == "" {
				// A page is read whole before Next returns; there is no
				// request to abandon.
				return fmt.Errorf("%w: the listing holds an entry without an id", provider.ErrUnknownOutcome)
			}
			after = id
		}
		if err := pg.it.Err(); err != nil {
			return classify(err, trace)
		}
		if err := checkListAnswer(pg.last(), "list"); err != nil {
			return err
		}
		switch {
		case !pg.it.Meta().HasMore:
			return nil
		case read == 0:
			return fmt.Errorf("%w: a page says there are more %s but lists none", provider.ErrUnknownOutcome, kind)
		}
	}
	return fmt.Errorf("%w: more than %d %s, not all read", provider.ErrUnknownOutcome, maxPages*pageSize, kind)
}

// intentPages opens the pages of the PaymentIntents created at or after
// since (to the second, rounded down, as Stripe dates them).
func (p *Provider) intentPages(since time.Time) func(ctx context.Context, after string) page {
	return func(ctx context.Context, after string) page {
		params := &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}}
		params.Context = ctx
		params.Limit = stripe.Int64(intentPageSize)
		params.Single = true
		if after != "" {
			params.StartingAfter = stripe.String(after)
		}
		it := p.intents.List(params)
		return page{it: it.Iter, last: func() *stripe.APIResponse { return it.PaymentIntentList().LastResponse }}
	}
}

// refundPages opens the pages of the refunds that params select.
func (p *Provider) refundPages(params stripe.RefundListParams) func(ctx context.Context, after string) page {
	return func(ctx context.Context, after string) page {
		params := params
		params.Context = ctx
		params.Limit = stripe.Int64(refundPageSize)
		params.Single = true
		if after != "" {
			params.StartingAfter = stripe.String(after)
		}
		it := p.refunds.List(&params)
		return page{it: it.Iter, last: func() *stripe.APIResponse { return it.RefundList().LastResponse }}
	}
}

// ListCharges lists the PaymentIntents created at or after since, each
// with the idempotency key its metadata carries ("" for one this service
// did not create) and its creation time, mapped as Charge maps its answer
// (requires_action with its NextActionURL). A PaymentIntent whose status
// the service does not settle on (processing, requires_confirmation, ...)
// is listed with Stripe's status as it is: the audit asks whether it
// exists, not how it ended.
func (p *Provider) ListCharges(ctx context.Context, since time.Time) ([]provider.Charge, error) {
	var out []provider.Charge
	err := readPages(ctx, "PaymentIntents", maxListPages, intentPageSize, p.intentPages(since), func(entry any) (string, error) {
		pi, _ := entry.(*stripe.PaymentIntent)
		if pi == nil {
			return "", nil
		}
		key := pi.Metadata[MetadataIdempotencyKey]
		ch, err := p.chargeFromIntent(pi, key)
		if err != nil {
			// An amount that does not read fails the listing: the
			// audit lists in the service's unit or not at all.
			if ch, err = p.intentAmounts(pi); err != nil {
				return "", err
			}
			ch.ID, ch.IdempotencyKey, ch.Status, ch.AmountCapturedMinor = pi.ID, key, provider.Status(pi.Status), 0
		}
		ch.CreatedAt = time.Unix(pi.Created, 0).UTC()
		out = append(out, ch)
		return pi.ID, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListRefunds lists the Refunds created at or after since, as ListCharges
// lists PaymentIntents; a refund's ChargeID is its PaymentIntent.
func (p *Provider) ListRefunds(ctx context.Context, since time.Time) ([]provider.Refund, error) {
	var out []provider.Refund
	params := stripe.RefundListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}}
	err := readPages(ctx, "refunds", maxListPages, refundPageSize, p.refundPages(params), func(entry any) (string, error) {
		rf, _ := entry.(*stripe.Refund)
		if rf == nil {
			return "", nil
		}
		key, chargeID := rf.Metadata[MetadataIdempotencyKey], ""
		if rf.PaymentIntent != nil {
			chargeID = rf.PaymentIntent.ID
		}
		r, err := p.refundFromStripe(rf, key, chargeID)
		if err != nil {
			r = provider.Refund{ID: rf.ID, IdempotencyKey: key, ChargeID: chargeID, Status: provider.Status(rf.Status),
				Currency: strings.ToUpper(string(rf.Currency))}
			if r.AmountMinor, err = p.rules.FromProvider(rf.Amount, r.Currency); err != nil {
				return "", fmt.Errorf("Refund %s: %w", rf.ID, err)
			}
		}
		r.CreatedAt = time.Unix(rf.Created, 0).UTC()
		out = append(out, r)
		return rf.ID, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
