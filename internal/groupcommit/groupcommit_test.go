package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// held sends batches on db, but holds the first one until released, so
// that a test can queue others behind it; it records the size of every
// batch it sends.
type held struct {
	db        Sender
	release   chan struct{}
	mu        sync.Mutex
	sent      []int
	deadlines []time.Time // of each send's context
	fail      error       // if set, every batch after the first fails with it, unsent
	panics    bool        // if set, every batch after the first panics, unsent
}

func (h *held) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	h.mu.Lock()
	h.sent = append(h.sent, batches(b))
	d, _ := ctx.Deadline()
	h.deadlines = append(h.deadlines, d)
	first := len(h.sent) == 1
	h.mu.Unlock()
	if first {
		<-h.release
	} else if h.fail != nil {
		return failed{h.fail}
	} else if h.panics {
		panic("boom")
	}
	return h.db.SendBatch(ctx, b)
}

// batches is how many of b's queries are the requests' (one each, in these
// tests): a group's first sets its lock_timeout.
func batches(b *pgx.Batch) int {
	n := b.Len()
	if n > 0 && b.QueuedQueries[0].SQL == groupSettings {
		n--
	}
	return n
}

func (h *held) sizes() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.sent...)
}

// failed is the results of a batch whose outcome was lost.
type failed struct{ err error }

func (f failed) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f failed) Query() (pgx.Rows, error)         { return nil, f.err }
func (f failed) QueryRow() pgx.Row                { return nil }
func (f failed) Close() error                     { return f.err }
func (f failed) Tx() pgx.Tx                       { return nil }

func newTable(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewEmptyPool(t)
	if _, err := pool.Exec(context.Background(), `
		CREATE TABLE items (n int PRIMARY KEY, xid xid8 NOT NULL DEFAULT pg_current_xact_id(), seq bigserial)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

// insert is a batch that writes row n and reads it back into *got.
func insert(n int, got *int) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO items (n) VALUES ($1) RETURNING n`, n).QueryRow(func(r pgx.Row) error { return r.Scan(got) })
	return b
}

// group commits batches 1..len(batches)-1 while batch 0 is in flight on
// c's one slot, so that they queue up behind it, and returns each one's
// error. Batch i has key len(batches)-i: a group is sent in the order of
// its keys, here the reverse of arrival.
func group(t *testing.T, c *Committer, h *held, batches []*pgx.Batch) []error {
	t.Helper()
	errs := make([]error, len(batches))
	first := holdFirst(t, c, h, batches[0])
	var wg sync.WaitGroup
	for i := 1; i < len(batches); i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.Commit(context.Background(), uint64(len(batches)-i), batches[i]) }()
	}
	waitQueued(t, c, len(batches)-1)
	close(h.release)
	wg.Wait()
	errs[0] = <-first
	return errs
}

// holdFirst commits b on c while h holds its send, and returns once it is
// in flight: the channel gets its error when h is released.
func holdFirst(t *testing.T, c *Committer, h *held, b *pgx.Batch) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Commit(context.Background(), 0, b) }()
	waitFor(t, func() bool { return len(h.sizes()) == 1 })
	return done
}

// itemsWithItem1Locked is a table holding item 1, and a
// transaction that locks item 1 (rolled back at the test's end).
func itemsWithItem1Locked(t *testing.T) (*pgxpool.Pool, pgx.Tx) {
	t.Helper()
	pool := newTable(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO items (n) VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Rollback(ctx) })
	if _, err := holder.Exec(ctx, `SELECT FROM items WHERE n = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	return pool, holder
}

// commitBesideABlockedBatch commits blocked (key 1, whose row holder has
// locked) and free (key 2) on c, as one group behind a first batch held
// back until both are queued: free must commit within 3 s while the lock
// is held, and blocked once holder commits.
func commitBesideABlockedBatch(t *testing.T, c *Committer, h *held, holder pgx.Tx, blocked, free *pgx.Batch) {
	t.Helper()
	ctx := context.Background()
	first := holdFirst(t, c, h, insert(10, new(int)))
	blockedErr, freeErr := make(chan error, 1), make(chan error, 1)
	go func() { blockedErr <- c.Commit(ctx, 1, blocked) }() // sent first: key 1
	go func() { freeErr <- c.Commit(ctx, 2, free) }()
	waitQueued(t, c, 2)
	close(h.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err := <-freeErr:
		if err != nil {
			t.Fatalf("the free batch: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("the free batch waited on its group's blocked one; sent %v", h.sizes())
	}
	t.Logf("the free batch committed %v after its group was sent", time.Since(start).Round(time.Millisecond))
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-blockedErr; err != nil {
		t.Fatalf("the blocked batch, once the lock was let go: %v", err)
	}
}

// waitQueued waits until n batches are queued on c.
func waitQueued(t *testing.T, c *Committer, n int) {
	t.Helper()
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.waiting) == n })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// Batches that queue up while another is in flight are committed next, in
// one transaction and one round trip, each reading its own rows.
func TestBatchesThatQueueUpShareOneCommit(t *testing.T) {
	pool := newTable(t)
	h := &held{db: pool, release: make(chan struct{})}
	c := New(h, Options{Concurrency: 1})
	got := make([]int, 6)
	batches := make([]*pgx.Batch, len(got))
	for i := range batches {
		batches[i] = insert(i+1, &got[i])
	}
	for i, err := range group(t, c, h, batches) {
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if got[i] != i+1 {
			t.Fatalf("batch %d read %d, want its own row %d", i, got[i], i+1)
		}
	}
	if s := h.sizes(); fmt.Sprint(s) != "[1 5]" {
		t.Fatalf("sent batches of %v queries, want [1 5]: the first alone, the five behind it together", s)
	}
	var first, grouped, xids int
	if err := pool.QueryRow(context.Background(), `
		SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n > 1), count(DISTINCT xid) FROM items`).
		Scan(&first, &grouped, &xids); err != nil {
		t.Fatal(err)
	}
	if first != 1 || grouped != 5 || xids != 2 {
		t.Fatalf("rows %d + %d in %d transactions, want 1 + 5 in 2", first, grouped, xids)
	}
	rows, err := pool.Query(context.Background(), `SELECT n FROM items WHERE n > 1 ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	order, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(order) != "[6 5 4 3 2]" {
		t.Fatalf("the group wrote rows %v, want [6 5 4 3 2]: in the order of their keys", order)
	}
}

