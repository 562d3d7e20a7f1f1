package idempotency

import (
	"context"
	"testing"
	"time"
)

// A retry of a finished key is replayed from the engine's memory while the
// server the answer came from is known to be the one the pool talks to:
// not once the last look at it is stale, and not after a look found
// another server (a failover, a restart). Then the retry reads the
// database; and a key the new server does not have (its commit lost with
// the old primary) is claimed again, its resource created anew, as the
// failover contract says. Here the stored answer is changed behind the
// engine's back, so that a replay tells where it came from.
func TestARetryIsReplayedFromMemoryOnlyWhileItsServerIsKnown(t *testing.T) {
	t.Parallel()
	e, pool, clk, _ := measuredEngine(t)
	ctx := context.Background()
	createWidgets(t, pool)
	op := &recordingOp{}
	req := Request{
		Scope:       Scope{Tenant: "t", Operation: "widgets.create", Key: "w_m"},
		Fingerprint: []byte{1}, Resource: Resource{Type: "widget", ID: "w_m"},
		Create: insertWidget("w_m"),
	}
	e.lookAtServer(ctx)
	if reply, err := e.Do(ctx, op, req); err != nil || reply.Replayed {
		t.Fatalf("first request: %+v, %v", reply, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET response_body = '"stored"' WHERE idempotency_key = 'w_m'`); err != nil {
		t.Fatal(err)
	}
	replayed := func(want string) {
		t.Helper()
		reply, err := e.Do(ctx, op, req)
		if err != nil || !reply.Replayed || string(reply.Response.Body) != want {
			t.Fatalf("retry: %+v (%s), %v; want the replay of %s", reply, reply.Response.Body, err, want)
		}
	}
	replayed(`{}`) // from memory
	clk.Advance(serverFresh + time.Millisecond)
	replayed(`"stored"`) // the last look is stale: read
	e.lookAtServer(ctx)
	replayed(`{}`) // the same server again
	// A failover that lost the key's commits: the new primary has neither
	// the key nor the widget.
	if _, err := pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE idempotency_key = 'w_m'; DELETE FROM widgets WHERE id = 'w_m'`); err != nil {
		t.Fatal(err)
	}
	e.memory.serverSeen("the promoted standby", clk.Now())
	if reply, err := e.Do(ctx, op, req); err != nil || reply.Replayed {
		t.Fatalf("retry after the failover: %+v, %v; want the key claimed again", reply, err)
	}
	if !widgetExists(t, pool, "w_m") {
		t.Fatal("the widget was not created again")
	}
	// The finish reports the server it ran on: an answer committed while
	// the last look found another server is not kept.
	e.memory.serverSeen("an old primary", clk.Now())
	if _, err := e.Do(ctx, op, Request{Scope: Scope{Tenant: "t", Operation: "widgets.create", Key: "w_n"},
		Fingerprint: []byte{1}, Resource: Resource{Type: "widget", ID: "w_n"}, Create: insertWidget("w_n")}); err != nil {
		t.Fatal(err)
	}
	if _, kept := e.memory.answers.get(Scope{Tenant: "t", Operation: "widgets.create", Key: "w_n"}); kept {
		t.Fatal("kept an answer committed on a server the last look did not find")
	}
	// A replay read from the server the last look found is kept: the next
	// retry is answered from memory even once the stored answer changed.
	e.lookAtServer(ctx)
	req.Scope.Key, req.Resource.ID, req.Create = "w_n", "w_n", insertWidget("w_n")
	replayed(`{}`) // read
	if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET response_body = '"stored"' WHERE idempotency_key = 'w_n'`); err != nil {
		t.Fatal(err)
	}
	replayed(`{}`) // from memory
}

// An answer is kept only if its commit ran on the server the last look
// found: a commit on a connection still open to an old primary is not.
// Another server seen empties the memory.
func TestAnAnswerOfAnotherServerIsNotKept(t *testing.T) {
	m := newMemory()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	m.serverSeen("a", now)
	rec := Record{Scope: Scope{Tenant: "t", Operation: "o", Key: "k"}, Fingerprint: []byte{1},
		Response: &Response{Status: 201, Body: []byte(`{}`)}, CompletedAt: &now}
	m.keep(rec, "b", now)
	if _, ok := m.replay(rec.Scope, rec.Fingerprint, now, time.Hour); ok {
		t.Fatal("kept an answer committed on another server")
	}
	m.keep(rec, "a", now)
	if _, ok := m.replay(rec.Scope, rec.Fingerprint, now, time.Hour); !ok {
		t.Fatal("did not keep an answer of the server")
	}
	if _, ok := m.replay(rec.Scope, []byte{2}, now, time.Hour); ok {
		t.Fatal("replayed an answer to another command")
	}
	if _, ok := m.replay(rec.Scope, rec.Fingerprint, now.Add(memoryFor), time.Hour); ok {
		t.Fatal("replayed from memory an answer older than memoryFor")
	}
	m.serverLost()
	if _, ok := m.replay(rec.Scope, rec.Fingerprint, now, time.Hour); ok {
		t.Fatal("replayed while the server is lost")
	}
	m.serverSeen("a", now)
	if _, ok := m.replay(rec.Scope, rec.Fingerprint, now, time.Hour); !ok {
		t.Fatal("the same server seen again lost the memory")
	}
	m.serverSeen("b", now)
	if _, ok := m.replay(rec.Scope, rec.Fingerprint, now, time.Hour); ok {
		t.Fatal("replayed after another server was seen")
	}
}

// WatchServer's look finds the test's server, a primary, and keeps finding
// the same one; a pool that cannot reach it loses it.
func TestLookAtServer(t *testing.T) {
	t.Parallel()
	e, _, clk, _ := measuredEngine(t)
	ctx := context.Background()
	e.lookAtServer(ctx)
	first := e.memory.server
	if first == "" || !e.memory.fresh(clk.Now()) {
		t.Fatalf("after a look: server %q, fresh %v", first, e.memory.fresh(clk.Now()))
	}
	e.lookAtServer(ctx)
	if e.memory.server != first {
		t.Fatalf("the same server seen as %q, then %q", first, e.memory.server)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	e.lookAtServer(canceled)
	if e.memory.fresh(clk.Now()) {
		t.Fatal("a failed look left the server fresh")
	}
}
