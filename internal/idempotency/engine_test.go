package idempotency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// done is a Result that renders as a 201.
type done struct{}

func (done) Outcome() string { return "done" }

// renders answers every result with a 201: the Render of the tests'
// operations.
type renders struct{}

func (renders) Render(Result) (Response, error) {
	return Response{Status: 201, Body: []byte(`{}`), Headers: map[string]string{"Content-Type": "application/json"}}, nil
}

// finishingOp finishes every key it resumes, and counts its resumes.
type finishingOp struct {
	renders
	resumes *atomic.Int32
}

func (finishingOp) Name() string { return "finish" }
func (o finishingOp) Resume(ctx context.Context, own *Owner) (Result, error) {
	o.resumes.Add(1)
	b := &pgx.Batch{}
	if err := own.QueueFinish(b, done{}); err != nil {
		return nil, err
	}
	return done{}, own.Commit(ctx, b)
}

func testEngine(t *testing.T) (*Engine, *pgxpool.Pool, *clock.Fake) {
	t.Helper()
	return engineOn(t, pgtest.NewPool(t), pgtest.CommitMode())
}

// engineOn is testEngine on pool, committing in mode.
func engineOn(t *testing.T, pool *pgxpool.Pool, mode string) (*Engine, *pgxpool.Pool, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	e := NewEngine(Deps{
		DB: pool, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: metrics.New(prometheus.NewRegistry()),
	}, Config{ReplayTTL: time.Hour, Lease: time.Minute, CommitMode: mode})
	return e, pool, clk
}

// queueClaim adds to b the claim of a key, in the form a batch that goes
// on without looking at it needs (queueGatingClaim), and sets *id to its
// row, or 0 if the key was taken.
func queueClaim(b *pgx.Batch, id *int64, scope Scope, fingerprint []byte, res Resource, now time.Time, lease time.Duration, firstLook *time.Time) {
	queueGatingClaim(b, newKey{scope: scope, fingerprint: fingerprint, resource: res,
		createdAt: now, leaseUntil: now.Add(lease), firstLook: firstLook}, id)
}

// claimKey claims a key alone, as Engine.Do's batch does with nothing else
// queued beside it; ok is false when the key was taken.
func claimKey(ctx context.Context, q interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, scope Scope, fingerprint []byte, res Resource, now time.Time, lease time.Duration, abandonAt *time.Time) (id int64, ok bool, err error) {
	b := &pgx.Batch{}
	queueClaim(b, &id, scope, fingerprint, res, now, lease, abandonAt)
	if err = q.SendBatch(ctx, b).Close(); err != nil {
		return 0, false, err
	}
	return id, id != 0, nil
}