// Below Options.Concurrency a batch is sent at once, alone, whatever is in
// flight: only what would wait for a slot is grouped.
func TestBelowTheConcurrencyABatchIsSentAtOnce(t *testing.T) {
	pool := newTable(t)
	h := &held{db: pool, release: make(chan struct{})}
	c := New(h, Options{Concurrency: 2})
	var got [2]int
	done := holdFirst(t, c, h, insert(1, &got[0]))
	if err := c.Commit(context.Background(), 0, insert(2, &got[1])); err != nil || got[1] != 2 {
		t.Fatalf("second batch: %v, read %d", err, got[1])
	}
	close(h.release)
	if err := <-done; err != nil || got[0] != 1 {
		t.Fatalf("first batch: %v, read %d", err, got[0])
	}
	if s := h.sizes(); fmt.Sprint(s) != "[1 1]" {
		t.Fatalf("sent %v, want each alone", s)
	}
}

// When PostgreSQL refuses one batch of a group, the group is rolled back
// and each batch is sent again alone: only the refused one fails.
func TestARefusedBatchFailsAloneInItsGroup(t *testing.T) {
	pool := newTable(t)
	h := &held{db: pool, release: make(chan struct{})}
	var sent []int // Options.Sent: each transaction's batches
	c := New(h, Options{Concurrency: 1, Sent: func(n int) { sent = append(sent, n) }})
	got := make([]int, 4)
	batches := []*pgx.Batch{insert(1, &got[0]), insert(2, &got[1]), insert(1, &got[2]), insert(3, &got[3])}
	errs := group(t, c, h, batches)
	if errs[0] != nil || errs[1] != nil || errs[3] != nil {
		t.Fatalf("errors %v: only the duplicate of row 1 may fail", errs)
	}
	if errs[2] == nil {
		t.Fatal("the duplicate of row 1 committed")
	}
	if got[1] != 2 || got[3] != 3 {
		t.Fatalf("read %v", got)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM items`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("%d rows, want 3", n)
	}
	// The first alone; the group of three; then each of the three alone.
	if s := h.sizes(); fmt.Sprint(s) != "[1 3 1 1 1]" {
		t.Fatalf("sent %v", s)
	}
	if fmt.Sprint(sent) != "[1 3 1 1 1]" {
		t.Fatalf("Options.Sent was told %v, want [1 3 1 1 1]", sent)
	}
}

// A group whose outcome is not known (its connection broke, or a FATAL
// ended its session: one waiting for a synchronous standby has committed
// locally) may have committed: each of its requests gets the error, and
// nothing is sent again, which could write a request twice.
func TestAGroupWhoseOutcomeIsLostIsNotSentAgain(t *testing.T) {
	for _, lost := range []error{
		errors.New("connection lost"),
		&pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"},
	} {
		t.Run(lost.Error(), func(t *testing.T) {
			pool := newTable(t)
			h := &held{db: pool, release: make(chan struct{}), fail: lost}
			c := New(h, Options{Concurrency: 1})
			got := make([]int, 3)
			errs := group(t, c, h, []*pgx.Batch{insert(1, &got[0]), insert(2, &got[1]), insert(3, &got[2])})
			if errs[0] != nil || !errors.Is(errs[1], lost) || !errors.Is(errs[2], lost) {
				t.Fatalf("errors %v: the group's two must get its error", errs)
			}
			if s := h.sizes(); fmt.Sprint(s) != "[1 2]" {
				t.Fatalf("sent %v, want [1 2]: the lost group not sent again", s)
			}
		})
	}
}

// Many requests, a few slots: every batch is committed once, with its
// own rows, however the groups formed (run with -race).
func TestConcurrentRequestsAreEachCommittedOnce(t *testing.T) {
	pool := newTable(t)
	c := New(pool, Options{Concurrency: 2, MaxBatches: 5})
	const n = 400
	got := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Commit(context.Background(), uint64(i), insert(i, &got[i]))
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || got[i] != i {
			t.Fatalf("request %d: %v, read %d", i, errs[i], got[i])
		}
	}
	var rows, xids int
	if err := pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT xid) FROM items`).Scan(&rows, &xids); err != nil {
		t.Fatal(err)
	}
	if rows != n {
		t.Fatalf("%d rows, want %d", rows, n)
	}
	// With two slots for 400 requests at once, most queue and are grouped;
	// no group holds more than MaxBatches.
	if xids >= n/2 || xids < n/5 {
		t.Fatalf("%d requests in %d transactions: want them grouped, at most 5 a group", n, xids)
	}
	t.Logf("%d requests in %d transactions", n, xids)
}

