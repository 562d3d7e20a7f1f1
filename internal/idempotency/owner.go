package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// Owner is a key held by the caller: its row, its fencing token, and the
// resource it stands for. Every write an operation makes about that
// resource goes into a batch with one of the Owner's statements, committed
// by Commit, so it happens only while the caller still owns the key.
type Owner struct {
	e        *Engine
	KeyID    int64
	Token    int64
	Tenant   string
	Resource Resource
	// First: this owner claimed the key (not a takeover, not the reconciler).
	First bool
	// Recovering: the reconciler took the key over.
	Recovering bool

	pending *Response // rendered by QueueFinish, stored if Commit succeeds
	answer  *Response // the final answer this owner committed
}

// QueueFinish adds to b the statement that stores r, rendered, as the key's
// final answer and ends the lease. It commits with the final state change
// queued beside it, or not at all.
func (o *Owner) QueueFinish(b *pgx.Batch, r Result) error {
	resp, err := o.e.render(r)
	if err != nil {
		return fmt.Errorf("render %s result: %w", o.Resource.Type, err)
	}
	queueFinish(b, o.KeyID, o.Token, resp, o.e.clock.Now())
	o.pending = &resp
	return nil
}

// QueueHold adds to b the renewal of the caller's lease, for one more step
// that may take up to a provider call (renewed before each call, so that a
// lookup followed by a send never outlives it). recover says whether the
// resource will be in a state the reconciler must resolve if the caller
// dies: a request may have reached the provider.
func (o *Owner) QueueHold(b *pgx.Batch, recover bool) {
	now := o.e.clock.Now()
	until := now.Add(o.e.cfg.Lease)
	queueHold(b, o.KeyID, o.Token, &until, recover, now)
}

// QueueRelease adds to b the end of the caller's lease without a final
// answer (the outcome is unknown, or the provider refused), so that the next
// retry, or the reconciler if recover, may take the key over at once.
func (o *Owner) QueueRelease(b *pgx.Batch, recover bool) {
	queueHold(b, o.KeyID, o.Token, nil, recover, o.e.clock.Now())
}

// stepTimeout bounds one transaction of an operation's progress. It is
// well below any sane lease, so an owner stuck on a silent database gives
// up before its key can be taken over.
const stepTimeout = 10 * time.Second

// Commit runs b in one transaction. If another owner took the key over, or
// moved the resource, it fails with an error wrapping ErrFenced and nothing
// of b is written; the engine then answers from what the key says.
func (o *Owner) Commit(ctx context.Context, b *pgx.Batch) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	pending := o.pending
	o.pending = nil
	err := pgx.BeginFunc(ctx, o.e.db, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
	switch {
	case errors.Is(err, statemachine.ErrStaleWrite):
		return fmt.Errorf("%w: %w", ErrFenced, err)
	case err != nil:
		return err
	}
	if pending != nil {
		o.answer = pending
	}
	return nil
}

// Finished reports whether this owner committed the key's final answer.
func (o *Owner) Finished() bool { return o.answer != nil }
