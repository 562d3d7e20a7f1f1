package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/rowset"
)

// insertItem writes item n unless it exists, and returns it; its second
// statement stamps it (seq = -n), so that a merge has two statements.
var (
	insertItem = rowset.New([]rowset.Column{{Name: "n", Type: "int"}}, `
		, ins AS (INSERT INTO items (n) SELECT n FROM input ORDER BY ord ON CONFLICT DO NOTHING RETURNING n)
		SELECT input.ord, ins.n FROM input JOIN ins USING (n)`)
	stampItem = rowset.New([]rowset.Column{{Name: "n", Type: "int"}}, `
		UPDATE items SET seq = -items.n FROM input WHERE items.n = input.n`)
	insertItemOrRefuse = rowset.New([]rowset.Column{{Name: "n", Type: "int"}}, `
		INSERT INTO items (n) SELECT n FROM input ORDER BY ord`)
)

// mergeable is a batch of insertItem and stampItem for n: got is n if it
// wrote the item, -1 if the item was there already.
func mergeable(n int, got *int) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(insertItem.SQL(), n).QueryRow(func(r pgx.Row) error {
		err := r.Scan(nil, got)
		if errors.Is(err, pgx.ErrNoRows) {
			*got, err = -1, nil
		}
		return err
	})
	b.Queue(stampItem.SQL(), n)
	return b
}

// groupOf commits batches (keys: their positions, unless keys says) while
// a first batch is in flight, so that they are sent as one group, and
// returns each one's error.
func groupOf(t *testing.T, c *Committer, h *held, keys []uint64, batches ...*pgx.Batch) []error {
	t.Helper()
	first := holdFirst(t, c, h, insert(1000, new(int)))
	errs := make([]error, len(batches))
	var wg sync.WaitGroup
	for i, b := range batches {
		key := uint64(i + 1)
		if keys != nil {
			key = keys[i]
		}
		wg.Go(func() { errs[i] = c.Commit(context.Background(), key, b) })
	}
	waitQueued(t, c, len(batches))
	close(h.release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	return errs
}

// mergingWithItem2 is a table holding item 2, and a committer that merges
// like batches, with one slot, sending through h.
func mergingWithItem2(t *testing.T) (*pgxpool.Pool, *held, *Committer) {
	t.Helper()
	pool := newTable(t)
	if _, err := pool.Exec(context.Background(), `INSERT INTO items (n) VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	h := &held{db: pool, release: make(chan struct{})}
	return pool, h, New(h, Options{Concurrency: 1, Merge: rowset.Many})
}

// Like batches are sent as one statement each: three batches of two
// statements are two statements in the group, and each batch gets its own
// row, or none where its statement returned none for it.
func TestLikeBatchesAreMergedIntoOneStatementEach(t *testing.T) {
	pool, h, c := mergingWithItem2(t)
	ctx := context.Background()
	got := []int{0, 0, 0}
	errs := groupOf(t, c, h, nil, mergeable(1, &got[0]), mergeable(2, &got[1]), mergeable(3, &got[2]))
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(got) != "[1 -1 3]" {
		t.Fatalf("read %v, want [1 -1 3]: each batch its own row, none for the item that was there", got)
	}
	if s := h.sizes(); fmt.Sprint(s) != "[1 2]" {
		t.Fatalf("sent %v, want [1 2]: the group's six statements as two", s)
	}
	var stamped, xids int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE seq = -n), count(DISTINCT xid) FILTER (WHERE n <> 2) FROM items WHERE n < 1000`).Scan(&stamped, &xids); err != nil {
		t.Fatal(err)
	}
	if stamped != 3 || xids != 1 {
		t.Fatalf("%d items stamped, new ones in %d transactions; want 3 in 1", stamped, xids)
	}
}

// A refused merged statement says nothing of whose row it was: the group is
// sent again unmerged, which finds the batch refused, then each batch
// alone, that one last, and only the one refused alone fails.
func TestARefusedMergeIsSentBatchByBatch(t *testing.T) {
	_, h, c := mergingWithItem2(t)
	batch := func(n int) *pgx.Batch { b := &pgx.Batch{}; b.Queue(insertItemOrRefuse.SQL(), n); return b }
	errs := groupOf(t, c, h, nil, batch(1), batch(2), batch(3))
	if errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Fatalf("errors %v: only the duplicate of item 2 may fail", errs)
	}
	if s := h.sizes(); fmt.Sprint(s) != "[1 1 3 1 1 1]" {
		t.Fatalf("sent %v, want [1 1 3 1 1 1]: the merge, the group unmerged, then each alone", s)
	}
}

// Batches with the same key are not merged: an operation that keys its
// batches by what they contend for may tell their rows apart by it.
func TestBatchesWithOneKeyAreNotMerged(t *testing.T) {
	pool := newTable(t)
	h := &held{db: pool, release: make(chan struct{})}
	c := New(h, Options{Concurrency: 1, Merge: rowset.Many})
	got := []int{0, 0, 0}
	errs := groupOf(t, c, h, []uint64{7, 7, 8}, mergeable(1, &got[0]), mergeable(2, &got[1]), mergeable(3, &got[2]))
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Two units: one batch of key 7 with the batch of key 8 (merged), the
	// other batch of key 7 alone: 2 + 2 statements.
	if s := h.sizes(); fmt.Sprint(s) != "[1 4]" {
		t.Fatalf("sent %v, want [1 4]", s)
	}
	if fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("read %v", got)
	}
}