// claimWidget claims the key "k" of a widget at now, and returns its row.
func claimWidget(t *testing.T, pool *pgxpool.Pool, now time.Time) int64 {
	t.Helper()
	var id int64
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) (err error) {
		id, _, err = claimKey(context.Background(), tx, Scope{Tenant: "t", Operation: "widgets.create", Key: "k"}, []byte{1},
			Resource{Type: "widget", ID: "w_1"}, now, time.Minute, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// An owner whose key was taken over (its token is no longer current) can
// neither hold, release nor finish the key; the new owner can. The writes
// address the row by id and token only: no resource table is involved.
func TestFencedOutOwnerCannotWrite(t *testing.T) {
	t.Parallel()
	e, pool, clk := testEngine(t)
	ctx := context.Background()
	scope := Scope{Tenant: "t", Operation: "widgets.create", Key: "k"}
	var id int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		id, _, err = claimKey(ctx, tx, scope, []byte{1}, Resource{Type: "widget", ID: "w_1"}, clk.Now(), time.Minute, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	old := &Owner{e: e, op: failingOp{}, KeyID: id, Token: 1, Resource: Resource{Type: "widget", ID: "w_1"}}
	clk.Advance(2 * time.Minute) // the old owner's lease ran out
	token, ok, err := TakeOver(ctx, pool, id, 1, clk.Now(), time.Minute)
	if err != nil || !ok || token != 2 {
		t.Fatalf("take over: %d %v %v", token, ok, err)
	}
	if _, ok, _ := TakeOver(ctx, pool, id, 1, clk.Now(), time.Minute); ok {
		t.Fatal("a second taker with the same seen token won too")
	}

	for name, queue := range map[string]func(*pgx.Batch){
		"hold":    func(b *pgx.Batch) { old.QueueHold(b, LookSoon()) },
		"release": func(b *pgx.Batch) { old.QueueRelease(b, LookSoon()) },
		"finish": func(b *pgx.Batch) {
			if err := old.QueueFinish(b, done{}); err != nil {
				t.Fatal(err)
			}
		},
	} {
		// A write queued before the fenced one must be undone with it:
		// Commit sends the batch with no BEGIN (one implicit transaction),
		// so the fence must be checked by the statement itself, not in Go.
		b := &pgx.Batch{}
		b.Queue(`UPDATE idempotency_keys SET recovery_last_error = 'written beside a fenced write' WHERE id = $1`, id)
		queue(b)
		if err := old.Commit(ctx, b); !errors.Is(err, ErrFenced) {
			t.Errorf("%s with an old token: %v, want ErrFenced", name, err)
		}
		var beside *string
		if err := pool.QueryRow(ctx, `SELECT recovery_last_error FROM idempotency_keys WHERE id = $1`, id).Scan(&beside); err != nil {
			t.Fatal(err)
		}
		if beside != nil {
			t.Errorf("%s with an old token: the write beside it was kept (%q)", name, *beside)
		}
	}
	if old.Finished() {
		t.Error("a fenced-out finish counts as finished")
	}
	rec, err := LoadByID(ctx, pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Response != nil || rec.FencingToken != 2 || rec.LeaseExpiresAt == nil {
		t.Fatalf("the old owner changed the key: %+v", rec)
	}

	current := &Owner{e: e, op: failingOp{}, KeyID: id, Token: 2, Resource: rec.Resource}
	b := &pgx.Batch{}
	if err := current.QueueFinish(b, done{}); err != nil {
		t.Fatal(err)
	}
	if err := current.Commit(ctx, b); err != nil || !current.Finished() {
		t.Fatalf("the current owner could not finish: %v", err)
	}
	rec, _ = LoadByID(ctx, pool, id)
	if rec.Response == nil || rec.Response.Status != 201 || rec.LeaseExpiresAt != nil {
		t.Errorf("finished key: %+v", rec)
	}
}

// A hold records whether the key's resource needs recovery, keeps the
// schedule the reconciler booked, and a finish clears it.
func TestHoldSchedulesRecoveryOnce(t *testing.T) {
	t.Parallel()
	e, pool, clk := testEngine(t)
	ctx := context.Background()
	id := claimWidget(t, pool, clk.Now())
	own := &Owner{e: e, op: failingOp{}, KeyID: id, Token: 1}
	due := func() *time.Time {
		var at *time.Time
		if err := pool.QueryRow(ctx, `SELECT recovery_next_at FROM idempotency_keys WHERE id = $1`, id).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	commit := func(q func(*pgx.Batch)) {
		b := &pgx.Batch{}
		q(b)
		if err := own.Commit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	commit(func(b *pgx.Batch) { own.QueueHold(b, LookNever()) })
	if due() != nil {
		t.Fatal("a resource that needs no recovery is scheduled")
	}
	first := clk.Now()
	commit(func(b *pgx.Batch) { own.QueueHold(b, LookSoon()) })
	clk.Advance(time.Second)
	commit(func(b *pgx.Batch) { own.QueueRelease(b, LookSoon()) })
	if at := due(); at == nil || !at.Equal(first) {
		t.Fatalf("recovery due %v, want %v (kept from the first hold)", at, first)
	}
	commit(func(b *pgx.Batch) {
		if err := own.QueueFinish(b, done{}); err != nil {
			t.Fatal(err)
		}
	})
	if due() != nil {
		t.Error("a finished key is still scheduled for recovery")
	}
}

// failingOp fails every Resume with err, after the key was claimed.
type failingOp struct {
	renders
	err error
}

func (failingOp) Name() string { return "widgets.create" }
func (o failingOp) Resume(context.Context, *Owner) (Result, error) {
	return nil, o.err
}

// An owner whose work fails half-way (not a crash) hands the key back at
// once, so a retry need not wait out the lease; a crash (ErrCrashed) keeps
// it, as a dead process would.
func TestAFailedOwnerHandsTheKeyBack(t *testing.T) {
	t.Parallel()
	e, pool, _ := testEngine(t)
	ctx := context.Background()
	for i, c := range []struct {
		err       error
		wantLease bool
	}{
		{errors.New("database blip"), false},
		{fmt.Errorf("%w: failpoint", ErrCrashed), true},
	} {
		req := Request{
			Scope: Scope{Tenant: "t", Operation: "widgets.create", Key: fmt.Sprint("k", i)}, Fingerprint: []byte{1},
			Resource: Resource{Type: "widget", ID: fmt.Sprint("w", i)},
		}
		if _, err := e.Do(ctx, failingOp{err: c.err}, req); !errors.Is(err, c.err) {
			t.Fatalf("%v: Do returned %v", c.err, err)
		}
		rec, err := Load(ctx, pool, req.Scope)
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.LeaseExpiresAt != nil; got != c.wantLease {
			t.Errorf("after %q the key is leased: %v, want %v", c.err, got, c.wantLease)
		}
	}
}

// An owner notifies only when a request waits for its key. A finish nobody
// waits for sends nothing: a sentinel sent after it is the first notification
// a listener gets (delivery follows commit order); with a waiter counted, the
// finish's notification comes first.
func TestOnlyAWatchedKeyNotifies(t *testing.T) {
	t.Parallel()
	e, pool, clk := testEngine(t)
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		t.Fatal(err)
	}
	finish := func(key string, waiters int) int64 {
		var id int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			id, _, err = claimKey(ctx, tx, Scope{Tenant: "t", Operation: "widgets.create", Key: key}, []byte{1},
				Resource{Type: "widget", ID: key}, clk.Now(), time.Minute, nil)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for range waiters {
			if err := addWaiter(ctx, pool, id, 1); err != nil {
				t.Fatal(err)
			}
		}
		own := &Owner{e: e, op: failingOp{}, KeyID: id, Token: 1}
		b := &pgx.Batch{}
		if err := own.QueueFinish(b, done{}); err != nil {
			t.Fatal(err)
		}
		if err := own.Commit(ctx, b); err != nil {
			t.Fatal(err)
		}
		return id
	}
	firstAfter := func(sentinel string) string {
		if _, err := pool.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, sentinel); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Payload != sentinel { // drain up to the sentinel
			if _, err := conn.WaitForNotification(wctx); err != nil {
				t.Fatal(err)
			}
		}
		return n.Payload
	}
	finish("unwatched", 0)
	if got := firstAfter("sentinel-1"); got != "sentinel-1" {
		t.Errorf("a finish nobody waited for notified %q", got)
	}
	watched := finish("watched", 1)
	if got := firstAfter("sentinel-2"); got != fmt.Sprint(watched) {
		t.Errorf("a finish with a waiter: first notification %q, want the key %d", got, watched)
	}
}

// TestAClientGoneDuringTheClaimDoesNotCutItOff: the claim's batch may have
// committed once it is sent, so the client going away must not cut it off
// (a cut connection would leave the claim in doubt, and the key held until
// its lease ran out). Here the claim waits for a lock when the client goes:
// it still claims, creates and finishes once the lock is free.
func TestAClientGoneDuringTheClaimDoesNotCutItOff(t *testing.T) {
	t.Parallel()
	e, pool, _ := testEngine(t)
	ctx := context.Background()
	createWidgets(t, pool)
	// Another transaction holds the lock the claim's Create will wait for.
	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(ctx) }()
	if _, err := blocker.Exec(ctx, `LOCK TABLE widgets IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	clientCtx, clientGone := context.WithCancel(ctx)
	req := Request{
		Scope: Scope{Tenant: "t", Operation: "widgets.create", Key: "k"}, Fingerprint: []byte{1},
		Resource: Resource{Type: "widget", ID: "w_1"},
		Create:   insertWidget("w_1"),
	}
	result := make(chan error, 1)
	go func() {
		_, err := e.Do(clientCtx, &recordingOp{}, req) // finishes the key
		result <- err
	}()
	// Wait until the claim waits for the lock, then the client goes.
	for waiting := 0; waiting == 0; {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	clientGone()
	time.Sleep(50 * time.Millisecond) // a cancellation, were it sent, reaches the server
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-result; err != nil {
		t.Fatalf("Do = %v, want the claim carried through", err)
	}
	rec, err := Load(ctx, pool, req.Scope)
	if err != nil {
		t.Fatal(err)
	}
	var widgets int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM widgets`).Scan(&widgets); err != nil {
		t.Fatal(err)
	}
	if rec.Response == nil || widgets != 1 {
		t.Fatalf("after the client went: answer %v, %d widgets; want the claim, its widget and the answer", rec.Response, widgets)
	}
}

// A retry of a taken key runs none of its Create: the claim writes nothing
// and raises nothing, and Claimed holds only in the transaction of a claim
// that took its key, so the retry's statements write nothing (no widget
// w_2) and refuse nothing (no error), and a statement after the claim's
// transaction on the same connection does not see Claimed hold.
func TestARetryRunsNoneOfCreate(t *testing.T) {
	t.Parallel()
	e, pool, clk := testEngine(t)
	ctx := context.Background()
	createWidgets(t, pool)
	request := func(widget string) Request {
		return Request{
			Scope: Scope{Tenant: "t", Operation: "widgets.create", Key: "k"}, Fingerprint: []byte{1},
			Resource: Resource{Type: "widget", ID: "w_1"},
			Create: func(b *claim.Batch) {
				insertWidget(widget)(b)
				b.Queue(claim.Gated(func(claimed string) string {
					return `SELECT CASE WHEN NOT (` + claimed + `) THEN 0 ELSE refuse('PA199', 'refused') END`
				}))
			},
		}
	}
	if _, err := e.Do(ctx, &recordingOp{}, request("w_1")); err == nil || !strings.Contains(err.Error(), "PA199") {
		t.Fatalf("first Do = %v, want the refusal of its Create (Claimed holds after a claim)", err)
	}
	first := request("w_1")
	first.Create = insertWidget("w_1")
	if _, err := e.Do(ctx, &recordingOp{}, first); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		reply, err := e.Do(ctx, &recordingOp{}, request("w_2"))
		if err != nil || !reply.Replayed {
			t.Fatalf("retry: %+v, %v; want a replay without error", reply, err)
		}
	}
	var widgets []string
	rows, err := pool.Query(ctx, `SELECT id FROM widgets ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	if widgets, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(widgets, []string{"w_1"}) {
		t.Fatalf("widgets = %v, want the first request's only", widgets)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	b := &pgx.Batch{}
	var id int64
	queueClaim(b, &id, Scope{Tenant: "t", Operation: "widgets.create", Key: "k2"}, []byte{1}, Resource{Type: "widget", ID: "w_3"}, clk.Now(), time.Minute, nil)
	if err := conn.SendBatch(ctx, b).Close(); err != nil || id == 0 {
		t.Fatalf("claim k2: %d, %v", id, err)
	}
	var claimed bool
	if err := conn.QueryRow(ctx, `SELECT coalesce(current_setting('`+claim.Setting+`', true), '') <> ''`).Scan(&claimed); err != nil || claimed {
		t.Fatalf("after the claim's transaction, Claimed = %v (%v), want false", claimed, err)
	}
}

// A group commit (package groupcommit) runs several requests' claims in one
// transaction: a retry's claim behind a claim that took its key must clear
// the condition that one set, or the retry's Create would run.
func TestARetryGroupedBehindAClaimRunsNoneOfCreate(t *testing.T) {
	t.Parallel()
	_, pool, clk := testEngine(t)
	ctx := context.Background()
	createWidgets(t, pool)
	taken := Scope{Tenant: "t", Operation: "widgets.create", Key: "taken"}
	if _, ok, err := claimKey(ctx, pool, taken, []byte{1}, Resource{Type: "widget", ID: "w_0"}, clk.Now(), time.Minute, nil); err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	group := &pgx.Batch{}
	var first, retry int64
	queueClaim(group, &first, Scope{Tenant: "t", Operation: "widgets.create", Key: "new"}, []byte{1},
		Resource{Type: "widget", ID: "w_1"}, clk.Now(), time.Minute, nil)
	insertWidget("w_1")(claim.After(group))
	queueClaim(group, &retry, taken, []byte{1}, Resource{Type: "widget", ID: "w_2"}, clk.Now(), time.Minute, nil)
	insertWidget("w_2")(claim.After(group))
	if err := pool.SendBatch(ctx, group).Close(); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT id FROM widgets ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	widgets, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if first == 0 || retry != 0 || !slices.Equal(widgets, []string{"w_1"}) {
		t.Fatalf("claims %d, %d; widgets %v: want the first claim's widget only", first, retry, widgets)
	}
}

// Concurrent requests' claims and owner steps are committed together when
// they queue up (package groupcommit): with one transaction in flight at a
// time, 40 requests that arrive at once take fewer than their 80 commits,
// and each still creates its widget and finishes its key.
func TestConcurrentRequestsShareCommits(t *testing.T) {
	t.Parallel()
	e, pool, _, reg := measuredEngine(t)
	ctx := context.Background()
	createWidgets(t, pool)
	const n = 40
	start := make(chan struct{})
	errs := make(chan error, n)
	for i := range n {
		go func() {
			<-start
			id := fmt.Sprintf("w_%d", i)
			_, err := e.Do(ctx, &recordingOp{}, Request{
				Scope:       Scope{Tenant: "t", Operation: "widgets.create", Key: id},
				Fingerprint: []byte{1}, Resource: Resource{Type: "widget", ID: id},
				Create: insertWidget(id),
			})
			errs <- err
		}()
	}
	close(start)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var widgets, claims, finished, commits int
	if err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM widgets), (SELECT count(DISTINCT xid) FROM widgets),
		       (SELECT count(*) FROM idempotency_keys WHERE response_status = 201),
		       (SELECT count(DISTINCT xmin::text) FROM idempotency_keys)`).Scan(&widgets, &claims, &finished, &commits); err != nil {
		t.Fatal(err)
	}
	if widgets != n || finished != n {
		t.Fatalf("%d widgets, %d keys finished; want %d of each", widgets, finished, n)
	}
	// The claims' transactions (the widgets') and the finishing steps'
	// (the keys' last writes) each number fewer than the requests.
	if claims >= n || commits >= n {
		t.Fatalf("claims in %d transactions and answers in %d, for %d requests: nothing was grouped", claims, commits, n)
	}
	t.Logf("%d requests: claims in %d transactions, answers in %d", n, claims, commits)
	// The group commit's histogram says so too: by kind, the transactions
	// (its count) and the batches they held (its sum).
	for kind, sent := range groupCommitBatches(t, reg) {
		if sent[1] != n || sent[0] >= n {
			t.Errorf("%s: %d batches in %d transactions, want %d batches in fewer", kind, sent[1], sent[0], n)
		}
	}
}

// measuredEngine is testEngine with one claim and one step in flight, and
// the registry of its metrics.
func measuredEngine(t *testing.T) (*Engine, *pgxpool.Pool, *clock.Fake, *prometheus.Registry) {
	t.Helper()
	pool := pgtest.NewPool(t)
	clk := clock.NewFake(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	e := NewEngine(Deps{
		DB: pool, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: metrics.New(reg),
	}, Config{ReplayTTL: time.Hour, Lease: time.Minute, CommitMode: CommitGroup, CommitConcurrency: 1})
	return e, pool, clk, reg
}

// groupCommitBatches reads paymentsapi_group_commit_batches from reg: by
// kind, the transactions sent and the batches they held.
func groupCommitBatches(t *testing.T, reg *prometheus.Registry) map[string][2]int {
	t.Helper()
	sent := map[string][2]int{}
	for kind, m := range byKind(t, reg, "paymentsapi_group_commit_batches") {
		h := m.GetHistogram()
		sent[kind] = [2]int{int(h.GetSampleCount()), int(h.GetSampleSum())}
	}
	if len(sent) != 2 {
		t.Fatalf("paymentsapi_group_commit_batches has kinds %v, want claims and steps", sent)
	}
	return sent
}

// byKind is the metric name of reg, by its one label (kind).
func byKind(t *testing.T, reg *prometheus.Registry, name string) map[string]*dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.Metric{}
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				got[m.GetLabel()[0].GetValue()] = m
			}
		}
	}
	return got
}

