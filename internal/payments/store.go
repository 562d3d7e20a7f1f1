package payments

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/cursor"
	"github.com/paymentsapi/paymentsapi/internal/refuse"
	"github.com/paymentsapi/paymentsapi/internal/rowset"
	"github.com/paymentsapi/paymentsapi/internal/sqlcond"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// This file holds every statement on the payments table (the state machine's
// guarded moves aside: package statemachine writes those).

// Querier is what the store needs from a pool or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// refuseReferenceHeld is queueInsertPayment's refusal: a live payment of the
// tenant holds the (account, merchant reference); its detail is that
// payment's id, or empty when the holder freed the reference between the
// conflict and the look (the caller tries again).
const refuseReferenceHeld refuse.Code = "PA101"

// queueInsertPayment adds to b the insert of p, in the initial state, unless
// a payment of the tenant that holds its (account, merchant reference)
// exists: then the statement refuses with refuseReferenceHeld, undoing the
// batch (the claim of the key with it). Insert and look are one statement,
// so a concurrent claim of the same reference waits for the first and then
// sees it. Queued after a claim, it neither inserts nor refuses unless the
// claim took its key (a claim.Statement).
//
// ON CONFLICT names no index, so every unique index of payments is an
// arbiter. A statement that named one index would get a unique violation
// (a 500) from any other unique index on the reference when two claims of
// one reference insert at the same moment. The only other unique index is
// the primary key: a conflict there is as good as impossible, and would be
// tried again like a holder that went away.
func queueInsertPayment(b *claim.Batch, p Payment) {
	c := p.Command
	if c.CaptureMethod == "" {
		c.CaptureMethod = CaptureAutomatic
	}
	b.Queue(insertPaymentIfClaimed.With(p.ID, p.TenantID, c.AccountID, c.AmountMinor, c.Currency, c.MerchantReference,
		c.PaymentMethod, c.Channel, c.Description, p.State, p.CreatedAt, c.CaptureMethod, p.FirstSentAt, p.LastSentAt,
		nullable(c.ReturnURL)))
}

// insertPaymentIfClaimed is queueInsertPayment's statement: the payment
// inserted, or, if a live payment of the tenant holds its reference, a
// refusal naming that payment. Its form over input rows (package rowset),
// for a group committer, inserts each row's payment or refuses for it.
var insertPaymentIfClaimed = claim.NewRows(`
	WITH inserted AS (
	    INSERT INTO payments
	        (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
	         payment_method, channel, description, state, created_at, updated_at, capture_method,
	         first_sent_at, last_sent_at, return_url)
	    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12, $13, $14, $15)
	    ON CONFLICT DO NOTHING
	    RETURNING id
	)
	SELECT `+refuse.Unless("EXISTS (SELECT FROM inserted)", refuseReferenceHeld,
	"'merchant reference held by another payment'",
	`COALESCE((SELECT p.id FROM payments p
	    WHERE p.tenant_id = $2 AND p.account_id = $3 AND p.merchant_reference = $6 AND p.`+holdsReference+`), '')`),
	[]rowset.Column{
		{Name: "id", Type: "text"}, {Name: "tenant_id", Type: "text"}, {Name: "account_id", Type: "text"},
		{Name: "amount_minor", Type: "bigint"}, {Name: "currency", Type: "text"}, {Name: "merchant_reference", Type: "text"},
		{Name: "payment_method", Type: "text"}, {Name: "channel", Type: "text"}, {Name: "description", Type: "text"},
		{Name: "state", Type: "text"}, {Name: "created_at", Type: "timestamptz"}, {Name: "capture_method", Type: "text"},
		{Name: "first_sent_at", Type: "timestamptz"}, {Name: "last_sent_at", Type: "timestamptz"},
		{Name: "return_url", Type: "text"},
	}, func(claimed string) string {
		return `, ins AS (
	    INSERT INTO payments
	        (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
	         payment_method, channel, description, state, created_at, updated_at, capture_method,
	         first_sent_at, last_sent_at, return_url)
	    SELECT id, tenant_id, account_id, amount_minor, currency, merchant_reference,
	           payment_method, channel, description, state, created_at, created_at, capture_method,
	           first_sent_at, last_sent_at, return_url
	    FROM input
	    WHERE ` + claimed + `
	    ORDER BY ord
	    ON CONFLICT DO NOTHING
	    RETURNING id
	)
	SELECT input.ord, ` + refuse.Unless(claim.Implies(claimed, "EXISTS (SELECT FROM ins WHERE ins.id = input.id)"), refuseReferenceHeld,
			"'merchant reference held by another payment'",
			`COALESCE((SELECT p.id FROM payments p
	    WHERE p.tenant_id = input.tenant_id AND p.account_id = input.account_id
	      AND p.merchant_reference = input.merchant_reference AND p.`+holdsReference+`), '')`) + `
	FROM input ORDER BY input.ord`
	})

