package idempotency

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// recordingOp finishes every key it resumes, and remembers how it was
// asked: the owner's token and flags.
type recordingOp struct {
	renders
	mu     sync.Mutex
	owners []Owner
}

func (*recordingOp) Name() string { return "widgets.create" }

func (o *recordingOp) Resume(ctx context.Context, own *Owner) (Result, error) {
	o.mu.Lock()
	o.owners = append(o.owners, Owner{KeyID: own.KeyID, Token: own.Token, Recovering: own.Recovering, LookupOnly: own.LookupOnly})
	o.mu.Unlock()
	b := &pgx.Batch{}
	if err := own.QueueFinish(b, done{}); err != nil {
		return nil, err
	}
	return done{}, own.Commit(ctx, b)
}

// ResolveNow takes over and resumes, as the reconciler does but only to
// look up, an unfinished key nobody holds; it leaves alone a key with a
// final answer, one a live owner holds and one left for a person. The
// reconciler's own attempts still may send (LookupOnly false).
func TestResolveNowResumesOnlyWhatNobodyHolds(t *testing.T) {
	t.Parallel()
	e, pool, clk := testEngine(t)
	ctx := context.Background()
	op := &recordingOp{}
	rc := NewReconciler(e, RecoveryPolicy{}, op)

	claim := func(key string) (Resource, *Owner) {
		res := Resource{Type: "widget", ID: "w_" + key}
		var id int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			id, _, err = claimKey(ctx, tx, Scope{Tenant: "t", Operation: op.Name(), Key: key}, []byte{1}, res, clk.Now(), time.Minute, nil)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return res, &Owner{e: e, op: failingOp{}, KeyID: id, Token: 1, Resource: res}
	}
	commit := func(own *Owner, q func(*pgx.Batch)) {
		b := &pgx.Batch{}
		q(b)
		if err := own.Commit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}

	released, own := claim("released") // its outcome is unknown: released for recovery
	commit(own, func(b *pgx.Batch) { own.QueueRelease(b, LookSoon()) })
	held, _ := claim("held") // its owner's lease is live
	final, own := claim("final")
	commit(own, func(b *pgx.Batch) {
		if err := own.QueueFinish(b, done{}); err != nil {
			t.Fatal(err)
		}
	})
	review, own := claim("review")
	if err := own.MarkForReview(ctx, "a person decides"); err != nil {
		t.Fatal(err)
	}

	for res, want := range map[Resource]string{held: OutcomeInFlight, final: OutcomeFinal, review: OutcomeManualReview} {
		if got, err := rc.ResolveNow(ctx, res); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", res.ID, got, err, want)
		}
	}
	if _, err := rc.ResolveNow(ctx, Resource{Type: "widget", ID: "w_nobody"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown resource: %v, want ErrNotFound", err)
	}
	if len(op.owners) != 0 {
		t.Fatalf("resumed keys it must leave alone: %+v", op.owners)
	}

	if got, err := rc.ResolveNow(ctx, released); err != nil || got != "done" {
		t.Fatalf("released key: %q, %v", got, err)
	}
	if got := op.owners; len(got) != 1 || got[0].Token != 2 || !got[0].Recovering || !got[0].LookupOnly {
		t.Fatalf("resumed as %+v, want one recovering, lookup-only owner with a new token (2)", got)
	}
	if got, err := rc.ResolveNow(ctx, released); err != nil || got != OutcomeFinal || len(op.owners) != 1 {
		t.Errorf("resolved again: %q, %v, %d resumes", got, err, len(op.owners))
	}

	// The reconciler's own pass on the held key, once its lease ran out.
	clk.Advance(2 * time.Minute)
	if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET recovery_next_at = $1 WHERE resource_id = $2`, clk.Now(), held.ID); err != nil {
		t.Fatal(err)
	}
	if stats, err := rc.RunOnce(ctx, 10); err != nil || stats["done"] != 1 {
		t.Fatalf("reconciler: %v, %v", stats, err)
	}
	if got := op.owners[1]; !got.Recovering || got.LookupOnly {
		t.Errorf("the reconciler resumed as %+v, want recovering, not lookup-only", got)
	}
}