// Claims and owner steps are committed apart, like with like: an owner's
// step neither waits behind a claim in flight nor shares a transaction with
// the claims queued behind it. Here a claim waits on a row lock with the
// one claim slot; a second claim queues behind it; an owner's finishing
// step meanwhile commits at once, alone.
func TestClaimsAndOwnerStepsAreCommittedApart(t *testing.T) {
	t.Parallel()
	e, pool, _ := testEngine(t) // one claim and one step in flight: the default
	ctx := context.Background()
	createWidgets(t, pool)
	do := func(op Operation, id string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := e.Do(ctx, op, Request{
				Scope:       Scope{Tenant: "t", Operation: "widgets.create", Key: id},
				Fingerprint: []byte{1}, Resource: Resource{Type: "widget", ID: id},
				Create: insertWidget(id),
			})
			done <- err
		}()
		return done
	}
	// The owner of w_step has claimed its key and holds its step.
	gate := make(chan struct{})
	step := do(heldOp{release: gate}, "w_step")
	waitFor(t, func() bool { return widgetExists(t, pool, "w_step") })
	// The claim of w_blocked waits on another transaction's w_blocked.
	holder := holdWidget(t, pool, "w_blocked")
	blocked := do(&recordingOp{}, "w_blocked")
	waitFor(t, func() bool { return waitingOnALock(t, pool) })
	// A claim queued behind it, with which the step, had it queued in the
	// same committer, would have been grouped (the assertions below do not
	// depend on its being queued yet).
	queued := do(&recordingOp{}, "w_queued")
	time.Sleep(50 * time.Millisecond)
	close(gate)
	select {
	case err := <-step:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the owner's step waited behind the claim in flight")
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []<-chan error{blocked, queued} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	var mixed int
	if err := pool.QueryRow(ctx, `
		SELECT count(*) FROM widgets w JOIN idempotency_keys k
		    ON (w.xid::text::bigint % 4294967296) = k.xmin::text::bigint
		WHERE k.response_status IS NOT NULL`).Scan(&mixed); err != nil {
		t.Fatal(err)
	}
	if mixed != 0 {
		t.Fatalf("%d keys finished in a transaction that also claimed keys", mixed)
	}
}