// queueAuthorized adds to b the write of a payment's authorization expiry,
// with its move to StateAuthorized (queued before it by the flow).
func queueAuthorized(b *pgx.Batch, id string, expires time.Time) {
	b.Queue(`UPDATE payments SET authorization_expires_at = $2 WHERE id = $1 AND state = $3`, id, expires, StateAuthorized)
}

// nullable is s, or NULL when it is empty.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// queueNextAction adds to b the write of where payment id's customer
// authenticates, with its move to StateRequiresAction (queued before it by
// the flow).
func queueNextAction(b *pgx.Batch, id, url string) {
	b.Queue(`UPDATE payments SET next_action_url = $2 WHERE id = $1 AND state = $3`, id, url, StateRequiresAction)
}

// holdsReference is the predicate of the partial unique index
// payments_held_reference_key (migration 00015): the payments whose state
// keeps their merchant reference (State.HoldsReference). A trigger derives
// the column from the state, so that the moves of a payment that keep its
// reference (its whole happy path) change no indexed column and can be HOT
// updates (once the contract step drops payments_merchant_reference_key,
// whose predicate is on state). The look for the holder names it as written
// there, to read through that index.
const holdsReference = "holds_reference"

const paymentColumns = `id, tenant_id, account_id, amount_minor, currency, merchant_reference,
	payment_method, channel, description, state, COALESCE(provider_reference, ''),
	COALESCE(decline_code, ''), refunded_minor, created_at, updated_at, first_sent_at, last_sent_at,
	capture_method, captured_minor, authorization_expires_at, COALESCE(held_by, ''),
	COALESCE(return_url, ''), COALESCE(next_action_url, '')`

func scanPayment(row pgx.Row) (Payment, error) {
	var p Payment
	c := &p.Command
	err := row.Scan(&p.ID, &p.TenantID, &c.AccountID, &c.AmountMinor, &c.Currency,
		&c.MerchantReference, &c.PaymentMethod, &c.Channel, &c.Description, &p.State,
		&p.ProviderReference, &p.DeclineCode, &p.RefundedMinor, &p.CreatedAt, &p.UpdatedAt, &p.FirstSentAt, &p.LastSentAt,
		&c.CaptureMethod, &p.CapturedMinor, &p.AuthorizationExpiresAt, &p.HeldBy,
		&c.ReturnURL, &p.NextActionURL)
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, ErrNotFound
	}
	if err != nil {
		return Payment{}, fmt.Errorf("read payment: %w", err)
	}
	p.CreatedAt, p.UpdatedAt = p.CreatedAt.UTC(), p.UpdatedAt.UTC() // one rendering, whatever time.Local is
	return p, nil
}

// getPayment returns the tenant's payment id, or ErrNotFound (also when the
// payment belongs to another tenant).
func getPayment(ctx context.Context, q Querier, tenant, id string) (Payment, error) {
	return scanPayment(q.QueryRow(ctx, `SELECT `+paymentColumns+`
		FROM payments WHERE id = $1 AND tenant_id = $2`, id, tenant))
}

// getPaymentByID returns payment id, whatever its tenant, or ErrNotFound:
// for the customer's return, which no API key authenticates.
func getPaymentByID(ctx context.Context, q Querier, id string) (Payment, error) {
	return scanPayment(q.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE id = $1`, id))
}

// ExistingIDs is the query of which of the ids $1 (text[]) are payments'
// ids, of any tenant: the audit of the provider's charges (package
// orphans) asks it which charges our rows explain.
const ExistingIDs = `SELECT id FROM payments WHERE id = ANY($1)`

// countRecoveryStates counts, for the gauges, the payments whose outcome is
// unknown and that the reconciler has not given up on, and those it gave up
// on. Both are among the few keys that need recovery (an indexed set).
func countRecoveryStates(ctx context.Context, q Querier) (unknown, review int64, err error) {
	err = q.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE p.state = $1 AND k.manual_review_at IS NULL),
		       count(*) FILTER (WHERE k.manual_review_at IS NOT NULL)
		FROM idempotency_keys k JOIN payments p ON p.id = k.resource_id
		WHERE k.resource_type = $2 AND k.recovery_next_at IS NOT NULL AND k.response_status IS NULL`,
		StateUnknown, ResourceType).Scan(&unknown, &review)
	return unknown, review, err
}

// ListQuery selects a page of a tenant's payments, newest first: those that
// meet every filter it gives.
type ListQuery struct {
	AccountID         string    // optional: the account's payments
	MerchantReference string    // optional: those with this reference (normalised, as stored)
	Statuses          []Status  // optional: those in any of these statuses
	CreatedFrom       time.Time // optional: those created at or after it
	CreatedTo         time.Time // optional: those created before it
	// Currency (optional) keeps the payments in it; AmountMin and
	// AmountMax (optional, minor units of Currency, both included) keep
	// those whose amount lies in the range. An amount means nothing
	// without its currency, so a range comes with one.
	Currency             string
	AmountMin, AmountMax int64
	Limit                int
	// Cursor is opaque, from a previous Page; empty for the first page. It
	// is a position in the order of the listing, not a copy of its
	// filters: with other filters it means the payments that meet them
	// and come after that position.
	Cursor string
}