// Batches whose statements are the same but whose arguments are not as
// many are not merged: a merge would have no argument to take for one of
// them. (pgx refuses to build such a batch, before sending anything; the
// group gets its error, as for any batch that cannot be built.)
func TestBatchesWithOtherArgumentsAreNotMerged(t *testing.T) {
	_, h, c := mergingWithItem2(t)
	odd := &pgx.Batch{}
	odd.Queue(insertItemOrRefuse.SQL(), 5, 6)
	ok := &pgx.Batch{}
	ok.Queue(insertItemOrRefuse.SQL(), 7)
	errs := groupOf(t, c, h, nil, ok, odd)
	if errs[1] == nil {
		t.Fatal("the batch with two arguments for one parameter did not fail")
	}
}

// A group that merges batches plans its statements generically (a merged
// statement's custom plan would be made anew at each execution: its arrays'
// lengths are in it), and by each row's index whatever the table's size
// looked like then (mergedPlans). A group that merges nothing leaves the
// settings as they are.
func TestAMergingGroupUsesGenericPlans(t *testing.T) {
	planning := rowset.New([]rowset.Column{{Name: "n", Type: "int"}}, `
		SELECT input.ord, concat_ws(',', current_setting('plan_cache_mode'), current_setting('enable_seqscan'),
		       current_setting('enable_hashjoin'), current_setting('enable_mergejoin')) FROM input`)
	batch := func(mode *string) *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue(planning.SQL(), 1).QueryRow(func(r pgx.Row) error { return r.Scan(nil, mode) })
		return b
	}
	for _, c := range []struct {
		keys []uint64 // one key: not merged
		want string
	}{
		{nil, "[force_generic_plan,off,off,off force_generic_plan,off,off,off]"},
		{[]uint64{7, 7}, "[auto,on,on,on auto,on,on,on]"},
	} {
		_, h, committer := mergingWithItem2(t)
		modes := make([]string, 2)
		for _, err := range groupOf(t, committer, h, c.keys, batch(&modes[0]), batch(&modes[1])) {
			if err != nil {
				t.Fatal(err)
			}
		}
		if fmt.Sprint(modes) != c.want {
			t.Errorf("keys %v: planned with %v, want %s", c.keys, modes, c.want)
		}
	}
}

// Only batches next to each other in the group's order are merged: a merge
// runs where its first batch stands, so merging the batches of keys 1 and
// 3 across key 2's, of another shape, would take key 3's locks before key
// 2's, out of the order every group keeps.
func TestOnlyNeighboursAreMerged(t *testing.T) {
	c := New(nil, Options{Merge: rowset.Many})
	like := func(key uint64) *request {
		b := &pgx.Batch{}
		b.Queue(insertItem.SQL(), int(key))
		return &request{key: key, b: b}
	}
	other := func(key uint64) *request {
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`)
		return &request{key: key, b: b}
	}
	for _, tc := range []struct {
		group []*request
		want  string
	}{
		{[]*request{like(1), other(2), like(3)}, "[[0] [1] [2]]"},
		{[]*request{like(1), like(2), other(3), like(4), like(5)}, "[[0 1] [2] [3 4]]"},
		{[]*request{like(1), like(1), like(2)}, "[[0] [1 2]]"}, // one key: not merged
	} {
		if got := fmt.Sprint(c.units(tc.group, true)); got != tc.want {
			t.Errorf("units %s, want %s", got, tc.want)
		}
	}
}

// A merged statement refused because one batch's row waited on a lock too
// long does not hold the others back: the group is sent again unmerged,
// which finds that batch, and the others are sent alone before it (as in
// TestABatchWaitingOnALockDoesNotHoldItsGroupBack). Sent alone in the
// group's order instead, the free batch waited behind the blocked one
// until the group's deadline, and its outcome was unknown.
func TestAMergedBatchWaitingOnALockDoesNotHoldItsGroupBack(t *testing.T) {
	pool, holder := itemsWithItem1Locked(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO items (n) VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	h := &held{db: pool, release: make(chan struct{})}
	c := New(h, Options{Concurrency: 1, Timeout: 5 * time.Second, LockTimeout: 100 * time.Millisecond, Merge: rowset.Many})
	bump := func(n int) *pgx.Batch { b := &pgx.Batch{}; b.Queue(stampItem.SQL(), n); return b }
	commitBesideABlockedBatch(t, c, h, holder, bump(1), bump(2))
	// The first alone; the merge; the group unmerged; then each alone.
	if s := h.sizes(); fmt.Sprint(s) != "[1 1 2 1 1]" {
		t.Fatalf("sent %v", s)
	}
}
