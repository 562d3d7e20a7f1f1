package idempotency

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// A retry of a finished key is answered from the final answer this process
// remembers, as the database would answer it: the same bytes for the same
// command, 422 for another, only inside the replay window. The database is
// not asked (the key's row is gone, as an operator's deletion would make
// it, and the answers still come), until the window ends: then the
// database decides again.
func TestARememberedAnswerIsAnsweredAsTheDatabaseWouldInsideItsWindow(t *testing.T) {
	t.Parallel()
	e, pool, clk := engineOn(t, pgtest.NewPool(t))
	ctx := context.Background()
	var resumes atomic.Int32
	op := renamedOp{name: "create_widget", alias: "widgets.create", resumes: &resumes}
	req := Request{Scope: Scope{Tenant: "t", Operation: "create_widget", Key: "k"}, Fingerprint: []byte{1},
		Resource: Resource{Type: "widget", ID: "w_1"}}
	first, err := e.Do(ctx, op, req)
	if err != nil || first.Replayed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	if replay, err := e.Do(ctx, op, req); err != nil || !replay.Replayed { // from the database, then remembered
		t.Fatalf("replay: %+v, %v", replay, err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	replay, err := e.Do(ctx, op, req)
	if err != nil || !replay.Replayed || string(replay.Response.Body) != string(first.Response.Body) {
		t.Fatalf("remembered replay: %+v, %v; want %q", replay, err, first.Response.Body)
	}
	other := req
	other.Fingerprint = []byte{2}
	if _, err := e.Do(ctx, op, other); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("another command under the key: %v, want ErrKeyReused", err)
	}
	elsewhere := req
	elsewhere.Scope.Tenant, elsewhere.Resource.ID = "u", "w_2"
	if r, err := e.Do(ctx, op, elsewhere); err != nil || r.Replayed {
		t.Fatalf("the same key of another tenant: %+v, %v; want a first request", r, err)
	}
	// Past the window the memory is not used: the key, deleted, is claimed
	// anew.
	clk.Advance(time.Hour)
	if r, err := e.Do(ctx, op, req); err != nil || r.Replayed {
		t.Fatalf("after the window: %+v, %v; want a first request (the database has no key)", r, err)
	}
	if n := resumes.Load(); n != 3 {
		t.Errorf("%d resumes, want 3 (first, the other tenant's, after the window)", n)
	}
}

// The memory is bounded: the least recently used answer goes first.
func TestRememberedAnswersAreBounded(t *testing.T) {
	a := newAnswers(2)
	now := time.Now()
	rec := Record{CompletedAt: &now, Response: &Response{Status: 201, Body: []byte("{}")}}
	s := func(k string) Scope { return Scope{Tenant: "t", Operation: "op", Key: k} }
	a.put(s("a"), rec)
	a.put(s("b"), rec)
	if _, ok := a.get(s("a"), now, time.Hour); !ok { // a is now the most recently used
		t.Fatal("a forgotten")
	}
	a.put(s("c"), rec)
	if _, ok := a.get(s("b"), now, time.Hour); ok {
		t.Error("b, the least recently used, still remembered")
	}
	for _, k := range []string{"a", "c"} {
		if _, ok := a.get(s(k), now, time.Hour); !ok {
			t.Errorf("%s forgotten", k)
		}
	}
	// An answer not final, or erased, is never remembered.
	a.put(s("d"), Record{Response: &Response{Status: 201, Body: []byte("{}")}})
	a.put(s("e"), Record{CompletedAt: &now, Response: &Response{Status: 201}})
	for _, k := range []string{"d", "e"} {
		if _, ok := a.get(s(k), now, time.Hour); ok {
			t.Errorf("%s remembered", k)
		}
	}
}
