package idempotency

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
)

// disclosingOp finishes every key it resumes, and shows in its first
// answer what its stored one must not hold.
type disclosingOp struct{ finishingOp }

func (disclosingOp) RenderFirst(Result) (Response, error) {
	return Response{Status: 201, Body: []byte(`{"secret":"shown once"}`), Headers: map[string]string{"Content-Type": "application/json"}}, nil
}

// An operation that discloses answers the request whose owner finished its
// key with RenderFirst's answer, stores Render's, and a retry gets the
// stored one: what the first answer alone shows never reaches the table.
func TestTheFirstAnswerDisclosesWhatTheStoredOneDoesNot(t *testing.T) {
	t.Parallel()
	e, pool, _ := testEngine(t)
	ctx := context.Background()
	op := disclosingOp{finishingOp{resumes: &atomic.Int32{}}}
	req := Request{Scope: Scope{Tenant: "t", Operation: "finish", Key: "k"}, Fingerprint: []byte{1}, Resource: Resource{Type: "thing", ID: "th_1"}}
	first, err := e.Do(ctx, op, req)
	if err != nil || first.Replayed || string(first.Response.Body) != `{"secret":"shown once"}` {
		t.Fatalf("first: %+v %s, %v; want RenderFirst's answer", first, first.Response.Body, err)
	}
	again, err := e.Do(ctx, op, req)
	if err != nil || !again.Replayed || !bytes.Equal(again.Response.Body, []byte(`{}`)) {
		t.Fatalf("retry: %+v %s, %v; want Render's answer, replayed", again, again.Response.Body, err)
	}
	var stored []byte
	if err := pool.QueryRow(ctx, `SELECT response_body FROM idempotency_keys WHERE idempotency_key = 'k'`).Scan(&stored); err != nil ||
		strings.Contains(string(stored), "shown once") {
		t.Errorf("stored %s (%v)", stored, err)
	}
}
