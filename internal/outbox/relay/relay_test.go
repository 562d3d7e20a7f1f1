package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/poll"
	"github.com/paymentsapi/paymentsapi/internal/outbox/relay"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// options are what a test tunes of a reader, whichever it is.
type options struct {
	MaxAttempts  int
	AfterPublish func(ctx context.Context, events []outbox.Event) error
}

// send is the tests' outbox.SendConfig: short waits.
func (o options) send() outbox.SendConfig {
	return outbox.SendConfig{Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, ReleaseInterval: 20 * time.Millisecond, MaxAttempts: o.MaxAttempts}
}

// readers are the constructors of the suite: every test runs against
// each, with short waits.
var readers = []struct {
	name string
	new  func(url string, pool *pgxpool.Pool, pub outbox.Publisher, o options) relay.Relay
}{
	{"stream", func(url string, pool *pgxpool.Pool, pub outbox.Publisher, o options) relay.Relay {
		return stream.NewRelay(stream.RelayDeps{ConnString: url, DB: pool, Publisher: pub, Clock: clock.System{}}, stream.RelayConfig{Standby: 20 * time.Millisecond, SendConfig: o.send(), AfterPublish: o.AfterPublish})
	}},
	{"poll", func(url string, pool *pgxpool.Pool, pub outbox.Publisher, o options) relay.Relay {
		return poll.NewRelay(poll.RelayDeps{ConnString: url, DB: pool, Publisher: pub, Clock: clock.System{}}, poll.RelayConfig{Interval: 5 * time.Millisecond, Standby: 20 * time.Millisecond, SendConfig: o.send(), AfterPublish: o.AfterPublish})
	}},
}

// forEachReader runs test as a parallel subtest per reader, each on a
// fresh database.
func forEachReader(t *testing.T, test func(t *testing.T, e *env)) {
	t.Parallel()
	for _, r := range readers {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			e := &env{pool: pool, url: pool.Config().ConnConfig.ConnString(), broker: newBroker()}
			e.newRelay = func(o options) relay.Relay {
				rl := r.new(e.url, pool, e.broker, o)
				t.Cleanup(func() { rl.Close(context.Background()) })
				return rl
			}
			test(t, e)
		})
	}
}

type env struct {
	pool     *pgxpool.Pool
	url      string
	broker   *broker
	newRelay func(options) relay.Relay
	n        int
}

// event is a new event of the payment pay.
func (e *env) event(pay, typ string) outbox.Event {
	e.n++
	ev, err := outbox.NewEvent(context.Background(), typ, "payment", pay, map[string]any{"n": e.n}, time.Now())
	if err != nil {
		panic(err)
	}
	return ev
}

// commit writes events in one transaction.
func (e *env) commit(t *testing.T, events ...outbox.Event) {
	t.Helper()
	if err := outbox.Write(context.Background(), e.pool, events...); err != nil {
		t.Fatal(err)
	}
}

// run runs rl until the test ends.
func run(t *testing.T, rl relay.Relay) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		rl.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// runOnce runs rl once, to the end of what it finds. A reader closed just
// before may still hold its lock for a moment: the
// server releases it when the reader's session ends, after the reader
// has left. So a busy answer is tried again until the deadline.
func runOnce(t *testing.T, rl relay.Relay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err := rl.RunOnce(ctx)
		busy := errors.Is(err, stream.ErrSlotBusy) || errors.Is(err, poll.ErrBusy)
		if err == nil || !busy || ctx.Err() != nil {
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// broker records what was published, in the order it was accepted, and
// refuses what fail says to.
type broker struct {
	mu       sync.Mutex
	accepted []outbox.Event
	attempts map[string]int
	fail     func(e outbox.Event, attempt int) error // nil: accept all
}

func newBroker() *broker { return &broker{attempts: map[string]int{}} }

func (b *broker) Publish(_ context.Context, e outbox.Event) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.attempts[e.ID]++
	if b.fail != nil {
		if err := b.fail(e, b.attempts[e.ID]); err != nil {
			return err
		}
	}
	b.accepted = append(b.accepted, e)
	return nil
}

func (b *broker) setFail(f func(e outbox.Event, attempt int) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail = f
}

func (b *broker) published() []outbox.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.accepted)
}