// holdWidget inserts widget id in a transaction it leaves open (rolled
// back at the test's end): a claim that writes id waits on it.
func holdWidget(t *testing.T, pool *pgxpool.Pool, id string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Rollback(ctx) })
	if _, err := holder.Exec(ctx, `INSERT INTO widgets (id) VALUES ($1)`, id); err != nil {
		t.Fatal(err)
	}
	return holder
}

// waitFor waits, up to 10 s, until cond holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

func widgetExists(t *testing.T, pool *pgxpool.Pool, id string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM widgets WHERE id = $1)`, id).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// waitingOnALock reports whether a session of pool's database waits on a
// lock.
func waitingOnALock(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `
		SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// createWidgets creates the table insertWidget writes, with the id of the
// transaction that wrote each row.
func createWidgets(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(),
		`CREATE TABLE widgets (id text PRIMARY KEY, xid xid8 NOT NULL DEFAULT pg_current_xact_id())`); err != nil {
		t.Fatal(err)
	}
}

// insertWidget is a Create that inserts widget id.
func insertWidget(id string) func(*claim.Batch) {
	return func(b *claim.Batch) {
		b.Queue(claim.Gated(func(claimed string) string {
			return `INSERT INTO widgets (id) SELECT $1 WHERE ` + claimed
		}, id))
	}
}