// A batch still queued when its context ends is not sent: the caller gets
// the context's error and may report the step failed, sure it never
// committed. A sent group is bounded by its batches' earliest deadline, so
// that no batch commits later than its own context allowed.
func TestAQueuedBatchWhoseContextEndsIsNotSent(t *testing.T) {
	pool := newTable(t)
	h := &held{db: pool, release: make(chan struct{})}
	c := New(h, Options{Concurrency: 1})
	var got [4]int
	first := holdFirst(t, c, h, insert(1, &got[0]))

	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error)
	go func() { gone <- c.Commit(ctx, 1, insert(2, &got[1])) }()
	soon, cancelSoon := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelSoon()
	grouped := make(chan error, 2)
	go func() { grouped <- c.Commit(soon, 2, insert(3, &got[2])) }()
	go func() { grouped <- c.Commit(context.Background(), 3, insert(4, &got[3])) }()
	waitQueued(t, c, 3)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled batch: %v, want context.Canceled", err)
	}
	close(h.release)
	for _, ch := range []<-chan error{first, grouped, grouped} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	var rows []int32
	r, err := pool.Query(context.Background(), `SELECT n FROM items ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	if rows, err = pgx.CollectRows(r, pgx.RowTo[int32]); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rows) != "[1 3 4]" || fmt.Sprint(h.sizes()) != "[1 2]" {
		t.Fatalf("rows %v, sends %v: want [1 3 4] and [1 2], the cancelled batch never sent", rows, h.sizes())
	}
	h.mu.Lock()
	groupDeadline := h.deadlines[1]
	h.mu.Unlock()
	if want, _ := soon.Deadline(); !groupDeadline.Equal(want) {
		t.Fatalf("the group's deadline is %v, want its earliest batch's, %v", groupDeadline, want)
	}
}

// A group whose sending panics (a callback, say) does not wedge the
// committer: the panic goes on in the request that sent the group, the
// others get ErrSenderPanicked (their outcome is unknown), and the slot is
// handed on.
func TestAPanickingGroupLeavesTheCommitterWorking(t *testing.T) {
	pool := newTable(t)
	h := &held{db: pool, release: make(chan struct{}), panics: true}
	c := New(h, Options{Concurrency: 1})
	var got [3]int
	first := holdFirst(t, c, h, insert(1, &got[0]))
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_ = c.Commit(context.Background(), 1, insert(2, &got[1])) // key 1: it sends the group
	}()
	other := make(chan error, 1)
	go func() { other <- c.Commit(context.Background(), 2, insert(3, &got[2])) }()
	waitQueued(t, c, 2)
	close(h.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if p := <-panicked; p != "boom" {
		t.Fatalf("the sender recovered %v, want the send's panic", p)
	}
	if err := <-other; !errors.Is(err, ErrSenderPanicked) {
		t.Fatalf("the other batch of the group: %v, want ErrSenderPanicked", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight != 0 || len(c.waiting) != 0 {
		t.Fatalf("in flight %d, waiting %d: want the slot handed back", c.inFlight, len(c.waiting))
	}
}

// A batch of a group that waits on a lock held by a long transaction does
// not hold the others back until the group's deadline (each of them then
// unknown): past the group's lock_timeout PostgreSQL refuses the group,
// the others commit alone, and the blocked one waits on alone.
func TestABatchWaitingOnALockDoesNotHoldItsGroupBack(t *testing.T) {
	pool, holder := itemsWithItem1Locked(t)
	h := &held{db: pool, release: make(chan struct{})}
	c := New(h, Options{Concurrency: 1, Timeout: 5 * time.Second, LockTimeout: 100 * time.Millisecond})
	blocked := &pgx.Batch{}
	blocked.Queue(`UPDATE items SET seq = seq + 1 WHERE n = 1`)
	var got int
	commitBesideABlockedBatch(t, c, h, holder, blocked, insert(2, &got))
	if got != 2 {
		t.Fatalf("the free batch read %d", got)
	}
	// The first alone; the group; then each of its two alone.
	if s := h.sizes(); fmt.Sprint(s) != "[1 2 1 1]" {
		t.Fatalf("sent %v", s)
	}
}
