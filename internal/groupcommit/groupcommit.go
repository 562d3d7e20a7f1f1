// Package groupcommit commits the batches of concurrent requests together
// when the database is busy: batches that would wait for a free slot are
// sent, once one frees up, as one transaction, in one round trip, with one
// commit.
//
// A commit is a large part of what a short transaction costs PostgreSQL
// (its snapshot, its commit record, its WAL flush, its end), and a round
// trip is most of what it costs the client. Up to Options.Concurrency
// transactions are in flight at once, each batch alone, sent at once: no
// request waits for a timer or for company. Beyond that, batches queue, and
// whoever's transaction ends first sends all that queued as one group, in
// its slot. So grouping takes up only what would otherwise have waited
// for a core, and under load a group of n requests pays for one commit.
//
// What a request gets is what its own batch alone would have given it:
//   - its statements run in its order, each with its callbacks
//     (QueuedQuery.QueryRow and the like), before or after another
//     request's, never between them (unless they are merged with like
//     batches' into statements over many rows: see Options.Merge and
//     merge.go);
//   - if PostgreSQL refuses any statement of a group, it rolled the whole
//     group back (an ERROR is its word that nothing of the group was
//     written), and each batch of the group is sent again alone, the
//     refused one last, so that only the batches that fail alone fail and
//     the others need not wait for it (another request may commit
//     between two of them: a merchant reference may go to the other
//     payment, as it could have without the group);
//   - if the outcome is not known (the connection broke, the deadline
//     passed, the session was ended by a FATAL: one waiting for a
//     synchronous standby has committed locally), every request of the
//     group gets the error, as a batch whose commit was lost in flight
//     would: it may or may not have been written, and nothing is sent
//     again.
//
// The cost of sharing: a group is as slow as its slowest batch. So a group
// waits for a row lock at most Options.LockTimeout (and at most half of
// what is left of its time): a batch that waits longer, on a lock held by
// a long transaction, makes PostgreSQL refuse the group, and each batch is
// sent again alone, so that only that one waits on. Any other slow
// statement still takes the whole group down when the group's deadline
// passes, each request with an unknown outcome (resolved as any lost commit
// is: the key's record says what committed).
//
// What a batch may not do, since it shares its transaction: begin or end a
// transaction itself (pgx.Batch.BeginTx, BEGIN, COMMIT), or depend on
// transaction-local state it did not set (a set_config(..., true) or SET
// LOCAL of an earlier request of the group: set it both ways). A callback
// may run on a group that is then rolled back, and runs again when the
// batch is sent alone; callbacks must only read their row into the
// request's variables, which mean nothing if the batch fails (as with a
// single pgx batch, whose earlier callbacks run before a later statement
// fails).
//
// Locks. A group holds every lock its batches take until it commits. Each
// group sends its batches in the order of their keys (Commit's key: the
// hash of the request's idempotency key, say), so that two groups take the
// locks of requests with the same keys in the same order. Requests on
// different keys that contend for one row (two payments with one merchant
// reference, refunds of one payment) can still make two groups wait for
// each other: PostgreSQL breaks that deadlock (after its deadlock_timeout)
// by refusing a statement of one group, whose batches are then sent again
// alone.
package groupcommit

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Sender sends a batch as one implicit transaction: a pool or connection.
type Sender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Options are a Committer's settings.
type Options struct {
	// Concurrency is how many transactions may be in flight at once before
	// batches queue up and are grouped (default 2): enough to keep
	// PostgreSQL's cores busy, so that grouping only takes up what would
	// otherwise wait for a core.
	Concurrency int
	// MaxBatches bounds the batches of one group (default 64).
	MaxBatches int
	// Timeout bounds one group's round trip and commit, from when it is
	// sent (default 10 s). A request's own context does not: once a group
	// is sent, each of its requests waits for the outcome.
	Timeout time.Duration
	// LockTimeout bounds a group's wait for any one lock (PostgreSQL's
	// lock_timeout, set for the group's transaction only; default 1 s),
	// and is at most half of what is left of the group's time when it is
	// sent. A batch sent alone waits as its own context allows.
	LockTimeout time.Duration
	// Sent, if set, is told how many batches each transaction held, as it
	// is sent: a group's, then each of a refused group's sent alone.
	Sent func(batches int)
	// Merge, if set, is the text for many rows of a statement written for
	// one, and false for a statement that has none (rowset.Many). The
	// batches of a group whose statements all have one, the same
	// statements in the same order, are then sent as those statements
	// each once, over arrays of their parameters: see merge.
	Merge func(sql string) (string, bool)
	// Merged, if set, is told how many batches each merge held, as it is
	// sent.
	Merged func(batches int)
	// Plain, if set, reports whether a statement's callback reads its row
	// as the plain statement returns it: without the ordinal its many-row
	// text returns first (rowset.IsPaired). Otherwise a merged statement's
	// callback gets the ordinal too, as the one-row text of New returns it.
	Plain func(sql string) bool
}

