package idempotency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// renamedOp is an operation in the middle of a rename: its keys are
// written under name and read under alias too (Renamed).
type renamedOp struct {
	finishingOp
	name, alias string
}

func (o renamedOp) Name() string      { return o.name }
func (o renamedOp) Aliases() []string { return []string{o.alias} }

// A scope being renamed is one scope under both names, whichever release
// (the one that writes the old name, the one that writes the new) claims
// it: a key claimed under one name is answered under the other as a retry
// (the stored answer, replayed), and claims racing under both names create
// one resource. Without the rename's unique index, the two names would
// claim one key twice; without the aliases, a retry under the other name
// would find no key. The payments' rename ('payments.create' to
// 'create_payment', migrations 00027 and 00028) was the first to use it;
// the toy names here keep the mechanism proven for the next one.
func TestARenamedScopeIsOneScopeUnderBothNames(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	// What a rename's second release builds (as 00027 did): one scope of
	// both names.
	if _, err := pool.Exec(ctx, `
		CREATE UNIQUE INDEX idempotency_keys_toy_rename_scope_key ON idempotency_keys (tenant_id, idempotency_key)
		    WHERE operation IN ('toy.create', 'create_toy')`); err != nil {
		t.Fatal(err)
	}
	e, _, _ := engineOn(t, pool, pgtest.CommitMode())
	var resumes atomic.Int32
	old := renamedOp{finishingOp: finishingOp{resumes: &resumes}, name: "toy.create", alias: "create_toy"}
	next := renamedOp{finishingOp: finishingOp{resumes: &resumes}, name: "create_toy", alias: "toy.create"}
	req := func(key, id string) Request {
		return Request{Scope: Scope{Tenant: "t", Key: key}, Fingerprint: []byte{1}, Resource: Resource{Type: "payment", ID: id}}
	}
	with := func(op renamedOp, r Request) Request { r.Scope.Operation = op.name; return r }

	first, err := e.Do(ctx, old, with(old, req("k", "pay_1")))
	if err != nil || first.Replayed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	retry, err := e.Do(ctx, next, with(next, req("k", "pay_2")))
	if err != nil || !retry.Replayed || retry.Resource.ID != "pay_1" {
		t.Fatalf("the retry under the new name: %+v, %v; want the replay of pay_1", retry, err)
	}
	if n := resumes.Load(); n != 1 {
		t.Fatalf("%d resumes, want 1", n)
	}

	resumes.Store(0)
	var wg sync.WaitGroup
	created := make(chan string, 16)
	for i := range 16 {
		op := old
		if i%2 == 1 {
			op = next
		}
		wg.Go(func() {
			r, err := e.Do(ctx, op, with(op, req("race", fmt.Sprint("pay_r", i))))
			switch {
			case err != nil && !isInUse(err):
				t.Error(err)
			case err == nil:
				created <- r.Resource.ID
			}
		})
	}
	wg.Wait()
	close(created)
	ids := map[string]bool{}
	for id := range created {
		ids[id] = true
	}
	if n := resumes.Load(); n != 1 || len(ids) != 1 {
		t.Fatalf("claims racing under both names: %d resumes, resources %v; want one", n, ids)
	}
}

func isInUse(err error) bool {
	var inUse *KeyInUseError
	return errors.As(err, &inUse)
}
