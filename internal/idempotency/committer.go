package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/groupcommit"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/rowset"
)

// A committer runs the engine's two kinds of transaction: a request's
// claim, and each step of a key's owner. There are two, passing the same
// tests:
//
//   - inline (CommitInline): each transaction on its own, as it is written.
//     This is the one to read first: the claim is an INSERT ... ON
//     CONFLICT DO NOTHING, then, only if it took the key, the statements
//     that create the resource;
//   - grouped (CommitGroup): the transactions of concurrent requests that
//     would wait for a free connection are committed together, one commit
//     for many, and like statements are merged into one over many rows
//     (packages groupcommit and rowset). Faster under load, and harder to
//     read: the claim and what follows it go in one round trip, so each
//     statement after the claim tests whether it took its key (package
//     claim).
type committer interface {
	// claim inserts k's record and, only if that took the key, what create
	// queues, in one transaction. It returns the record's id, or 0 when
	// the key was taken already (a retry). order is the key's place in a
	// group's order of locks (lockOrder).
	claim(ctx context.Context, order uint64, k newKey, create func(*claim.Batch)) (int64, error)
	// commit runs b, an owner's step, as one transaction.
	commit(ctx context.Context, order uint64, b *pgx.Batch) error
	// likelyTaken reports whether the key of scope was seen taken lately,
	// so that a request reads its record before it tries a claim: a hint,
	// never an answer.
	likelyTaken(scope Scope) bool
}

// Commit modes (COMMIT_MODE).
const (
	CommitInline = "inline"
	CommitGroup  = "group"
)

// newKey is a claim's row: the key's scope and command, the resource it
// creates, its first lease and when the reconciler first looks at it
// (nil: not before an owner books a look).
type newKey struct {
	scope       Scope
	fingerprint []byte
	resource    Resource
	createdAt   time.Time
	leaseUntil  time.Time
	firstLook   *time.Time
}

// args are k's values in the order of both claim statements' parameters.
func (k newKey) args() []any {
	return []any{k.scope.Tenant, k.scope.Operation, k.scope.Key, k.fingerprint, k.resource.Type, k.resource.ID,
		k.leaseUntil, k.createdAt, k.firstLook}
}

// claimSQL claims a key: the row inserted first is the lock. A concurrent
// claim of the same scope waits for the first transaction to end, then
// inserts nothing, and returns no row. ON CONFLICT names no index, so
// that every unique index on a scope is an arbiter (Renamed).
const claimSQL = `
	INSERT INTO idempotency_keys
	    (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
	     fencing_token, lease_expires_at, created_at, recovery_next_at)
	VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8, $9)
	ON CONFLICT DO NOTHING
	RETURNING id`

// inline commits each transaction on its own.
type inline struct{ db *pgxpool.Pool }

// claim is the request's first transaction, step by step: claim the key;
// if another request holds it, stop (the engine answers this one as a
// retry); else create the resource, and commit both.
func (c inline) claim(ctx context.Context, _ uint64, k newKey, create func(*claim.Batch)) (int64, error) {
	tx, err := c.db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op once committed

	var id int64
	err = tx.QueryRow(ctx, claimSQL, k.args()...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil // taken: a retry, which writes nothing
	}
	if err != nil {
		return 0, err
	}
	if create != nil {
		b := &pgx.Batch{}
		create(claim.Taken(b))
		// A statement that refuses (a rule of the operation broken) fails
		// the batch, and the rollback undoes the claim with it.
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return 0, err
		}
	}
	return id, tx.Commit(ctx)
}

// commit sends b in one round trip: a batch without BEGIN and COMMIT is one
// implicit transaction, all or nothing.
func (c inline) commit(ctx context.Context, _ uint64, b *pgx.Batch) error {
	return c.db.SendBatch(ctx, b).Close()
}

// likelyTaken is false: every request tries its claim first.
func (inline) likelyTaken(Scope) bool { return false }

// grouped commits the transactions of concurrent requests together: the
// claims' with the claims', the owners' steps with the owners' steps. Like
// is grouped with like because a claim's batch and an owner step's are
// different statements: a group of one kind is twice the size of a mixed
// one at the same commits per payment, and its batches are alike, so that
// like batches whose statements are all over input rows (package rowset)
// are merged, each statement sent once for all of them (a payment's claim
// and its settle are).
//
// It also remembers the scopes whose claim it sent lately (hints): a retry
// that reaches the instance that saw its key reads the record first, and
// is not sent a claim's batch whose every statement would do nothing.
type grouped struct {
	claims, steps *groupcommit.Committer
	hints         *hints
}

