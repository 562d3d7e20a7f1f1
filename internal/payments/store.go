package payments

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Errors returned by the store.
var (
	// ErrNotFound: no such payment for this tenant.
	ErrNotFound = errors.New("payment not found")
	// ErrStaleWrite: a guarded update found the payment no longer in the
	// expected state, or the writer's fencing token no longer current.
	ErrStaleWrite = errors.New("payment changed since it was read, or its key was taken over")
)

// Querier is what the store needs from a pool or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// merchantReferenceConstraint is the partial unique index on
// (tenant_id, account_id, merchant_reference) of live payments.
const merchantReferenceConstraint = "payments_merchant_reference_key"

// queueInsert adds the insert of a new payment in StateReceived, and its first
// transition, to b.
func queueInsert(b *pgx.Batch, p Payment, reason string) {
	c := p.Command
	b.Queue(`
		INSERT INTO payments
		    (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
		     payment_method, channel, description, state, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)`,
		p.ID, p.TenantID, c.AccountID, c.AmountMinor, c.Currency, c.MerchantReference,
		c.PaymentMethod, c.Channel, c.Description, p.State, p.CreatedAt)
	b.Queue(`
		INSERT INTO payment_transitions (payment_id, from_state, to_state, reason, occurred_at)
		VALUES ($1, NULL, $2, $3, $4)`, p.ID, p.State, reason, p.CreatedAt)
}

// Transition is one move of the state machine, made by the owner of the
// payment's idempotency key.
type Transition struct {
	PaymentID string
	From, To  State
	Token     int64 // the writer's fencing token
	Reason    string
	At        time.Time
	// Set with To == StateCompleted or StateDeclined.
	ProviderReference string
	DeclineCode       string
}

// queueTransition adds t to b as one guarded statement: the payment moves
// only if it is still in t.From, t.Token is still its key's fencing token,
// and the state machine allows the move; the move is recorded in
// payment_transitions. Otherwise the batch fails with ErrStaleWrite. A move
// the state machine does not allow is refused before anything is sent.
func queueTransition(b *pgx.Batch, t Transition) error {
	if !CanTransition(t.From, t.To) {
		return ErrIllegalTransition{From: t.From, To: t.To}
	}
	queueGuardedUpdate(b, t)
	return nil
}

// queueGuardedUpdate is the statement behind queueTransition. It locks the
// key row, then the payment row: the order every writer uses. The allowed
// (from, to) pairs travel with it, from the one table in state.go, so the
// database refuses an illegal move even if a caller skipped the check.
func queueGuardedUpdate(b *pgx.Batch, t Transition) {
	froms, tos := allowedPairs()
	b.Queue(`
		WITH owner AS (
		    -- Lock the key row first: the token is checked on its latest
		    -- version, so a takeover committed meanwhile fences us out.
		    SELECT payment_id FROM idempotency_keys
		    WHERE payment_id = $1 AND fencing_token = $4
		    FOR UPDATE
		), moved AS (
		    UPDATE payments p
		    SET state = $3, updated_at = $5,
		        provider_reference = COALESCE(NULLIF($6, ''), p.provider_reference),
		        decline_code = COALESCE(NULLIF($7, ''), p.decline_code)
		    FROM owner
		    WHERE p.id = owner.payment_id AND p.state = $2
		      AND ($2, $3) IN (SELECT * FROM unnest($9::text[], $10::text[]))
		    RETURNING p.id
		)
		INSERT INTO payment_transitions (payment_id, from_state, to_state, reason, occurred_at)
		SELECT id, $2, $3, $8, $5 FROM moved`,
		t.PaymentID, t.From, t.To, t.Token, t.At, t.ProviderReference, t.DeclineCode, t.Reason,
		froms, tos,
	).Exec(func(tag pgconn.CommandTag) error {
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%s -> %s of %s: %w", t.From, t.To, t.PaymentID, ErrStaleWrite)
		}
		return nil
	})
}

const paymentColumns = `id, tenant_id, account_id, amount_minor, currency, merchant_reference,
	payment_method, channel, description, state, COALESCE(provider_reference, ''),
	COALESCE(decline_code, ''), created_at, updated_at`

func scanPayment(row pgx.Row) (Payment, error) {
	var p Payment
	c := &p.Command
	err := row.Scan(&p.ID, &p.TenantID, &c.AccountID, &c.AmountMinor, &c.Currency,
		&c.MerchantReference, &c.PaymentMethod, &c.Channel, &c.Description, &p.State,
		&p.ProviderReference, &p.DeclineCode, &p.CreatedAt, &p.UpdatedAt)
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

// liveByMerchantReference returns the id of the tenant's payment that holds
// (account, reference), or ErrNotFound.
func liveByMerchantReference(ctx context.Context, q Querier, tenant, account, ref string) (string, error) {
	var id string
	err := q.QueryRow(ctx, `
		SELECT id FROM payments
		WHERE tenant_id = $1 AND account_id = $2 AND merchant_reference = $3 AND state <> 'DECLINED'`,
		tenant, account, ref).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("find payment by merchant reference: %w", err)
	}
	return id, nil
}

// ListQuery selects a page of a tenant's payments, newest first.
type ListQuery struct {
	AccountID string // optional filter
	Limit     int
	Cursor    string // opaque, from a previous Page; empty for the first page
}

// Page is one page of a listing.
type Page struct {
	Items      []Payment
	NextCursor string // empty on the last page
}

// ErrInvalidCursor: the cursor was not produced by this API.
var ErrInvalidCursor = errors.New("invalid cursor")

func listPayments(ctx context.Context, q Querier, tenant string, lq ListQuery) (Page, error) {
	var (
		where = []string{"tenant_id = $1"}
		args  = []any{tenant}
	)
	if lq.AccountID != "" {
		args = append(args, lq.AccountID)
		where = append(where, fmt.Sprintf("account_id = $%d", len(args)))
	}
	if lq.Cursor != "" {
		at, id, err := decodeCursor(lq.Cursor)
		if err != nil {
			return Page{}, err
		}
		args = append(args, at, id)
		where = append(where, fmt.Sprintf("(created_at, id) < ($%d, $%d)", len(args)-1, len(args)))
	}
	args = append(args, lq.Limit+1)
	rows, err := q.Query(ctx, `SELECT `+paymentColumns+` FROM payments
		WHERE `+strings.Join(where, " AND ")+`
		ORDER BY created_at DESC, id DESC LIMIT $`+fmt.Sprint(len(args)), args...)
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

func encodeCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + "|" + id))
}

func decodeCursor(s string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, "", ErrInvalidCursor
	}
	ts, id, ok := strings.Cut(string(raw), "|")
	if !ok || !strings.HasPrefix(id, "pay_") {
		return time.Time{}, "", ErrInvalidCursor
	}
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}, "", ErrInvalidCursor
	}
	return at, id, nil
}