// The schedule of a key (Look): a decided look replaces what was booked and
// restarts the count of attempts; an owner that may only look up (a
// webhook's) never moves a booked look later, never clears it, and never
// restarts the count; LookSoon keeps what was booked.
func TestLooksBookedByOwners(t *testing.T) {
	t.Parallel()
	e, pool, clk := testEngine(t)
	ctx := context.Background()
	id := claimWidget(t, pool, clk.Now())
	booked := func() (at *time.Time, attempts int) {
		if err := pool.QueryRow(ctx, `SELECT recovery_next_at, recovery_attempts FROM idempotency_keys WHERE id = $1`, id).
			Scan(&at, &attempts); err != nil {
			t.Fatal(err)
		}
		return at, attempts
	}
	release := func(lookupOnly bool, look Look) {
		t.Helper()
		own := &Owner{e: e, op: failingOp{}, KeyID: id, Token: 1, LookupOnly: lookupOnly}
		b := &pgx.Batch{}
		own.QueueRelease(b, look)
		if err := own.Commit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET recovery_attempts = 7 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	soon, later := clk.Now().Add(time.Minute), clk.Now().Add(24*time.Hour)
	check := func(step string, want *time.Time, wantAttempts int) {
		t.Helper()
		at, attempts := booked()
		if (at == nil) != (want == nil) || (at != nil && !at.Equal(*want)) || attempts != wantAttempts {
			t.Errorf("%s: booked %v after %d attempts, want %v after %d", step, at, attempts, want, wantAttempts)
		}
		if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET recovery_attempts = 7 WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	release(false, LookAt(soon))
	check("a decided look", &soon, 0)
	release(true, LookAt(later))
	check("a later look by a look-up-only owner", &soon, 7)
	release(true, LookNever())
	check("no look by a look-up-only owner", &soon, 7)
	release(false, LookSoon())
	check("look soon", &soon, 7)
	release(false, LookAt(later))
	check("a later decided look", &later, 0)
	release(true, LookAt(soon))
	check("an earlier look by a look-up-only owner", &soon, 7)
	release(false, LookNever())
	check("never", nil, 0)
	release(true, LookAt(later))
	check("a look by a look-up-only owner when none is booked", &later, 7)
}

// A duplicate of a request in flight is told to come back soon while the
// owner was heard from within one outside call and the engine's
// RetryAfter (the claim, a takeover or a renewal of its lease), and, once
// it has been silent for longer and so is presumed dead, when its lease
// runs out: not before, to another 409.
func TestInUseAdviceIsTheLeaseLeftOnceTheOwnerIsPresumedDead(t *testing.T) {
	t.Parallel()
	e, pool, clk := testEngine(t) // a lease of a minute
	e.cfg.RetryAfter, e.cfg.OutsideCall = time.Second, 5*time.Second
	start := clk.Now()
	claimWidget(t, pool, start)
	req := Request{Scope: Scope{Tenant: "t", Operation: "widgets.create", Key: "k"}, Fingerprint: []byte{1},
		Resource: Resource{Type: "widget", ID: "w_2"}}
	for _, c := range []struct {
		at, want time.Duration
	}{
		{0, time.Second},
		{500 * time.Millisecond, time.Second},
		{6 * time.Second, time.Second}, // silent for exactly one call and RetryAfter: still presumed at work
		{6*time.Second + time.Millisecond, 54*time.Second - time.Millisecond},
		{50 * time.Second, 10 * time.Second},
		{59*time.Second + 500*time.Millisecond, time.Second}, // never less than RetryAfter
	} {
		clk.Set(start.Add(c.at))
		_, err := e.Do(context.Background(), failingOp{}, req)
		var inUse *KeyInUseError
		if !errors.As(err, &inUse) {
			t.Fatalf("at +%s: %v, want 409 in use", c.at, err)
		}
		if inUse.RetryAfter != c.want {
			t.Errorf("at +%s: advice %s, want %s", c.at, inUse.RetryAfter, c.want)
		}
	}
}

// laterOp releases its key with the look it decided (not known before at)
// and answers "not known yet".
type laterOp struct {
	renders
	at time.Time
}

func (laterOp) Name() string { return "widgets.create" }
func (o laterOp) Resume(ctx context.Context, own *Owner) (Result, error) {
	b := &pgx.Batch{}
	own.QueueRelease(b, LookAt(o.at))
	return done{}, own.Commit(ctx, b)
}

// An answer that is not final, whose owner decided nothing can be known
// before a look it booked, tells the client to come back then, not after
// the engine's usual second.
func TestANotYetAnswerComesBackAtTheBookedLook(t *testing.T) {
	t.Parallel()
	e, _, clk := testEngine(t)
	e.cfg.RetryAfter = time.Second
	req := Request{Scope: Scope{Tenant: "t", Operation: "widgets.create", Key: "later"}, Fingerprint: []byte{1},
		Resource: Resource{Type: "widget", ID: "w_later"}}
	reply, err := e.Do(context.Background(), laterOp{at: clk.Now().Add(30 * time.Second)}, req)
	if err != nil || reply.ComeBack != 30*time.Second {
		t.Fatalf("reply %+v, %v; want ComeBack 30s", reply, err)
	}
	req.Scope.Key, req.Resource.ID = "soon", "w_soon"
	if reply, err := e.Do(context.Background(), laterOp{at: clk.Now()}, req); err != nil || reply.ComeBack != 0 {
		t.Fatalf("a look due now: %+v, %v; want the engine's RetryAfter", reply, err)
	}
}
