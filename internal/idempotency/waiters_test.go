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
type heldOp struct {
	renders
	release chan struct{}
}

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