// Page is one page of a listing.
type Page struct {
	Items      []Payment
	NextCursor string // empty on the last page
}

// listQuery is the statement of one page of a listing, newest first: a
// backward scan of an index ordered by creation, bounded by the page and
// any creation range, with the other filters applied to the rows it finds.
// The tenant's (or the account's) listing index (migration 00026) serves
// every filter; a reference is looked up through the two reference indexes
// instead, and a status that frees the reference (DECLINED, CANCELED: rare,
// and final) through the listing index of those payments alone (migration
// 00045). docs/INDEXES.md says what each costs; TestFiltersReadThroughAnIndex
// holds the plans to it.
func listQuery(tenant string, lq ListQuery) (string, []any, error) {
	var where sqlcond.Where
	where.Add("tenant_id = $%d", tenant)
	if lq.AccountID != "" {
		where.Add("account_id = $%d", lq.AccountID)
	}
	if lq.MerchantReference != "" {
		where.Add("merchant_reference = $%d", lq.MerchantReference)
	}
	if len(lq.Statuses) > 0 {
		where.Add("state = ANY($%d::text[])", stateNames(lq.Statuses))
	}
	if cond := heldCondition(lq); cond != "" {
		where.Add(cond)
	}
	if lq.Currency != "" {
		where.Add("currency = $%d", lq.Currency)
	}
	if lq.AmountMin > 0 {
		where.Add("amount_minor >= $%d", lq.AmountMin)
	}
	if lq.AmountMax > 0 {
		where.Add("amount_minor <= $%d", lq.AmountMax)
	}
	if !lq.CreatedFrom.IsZero() {
		where.Add("created_at >= $%d", lq.CreatedFrom)
	}
	if !lq.CreatedTo.IsZero() {
		where.Add("created_at < $%d", lq.CreatedTo)
	}
	if lq.Cursor != "" {
		at, id, err := decodeCursor(lq.Cursor)
		if err != nil {
			return "", nil, err
		}
		where.Add("(created_at, id) < ($%d, $%d)", at, id)
	}
	limit := where.Arg(lq.Limit + 1)
	return `SELECT ` + paymentColumns + ` FROM payments
		WHERE ` + where.String() + `
		ORDER BY created_at DESC, id DESC LIMIT $` + fmt.Sprint(limit), where.Args(), nil
}

// heldCondition is the condition on holds_reference that a listing adds so
// that PostgreSQL may read through the partial indexes, whose predicates
// are on that column (it uses a partial index only for a query that
// implies its predicate): "NOT holds_reference" when every status asked
// for frees the reference; for a reference, whichever half of the payments
// the statuses asked for fall in, or both halves spelled out, each read
// through its own reference index and the two combined (a BitmapOr).
// The condition follows from the others, so it changes no answer.
func heldCondition(lq ListQuery) string {
	holding, freeing := false, false
	for _, st := range lq.Statuses {
		for _, s := range st.States() {
			holding = holding || s.HoldsReference()
			freeing = freeing || !s.HoldsReference()
		}
	}
	switch {
	case freeing && !holding:
		return "NOT " + holdsReference
	case lq.MerchantReference == "":
		return ""
	case holding && !freeing:
		return holdsReference
	}
	return "(" + holdsReference + " OR NOT " + holdsReference + ")"
}

// stateNames are the states of statuses, as the column holds them.
func stateNames(statuses []Status) []string {
	var names []string
	for _, st := range statuses {
		for _, s := range st.States() {
			names = append(names, string(s))
		}
	}
	return names
}

func listPayments(ctx context.Context, q Querier, tenant string, lq ListQuery) (Page, error) {
	sql, args, err := listQuery(tenant, lq)
	if err != nil {
		return Page{}, err
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return Page{}, fmt.Errorf("list payments: %w", err)
	}
	defer rows.Close()
	var page Page
	for rows.Next() {
		p, err := scanPayment(rows)
		if err != nil {
			return Page{}, err
		}
		page.Items = append(page.Items, p)
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("list payments: %w", err)
	}
	if len(page.Items) > lq.Limit {
		page.Items = page.Items[:lq.Limit]
		last := page.Items[lq.Limit-1]
		page.NextCursor = encodeCursor(last.CreatedAt, last.ID)
	}
	return page, nil
}

func encodeCursor(at time.Time, id string) string { return cursor.Encode(at, id) }

func decodeCursor(s string) (time.Time, string, error) {
	at, id, err := cursor.Decode(s, func(id string) bool { return strings.HasPrefix(id, "pay_") && validate.StorableText(id) })
	if err != nil {
		return time.Time{}, "", ErrInvalidCursor
	}
	return at, id, nil
}