// waitFor waits until every event of ids was accepted at least once, and
// returns what was accepted.
func (b *broker) waitFor(t *testing.T, ids ...string) []outbox.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := b.published()
		seen := map[string]bool{}
		for _, e := range got {
			seen[e.ID] = true
		}
		missing := 0
		for _, id := range ids {
			if !seen[id] {
				missing++
			}
		}
		if missing == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events never published", missing, len(ids))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// firsts returns, per payment, the ids of its events in the order each was
// first published.
func firsts(events []outbox.Event) map[string][]string {
	seen := map[string]bool{}
	out := map[string][]string{}
	for _, e := range events {
		if !seen[e.ID] {
			seen[e.ID] = true
			out[e.AggregateID] = append(out[e.AggregateID], e.ID)
		}
	}
	return out
}

func ids(events ...outbox.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

// TestEachPaymentsEventsArePublishedInTheOrderTheyCommitted: writers on
// several goroutines write the events of four payments, each transaction
// taking its payment's row lock (as the service's moves do) after it got
// its transaction id, so that ids and commits interleave; every event is
// published, each payment's first publishes in their commit order.
func TestEachPaymentsEventsArePublishedInTheOrderTheyCommitted(t *testing.T) {
	forEachReader(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if _, err := e.pool.Exec(ctx, `CREATE TABLE test_payments (id text PRIMARY KEY, n int NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		pays := []string{"pay_a", "pay_b", "pay_c", "pay_d"}
		for _, p := range pays {
			if _, err := e.pool.Exec(ctx, `INSERT INTO test_payments VALUES ($1, 0)`, p); err != nil {
				t.Fatal(err)
			}
		}
		run(t, e.newRelay(options{}))
		var (
			mu      sync.Mutex
			written []string
			wg      sync.WaitGroup
		)
		for w := range 8 {
			wg.Go(func() {
				for i := range 25 {
					pay := pays[(w+i)%len(pays)]
					id, err := writeLocked(ctx, e.pool, pay)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					written = append(written, id)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		got := firsts(e.broker.waitFor(t, written...))
		for pay, evs := range got {
			var last int
			for _, id := range evs {
				n := e.countOf(t, id)
				if n <= last {
					t.Fatalf("%s: event %d first published after event %d", pay, n, last)
				}
				last = n
			}
		}
	})
}

// writeLocked writes the next event of pay in a transaction that got its
// id before it took pay's row lock (and slept a little between): the
// event's n is its place in pay's commit order.
func writeLocked(ctx context.Context, pool *pgxpool.Pool, pay string) (string, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after a commit, a no-op
	if _, err := tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		return "", err
	}
	time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
	var n int
	if err := tx.QueryRow(ctx, `UPDATE test_payments SET n = n + 1 WHERE id = $1 RETURNING n`, pay).Scan(&n); err != nil {
		return "", err
	}
	ev, err := outbox.NewEvent(ctx, "PaymentUpdated", "payment", pay, map[string]any{"n": n}, time.Now())
	if err != nil {
		return "", err
	}
	if err := outbox.Write(ctx, tx, ev); err != nil {
		return "", err
	}
	return ev.ID, tx.Commit(ctx)
}

// countOf reads the n of an event's payload.
func (e *env) countOf(t *testing.T, id string) int {
	t.Helper()
	var raw []byte
	if err := e.pool.QueryRow(context.Background(), `SELECT payload FROM outbox_events WHERE id = $1`, id).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var p struct{ N int }
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	return p.N
}

// TestAnEventCommittedFirstIsPublishedFirstWhateverItsTransactionID: of
// two transactions writing one payment's events, the one that got its id
// first commits second, while a third transaction, whose id lies between
// theirs, stays open. The event committed first is still published first.
func TestAnEventCommittedFirstIsPublishedFirstWhateverItsTransactionID(t *testing.T) {
	forEachReader(t, func(t *testing.T, e *env) {
		run(t, e.newRelay(options{}))
		second, between, first := e.begin(t), e.begin(t), e.begin(t)
		created, succeeded := e.event("pay_a", "PaymentCreated"), e.event("pay_a", "PaymentSucceeded")
		first.commit(created)
		second.commit(succeeded)
		other := e.event("pay_b", "PaymentCreated")
		e.commit(t, other)
		time.Sleep(100 * time.Millisecond) // time enough to publish what it may
		between.commit()
		got := firsts(e.broker.waitFor(t, created.ID, succeeded.ID, other.ID))
		if want := ids(created, succeeded); !slices.Equal(got["pay_a"], want) {
			t.Fatalf("pay_a's events published as %v, want %v (commit order)", got["pay_a"], want)
		}
	})
}

// begin starts a transaction with its id: it is older than every
// transaction that gets one after, whenever it commits.
func (e *env) begin(t *testing.T) *txn {
	t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	return &txn{t: t, tx: tx}
}

type txn struct {
	t  *testing.T
	tx pgx.Tx
}

func (x *txn) write(events ...outbox.Event) {
	x.t.Helper()
	if err := outbox.Write(context.Background(), x.tx, events...); err != nil {
		x.t.Fatal(err)
	}
}

func (x *txn) commit(events ...outbox.Event) {
	x.t.Helper()
	if len(events) > 0 {
		x.write(events...)
	}
	if err := x.tx.Commit(context.Background()); err != nil {
		x.t.Fatal(err)
	}
}

// TestEventsPublishedButNotConfirmedArePublishedAgain: a reader that dies
// after its publish and before it records that it is past the events
// (here: the failpoint's error ends its session) leaves them to the next
// session, which publishes them again: at least once.
func TestEventsPublishedButNotConfirmedArePublishedAgain(t *testing.T) {
	forEachReader(t, func(t *testing.T, e *env) {
		first := e.newRelay(options{}) // the reader's first start, with nothing to publish
		runOnce(t, first)
		first.Close(context.Background())
		a, b := e.event("pay_a", "PaymentCreated"), e.event("pay_b", "PaymentCreated")
		e.commit(t, a, b)
		dies := e.newRelay(options{AfterPublish: func(context.Context, []outbox.Event) error {
			return errors.New("killed before confirming")
		}})
		if _, err := dies.RunOnce(context.Background()); err == nil {
			t.Fatal("the failpoint did not end the session")
		}
		if got := e.broker.published(); len(got) != 2 {
			t.Fatalf("published %d events before dying, want 2", len(got))
		}
		dies.Close(context.Background())
		runOnce(t, e.newRelay(options{}))
		got := e.broker.published()
		if fmt.Sprint(ids(got[2:]...)) != fmt.Sprint(ids(a, b)) && fmt.Sprint(ids(got[2:]...)) != fmt.Sprint(ids(b, a)) {
			t.Fatalf("after the restart, published %v, want %s and %s again", ids(got[2:]...), a.ID, b.ID)
		}
	})
}

// TestARestartedReaderPublishesWhatCommittedWhileItWasDown: a reader
// stopped after confirming what it published, and another started later,
// publishes what committed meanwhile, in order, and nothing it had
// confirmed.
func TestARestartedReaderPublishesWhatCommittedWhileItWasDown(t *testing.T) {
	forEachReader(t, func(t *testing.T, e *env) {
		before := e.event("pay_a", "PaymentCreated")
		e.commit(t, before)
		first := e.newRelay(options{})
		runOnce(t, first)
		first.Close(context.Background())
		var down []outbox.Event
		for i := range 5 {
			down = append(down, e.event(fmt.Sprintf("pay_%d", i%2), "PaymentUpdated"))
			e.commit(t, down[i])
		}
		runOnce(t, e.newRelay(options{}))
		got, want := e.broker.published(), append([]outbox.Event{before}, down...)
		if fmt.Sprint(firsts(got)) != fmt.Sprint(firsts(want)) || len(got) != len(want) {
			t.Fatalf("published %v, want %v, each once", ids(got...), ids(want...))
		}
	})
}

// TestAnEventThatKeepsFailingIsParkedWithTheLaterEventsOfItsPayment: an
// event refused MaxAttempts times for a reason of its own is parked, the
// later events of its payment behind it, while other payments' events go
// on; unparked, they are all published, in order. A broker outage, however
// long, parks nothing.
func TestAnEventThatKeepsFailingIsParkedWithTheLaterEventsOfItsPayment(t *testing.T) {
	forEachReader(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		rl := e.newRelay(options{MaxAttempts: 3})
		runOnce(t, rl)
		tooLarge, after, other := e.event("pay_a", "PaymentCreated"), e.event("pay_a", "PaymentSucceeded"), e.event("pay_b", "PaymentCreated")
		e.commit(t, tooLarge)
		e.commit(t, after)
		e.commit(t, other)
		e.broker.setFail(func(ev outbox.Event, attempt int) error {
			if ev.ID == tooLarge.ID {
				return errors.New("message too large")
			}
			if attempt <= 5 { // more than MaxAttempts, and never counted
				return fmt.Errorf("no route: %w", outbox.ErrBrokerUnavailable)
			}
			return nil
		})
		runOnce(t, rl)
		if got := ids(e.broker.published()...); !slices.Equal(got, ids(other)) {
			t.Fatalf("published %v, want only %s (pay_a's parked)", got, other.ID)
		}
		parked, err := outbox.Parked(ctx, e.pool, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(parked) != 2 || parked[0].ID != tooLarge.ID || parked[0].LastError != "message too large" || parked[1].WaitsFor != tooLarge.ID {
			t.Fatalf("parked %+v, want %s failed and %s behind it", parked, tooLarge.ID, after.ID)
		}
		later := e.event("pay_a", "RefundCreated")
		e.commit(t, later)
		runOnce(t, rl)
		if n := len(e.broker.published()); n != 1 {
			t.Fatalf("published %d events, want pay_a's next one parked too", n)
		}

		e.broker.setFail(nil)
		if err := outbox.Unpark(ctx, e.pool, tooLarge.ID, time.Now()); err != nil {
			t.Fatal(err)
		}
		runOnce(t, rl)
		got := firsts(e.broker.published())
		if want := ids(tooLarge, after, later); !slices.Equal(got["pay_a"], want) {
			t.Fatalf("after unparking, pay_a published %v, want %v", got["pay_a"], want)
		}
		if parked, err := outbox.Parked(ctx, e.pool, 10); err != nil || len(parked) != 0 {
			t.Fatalf("still parked after their publish: %v (%v)", parked, err)
		}
	})
}

// TestAnEventOfAnOlderTransactionCommittedLaterIsNotSkipped: a
// transaction that got its id and wrote its event first commits after a
// younger transaction's event was committed (and, for a reader that could,
// was published). The older one's event is still published.
func TestAnEventOfAnOlderTransactionCommittedLaterIsNotSkipped(t *testing.T) {
	forEachReader(t, func(t *testing.T, e *env) {
		run(t, e.newRelay(options{}))
		older, event := e.begin(t), e.event("pay_a", "PaymentCreated")
		older.write(event)
		younger := e.event("pay_b", "PaymentCreated")
		e.commit(t, younger)
		time.Sleep(100 * time.Millisecond) // time enough to publish what it may
		older.commit()
		e.broker.waitFor(t, younger.ID, event.ID)
	})
}
