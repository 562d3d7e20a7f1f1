package idempotency

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/claim"
)

// A retry that reaches the engine that saw its key taken reads the key's
// record first and is answered from it, without the claim's batch (its
// Create is not even asked for its statements); an engine that never saw
// the key claims as always. The hint is never an answer: once the
// database has lost the key (a failover that lost its commit, or
// clean-up), the hinted retry finds nothing and claims the key again,
// as it would without the hint. The hints are the group committer's.
func TestARetryTheEngineSawTakenIsReadBeforeItsClaim(t *testing.T) {
	t.Parallel()
	e, pool, _, _ := measuredEngine(t)
	other, _, _ := engineOn(t, pool, CommitGroup) // a second instance
	ctx := context.Background()
	var resumes, creates atomic.Int32
	op := finishingOp{resumes: &resumes}
	req := Request{
		Scope: Scope{Tenant: "t", Operation: "finish", Key: "k"}, Fingerprint: []byte{1},
		Resource: Resource{Type: "widget", ID: "w_1"},
		Create:   func(*claim.Batch) { creates.Add(1) },
	}
	first, err := e.Do(ctx, op, req)
	if err != nil || first.Replayed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	retry, err := e.Do(ctx, op, req)
	if err != nil || !retry.Replayed || !equalResponses(retry.Response, first.Response) {
		t.Fatalf("the retry: %+v, %v; want the first answer replayed", retry, err)
	}
	if n := creates.Load(); n != 1 {
		t.Fatalf("the retry on the engine that saw the key ran the claim's batch (%d creates, want 1)", n)
	}
	if r, err := other.Do(ctx, op, req); err != nil || !r.Replayed {
		t.Fatalf("the retry on another engine: %+v, %v", r, err)
	}
	if n := creates.Load(); n != 2 {
		t.Fatalf("the retry on an engine without the hint: %d creates, want 2 (it claims)", n)
	}

	// The database loses the key.
	if _, err := pool.Exec(ctx, `DELETE FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	again, err := e.Do(ctx, op, req)
	if err != nil || again.Replayed {
		t.Fatalf("the hinted retry of a lost key: %+v, %v; want it claimed and created again", again, err)
	}
	if n, c := resumes.Load(), creates.Load(); n != 2 || c != 3 {
		t.Fatalf("%d resumes and %d creates, want 2 and 3", n, c)
	}
}

func equalResponses(a, b Response) bool {
	return a.Status == b.Status && string(a.Body) == string(b.Body)
}