// Committer commits batches, grouping those that queue up.
type Committer struct {
	db   Sender
	opts Options

	mu       sync.Mutex
	inFlight int        // transactions sent and not yet answered
	waiting  []*request // batches queued for the next group, in arrival order

	many sync.Map // a statement's text → its text for many rows, "" for none (Options.Merge)
}

// New returns a Committer that sends its groups on db.
func New(db Sender, opts Options) *Committer {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 2
	}
	if opts.MaxBatches <= 0 {
		opts.MaxBatches = 64
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	return &Committer{db: db, opts: opts}
}

// request is one batch waiting for its group's outcome.
type request struct {
	key      uint64
	b        *pgx.Batch
	deadline time.Time // its context's; zero: none
	err      error
	group    []*request    // set, with r first, when r is to send the group
	done     chan struct{} // closed when err is known, or when group is set
	finished bool          // err is known and done closed: by the leader only
}

// finish sets r's outcome and lets r's Commit return, unless it is the
// leader's own (which returns when the group is done). Only the leader's
// goroutine calls it.
func (r *request) finish(err error) {
	if r.finished {
		return
	}
	r.err, r.finished = err, true
	if r.group == nil { // not the leader, which is not waiting on done
		close(r.done)
	}
}

// ErrSenderPanicked is the error of the batches of a group whose sending
// panicked (in a callback, say): whether it committed is not known.
var ErrSenderPanicked = errors.New("groupcommit: the group's sender panicked; its outcome is unknown")

// Commit runs b in a transaction it may share with other requests' batches
// (see the package's doc), and returns b's error. key orders b within its
// group: requests that contend for the same rows should pass the same key,
// the same in every process (a stable hash of their idempotency key, say),
// so that every group takes their locks in one order.
//
// ctx bounds the wait for a slot: a batch still queued when ctx ends is
// not sent, and Commit returns ctx's error. Once sent, b's group is bounded
// by the earliest deadline of its batches' contexts (and by
// Options.Timeout), so that no batch commits later than its own context
// allowed; the round trip carries ctx's values (its trace), not its
// cancellation: each request of a sent group waits for the outcome.
func (c *Committer) Commit(ctx context.Context, key uint64, b *pgx.Batch) error {
	r := &request{key: key, b: b, done: make(chan struct{})}
	r.deadline, _ = ctx.Deadline()
	c.mu.Lock()
	if c.inFlight < c.opts.Concurrency {
		c.inFlight++
		c.mu.Unlock()
		r.group = []*request{r}
	} else {
		c.waiting = append(c.waiting, r)
		c.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			if c.leave(r) {
				return ctx.Err()
			}
			<-r.done // already taken into a group: its outcome is r's
		}
		if r.group == nil {
			return r.err
		}
	}
	// r sends its group, then hands its slot to the batches that queued
	// meanwhile, or gives it back, even if the sending panicked.
	defer c.handOff()
	c.send(ctx, r.group)
	return r.err
}

// leave takes r out of the queue; false if a group has taken it already.
func (c *Committer) leave(r *request) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.waiting, r)
	if i < 0 {
		return false
	}
	c.waiting = slices.Delete(c.waiting, i, i+1)
	return true
}

// handOff passes the slot of a group just sent to the batches that queued
// meanwhile, as the next group, or gives it back.
func (c *Committer) handOff() {
	c.mu.Lock()
	if len(c.waiting) == 0 {
		c.inFlight--
		c.mu.Unlock()
		return
	}
	n := min(c.opts.MaxBatches, len(c.waiting))
	next := make([]*request, n)
	copy(next, c.waiting)
	c.waiting = append(c.waiting[:0], c.waiting[n:]...)
	c.mu.Unlock()
	slices.SortStableFunc(next, func(a, b *request) int { return cmp.Compare(a.key, b.key) })
	next[0].group = next
	close(next[0].done)
}

