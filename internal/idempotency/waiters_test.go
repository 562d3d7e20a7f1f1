package idempotency

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// heldOp is an operation whose first owner holds its key until release is
// closed, then finishes it.
type heldOp struct{ release chan struct{} }

func (heldOp) Name() string { return "widgets.create" }
func (o heldOp) Resume(ctx context.Context, own *Owner) (Result, error) {
	<-o.release
	b := &pgx.Batch{}
	if err := own.QueueFinish(b, done{}); err != nil {
		return nil, err
	}
	return done{}, own.Commit(ctx, b)
}

// A duplicate that waits counts itself on the key (so that its owner
// notifies); one that leaves with the final answer does not uncount itself
// (a finished key never notifies again: the commit would only queue behind
// a storm's others on the one row), while one that leaves without it does.
func TestAWaiterUncountsItselfOnlyWithoutTheFinalAnswer(t *testing.T) {
	t.Parallel()
	e, pool, _ := testEngine(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := NewListener(pool.Config().ConnConfig.Copy(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	go keys.Run(ctx)
	e.waiter = keys

	waiters := func(key string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT waiters FROM idempotency_keys WHERE idempotency_key = $1`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tc := range []struct {
		key      string
		wait     time.Duration
		finishes bool // the owner finishes while the duplicate waits
		want     int
	}{
		{key: "answered", wait: 30 * time.Second, finishes: true, want: 1},
		{key: "timed-out", wait: 300 * time.Millisecond, finishes: false, want: 0},
	} {
		op := heldOp{release: make(chan struct{})}
		req := Request{Scope: Scope{Tenant: "t", Operation: op.Name(), Key: tc.key}, Fingerprint: []byte{1},
			Resource: Resource{Type: "widget", ID: "w_" + tc.key}, Created: done{}}
		owner := make(chan error, 1)
		go func() {
			_, err := e.Do(ctx, op, req)
			owner <- err
		}()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			var n int
			if pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, tc.key).Scan(&n) == nil && n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the owner never claimed its key", tc.key)
			}
		}
		dup := req
		dup.Wait = tc.wait
		answered := make(chan error, 1)
		go func() {
			reply, err := e.Do(ctx, op, dup)
			if err == nil && !reply.Replayed {
				err = errors.New("answered, but not with the stored answer")
			}
			answered <- err
		}()
		if tc.finishes {
			for deadline := time.Now().Add(10 * time.Second); waiters(tc.key) != 1; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: the duplicate never counted itself", tc.key)
				}
			}
			close(op.release)
			if err := <-answered; err != nil {
				t.Fatalf("%s: the waiting duplicate: %v", tc.key, err)
			}
		} else {
			var inUse *KeyInUseError
			if err := <-answered; !errors.As(err, &inUse) {
				t.Fatalf("%s: the waiting duplicate: %v, want in use", tc.key, err)
			}
			close(op.release)
		}
		if err := <-owner; err != nil {
			t.Fatalf("%s: the owner: %v", tc.key, err)
		}
		if got := waiters(tc.key); got != tc.want {
			t.Errorf("%s: waiters = %d once the duplicate left, want %d", tc.key, got, tc.want)
		}
	}
}

// A takeover starts from the key as the takeover found it, not from the
// (perhaps older) record that decided it: here a send was recorded after
// that record was read, and the new owner must know its provider key
// window has started.
func TestATakeoverStartsFromTheKeyItTookOver(t *testing.T) {
	t.Parallel()
	e, pool, clk := testEngine(t)
	ctx := context.Background()
	scope := Scope{Tenant: "t", Operation: "widgets.create", Key: "k"}
	id, ok, err := claimKey(ctx, pool, scope, []byte{1}, Resource{Type: "widget", ID: "w_1"}, clk.Now(), time.Minute, nil)
	if err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	stale, err := Load(ctx, pool, scope)
	if err != nil || stale.FirstSentAt != nil {
		t.Fatalf("load: %+v %v", stale, err)
	}
	first := &Owner{e: e, KeyID: id, Token: 1}
	b := &pgx.Batch{}
	first.QueueSending(b)
	if err := first.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute) // the first owner's lease ran out
	own, ok, err := e.takeOverKey(ctx, stale, clk.Now())
	if err != nil || !ok {
		t.Fatalf("take over: %v %v", ok, err)
	}
	if own.Token != 2 || own.FirstSentAt == nil {
		t.Errorf("new owner: token %d, first sent at %v; want 2 and the recorded send", own.Token, own.FirstSentAt)
	}
}