func newGrouped(db *pgxpool.Pool, m *metrics.Metrics, concurrency int) grouped {
	committer := func(kind string) *groupcommit.Committer {
		batches, merged := m.GroupCommitBatches.WithLabelValues(kind), m.GroupCommitMerged.WithLabelValues(kind)
		return groupcommit.New(db, groupcommit.Options{Concurrency: concurrency, Timeout: stepTimeout,
			Sent: func(n int) { batches.Observe(float64(n)) }, Merge: rowset.Many, Plain: rowset.IsPaired,
			Merged: func(n int) { merged.Add(float64(n)) }})
	}
	return grouped{claims: committer("claims"), steps: committer("steps"), hints: newHints()}
}

// claim sends the claim and what create queues in one batch: one round
// trip, one transaction. The batch does not read the key's record too: a
// new key, the common case, would pay for a read that finds nothing.
func (c grouped) claim(ctx context.Context, order uint64, k newKey, create func(*claim.Batch)) (int64, error) {
	var id int64
	b := &pgx.Batch{}
	queueGatingClaim(b, k, &id)
	if create != nil {
		create(claim.After(b))
	}
	if err := c.claims.Commit(ctx, order, b); err != nil {
		return 0, err
	}
	c.hints.add(c.hints.hash(k.scope)) // claimed now, or before: taken either way
	return id, nil
}

func (c grouped) commit(ctx context.Context, order uint64, b *pgx.Batch) error {
	return c.steps.Commit(ctx, order, b)
}

func (c grouped) likelyTaken(s Scope) bool { return c.hints.taken(c.hints.hash(s)) }

// queueGatingClaim adds to b the claim of k for a batch that goes on
// without looking at its result: the claim over input rows (package
// rowset), which sets the condition of package claim that each statement
// after it tests, for the rows whose key it took. Each row gets back its
// own id, or 0, in *id if id is not nil.
func queueGatingClaim(b *pgx.Batch, k newKey, id *int64) {
	q := b.Queue(gatingClaimSQL, k.args()...)
	if id != nil {
		q.QueryRow(func(row pgx.Row) error { return row.Scan(nil, id, nil) }) // nil: the ordinal, set_config's echo
	}
}

// gatingClaimSQL is claimSQL over input rows: each row claims its scope,
// and the rows whose key it took are named in the claim's setting.
var gatingClaimSQL = rowset.New([]rowset.Column{
	{Name: "tenant_id", Type: "text"}, {Name: "operation", Type: "text"}, {Name: "idempotency_key", Type: "text"},
	{Name: "fingerprint", Type: "bytea"}, {Name: "resource_type", Type: "text"}, {Name: "resource_id", Type: "text"},
	{Name: "lease_expires_at", Type: "timestamptz"}, {Name: "created_at", Type: "timestamptz"},
	{Name: "recovery_next_at", Type: "timestamptz"},
}, `, claimed AS (
		    INSERT INTO idempotency_keys
		        (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
		         fencing_token, lease_expires_at, created_at, recovery_next_at)
		    SELECT tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
		           1, lease_expires_at, created_at, recovery_next_at
		    FROM input ORDER BY ord
		    ON CONFLICT DO NOTHING
		    RETURNING id, tenant_id, operation, idempotency_key
		), took AS (
		    SELECT input.ord, claimed.id
		    FROM input JOIN claimed USING (tenant_id, operation, idempotency_key)
		)
		SELECT input.ord, COALESCE(took.id, 0), `+claim.Took("took")+`
		FROM input LEFT JOIN took USING (ord)
		ORDER BY input.ord`).SQL()

// newCommitter is the committer of mode ("": CommitGroup).
func newCommitter(mode string, db *pgxpool.Pool, m *metrics.Metrics, concurrency int) (committer, error) {
	switch mode {
	case CommitInline:
		return inline{db: db}, nil
	case CommitGroup, "":
		return newGrouped(db, m, concurrency), nil
	}
	return nil, fmt.Errorf("commit mode %q: want %s or %s", mode, CommitInline, CommitGroup)
}