// send commits group and finishes each request: its error set, and its
// done channel closed but for the first, the leader, which is not waiting
// on it. If sending panics, those not finished get ErrSenderPanicked and
// the panic goes on in the leader.
func (c *Committer) send(ctx context.Context, group []*request) {
	defer func() {
		for _, r := range group {
			r.finish(ErrSenderPanicked) // those the panic left unfinished
		}
	}()
	deadline := time.Now().Add(c.opts.Timeout)
	for _, r := range group {
		if !r.deadline.IsZero() && r.deadline.Before(deadline) {
			deadline = r.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	c.sendGroup(ctx, group)
}

// lockTimeout is the lock_timeout of a group that must be done by
// deadline.
func (c *Committer) lockTimeout(deadline time.Time) time.Duration {
	return max(min(c.opts.LockTimeout, time.Until(deadline)/2), time.Millisecond)
}

// groupSettings is a group's first statement: its lock_timeout, in
// milliseconds ($1), for its transaction only; and if it merges batches
// ($2), the planning of its statements (mergedPlans).
const groupSettings = `SELECT set_config('lock_timeout', $1::text, true),
	CASE WHEN $2::boolean THEN ` + mergedPlans + ` END`

// mergedPlans are the settings under which a merging group's statements
// are planned, for its transaction only. A merged statement's arrays have
// a length its custom plan would know, so PostgreSQL would plan it anew at
// each execution (measured at 0.07-0.23 ms a statement, a third of its
// cost): its plan is made generic, once per connection. A merged statement
// finds each of its rows by its key, a group's size of them, so the plan
// that suits it is the same for any size of table: a nested loop over the
// input rows, each looked up through its index. But a generic plan made
// while a table looked small (a new database) joins it by a sequential
// scan, and stays in the connection's cache as the table grows (measured:
// a merged move at 2.7 ms against 0.15 ms for one row's, with 19,000
// payments). So sequential scans, hash joins and merge joins are off
// there.
const mergedPlans = `set_config('plan_cache_mode', 'force_generic_plan', true)
	|| set_config('enable_seqscan', 'off', true) || set_config('enable_hashjoin', 'off', true)
	|| set_config('enable_mergejoin', 'off', true)`

// sendGroup is send's work.
func (c *Committer) sendGroup(ctx context.Context, group []*request) {
	if len(group) == 1 {
		group[0].finish(c.sendAlone(ctx, group[0].b))
		return
	}
	c.sendAsGroup(ctx, group, c.opts.Merge != nil)
}

// sendAsGroup sends group as one transaction, its like batches merged if
// merge says so.
func (c *Committer) sendAsGroup(ctx context.Context, group []*request, merge bool) {
	n := 1
	for _, r := range group {
		n += len(r.b.QueuedQueries)
	}
	// The group's queries are copies: pgx keeps in a sent query the
	// statement it prepared, which a failed batch deallocates, so a query
	// is sent once, and each batch's own stay unsent for the retry alone.
	all := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, n)}
	// A batch waiting on a lock held by a long transaction is refused
	// (lock_not_available, an ERROR) rather than holding the others back
	// until the group's deadline, which would leave each of them unknown.
	deadline, _ := ctx.Deadline() // send's: every group has one
	units := c.units(group, merge)
	all.Queue(groupSettings, strconv.FormatInt(c.lockTimeout(deadline).Milliseconds(), 10), len(units) < len(group))
	// reading is the batch whose results are being read: when a statement
	// fails, the one PostgreSQL refused.
	reading := -1
	for _, unit := range units {
		if len(unit) > 1 {
			c.queueMerged(all, group, unit, &reading)
			if c.opts.Merged != nil {
				c.opts.Merged(len(unit))
			}
			continue
		}
		i := unit[0]
		for _, q := range group[i].b.QueuedQueries {
			fn := q.Fn
			all.QueuedQueries = append(all.QueuedQueries, &pgx.QueuedQuery{SQL: q.SQL, Arguments: q.Arguments,
				Fn: func(br pgx.BatchResults) error {
					reading = i
					if fn != nil {
						return fn(br)
					}
					_, err := br.Exec() // what pgx does for a query without one
					return err
				}})
		}
	}
	c.sent(len(group))
	err := c.db.SendBatch(ctx, all).Close()
	if !refused(err) {
		for _, r := range group {
			r.finish(err)
		}
		return
	}
	// PostgreSQL refused a merged statement, which says nothing of whose
	// row it was: the group is sent again unmerged, once, to find the
	// batch it refuses (and send that one last, below).
	if reading < 0 && len(units) < len(group) {
		c.sendAsGroup(ctx, group, false)
		return
	}
	// PostgreSQL refused a statement and rolled the group back: each batch
	// is sent again alone, so that only the ones it refuses alone fail;
	// the one it refused goes last, so that the others do not wait for it
	// (for a lock it waited on too long, say).
	if reading >= 0 {
		group = append(slices.Delete(slices.Clone(group), reading, reading+1), group[reading])
	}
	for _, r := range group {
		r.finish(c.sendAlone(ctx, r.b))
	}
}

// sendAlone sends b as a transaction of its own.
func (c *Committer) sendAlone(ctx context.Context, b *pgx.Batch) error {
	c.sent(1)
	return c.db.SendBatch(ctx, b).Close()
}

// Waiting is how many batches are queued for the next group.
func (c *Committer) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

// sent tells Options.Sent of a transaction of n batches.
func (c *Committer) sent(n int) {
	if c.opts.Sent != nil {
		c.opts.Sent(n)
	}
}

// refused reports whether err is PostgreSQL's refusal of a statement, which
// rolled its transaction back: an ERROR, not a FATAL that ends the session
// (an administrator's termination, a failover), after which a commit may
// have happened all the same (one waiting for a synchronous standby has
// committed locally).
func refused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.SeverityUnlocalized == "ERROR"
}
