package outbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// The relay claims only rows flagged as heads (issue 9, item 8); the flag is
// kept by triggers. A row left unflagged while it is the earliest
// unpublished event of its payment would never be published: these tests
// race the two changes that move a head, a new event and the publication
// of the one before it, in both orders.

// waitForLock returns once a session of the test's database waits for a
// lock, or done is closed, or 5 s passed.
func (e *env) waitForLock(done <-chan struct{}) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return
		default:
		}
		var waiting int
		err := e.pool.QueryRow(context.Background(), `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		if err != nil {
			e.t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEventWrittenWhileItsPredecessorIsMarkedIsPublished: a PaymentSucceeded
// written while the relay marks the PaymentCreated before it published, the
// mark's transaction deciding first: the new event sees the mark and is due.
func TestEventWrittenWhileItsPredecessorIsMarkedIsPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	created := e.add("pay_a:PaymentCreated")[0]
	rec := &recorder{}
	r := e.relay(rec.publisher("r1"), outbox.RelayConfig{})

	// The mark, as the relay writes it, in a transaction held open.
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `UPDATE outbox_events SET published_at = $2 WHERE id = $1`, created.ID, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	written := make(chan outbox.Event)
	go func() { written <- e.addAsync("pay_a:PaymentSucceeded") }()
	e.waitForLock(nil)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	succeeded := <-written

	mustRunOnce(t, r, 1)
	if got := ids(rec.published()); fmt.Sprint(got) != "[pay_a:PaymentSucceeded]" || rec.published()[0].ID != succeeded.ID {
		t.Fatalf("published %v", got)
	}
}

// TestEventWrittenBeforeItsPredecessorIsMarkedIsPublished: the same race,
// the new event's transaction deciding first: it is written between the
// publish of its PaymentCreated and the mark, and still sees the
// PaymentCreated unpublished, so it is not a head yet; the relay's mark,
// deciding next, makes it one.
func TestEventWrittenBeforeItsPredecessorIsMarkedIsPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.add("pay_a:PaymentCreated")
	succeeded, err := outbox.NewEvent(ctx, "PaymentSucceeded", "payment", "pay_a", map[string]string{}, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	// After the publish, before the mark: the PaymentSucceeded is written
	// in a transaction left open.
	written := make(chan pgx.Tx, 1)
	var once sync.Once
	cfg := outbox.RelayConfig{Hooks: outbox.RelayHooks{AfterPublish: func(ctx context.Context, _ outbox.Event) error {
		var err error
		once.Do(func() {
			var tx pgx.Tx
			if tx, err = e.pool.Begin(ctx); err != nil {
				return
			}
			b := &pgx.Batch{}
			outbox.Queue(b, succeeded)
			if err = tx.SendBatch(ctx, b).Close(); err != nil {
				_ = tx.Rollback(ctx)
				return
			}
			written <- tx
		})
		return err
	}}}
	rec := &recorder{}
	r := e.relay(rec.publisher("r1"), cfg)
	passed := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		n, err := r.RunOnce(ctx)
		if err == nil && n != 1 {
			err = fmt.Errorf("first pass published %d, want 1", n)
		}
		passed <- err
	}()
	select {
	case tx := <-written:
		e.waitForLock(done) // the mark waits for the PaymentSucceeded's transaction
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	case <-done:
	}
	if err := <-passed; err != nil {
		t.Fatal(err)
	}

	mustRunOnce(t, r, 1)
	if got := ids(rec.published()); fmt.Sprint(got) != "[pay_a:PaymentCreated pay_a:PaymentSucceeded]" {
		t.Fatalf("published %v", got)
	}
}

// addAsync is add for a goroutine: it reports a failure with Error.
func (e *env) addAsync(spec string) outbox.Event {
	ev, err := e.write(spec)
	if err != nil {
		e.t.Error(err)
	}
	return ev
}

// write writes one event ("payment:Type") in its own transaction, as the
// payments service does (one transaction per state change).
func (e *env) write(spec string) (outbox.Event, error) {
	paymentID, typ, _ := strings.Cut(spec, ":")
	ev, err := outbox.NewEvent(context.Background(), typ, "payment", paymentID, map[string]string{"paymentId": paymentID}, e.clock.Now())
	if err != nil {
		return outbox.Event{}, err
	}
	b := &pgx.Batch{}
	outbox.Queue(b, ev)
	err = pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error { return tx.SendBatch(context.Background(), b).Close() })
	return ev, err
}

// TestEventsWrittenWhileRelaysRunAreAllPublishedInOrder: payments write
// their events one after the other while two relays publish: every event is
// published, each payment's in the order written, and nothing is left
// waiting.
func TestEventsWrittenWhileRelaysRunAreAllPublishedInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const payments, perPayment = 20, 6
	rec := &recorder{sleep: time.Millisecond}
	cfg := outbox.RelayConfig{BatchSize: 5}
	relays := []*outbox.Relay{e.relay(rec.publisher("r1"), cfg), e.relay(rec.publisher("r2"), cfg)}

	var (
		writers sync.WaitGroup
		mu      sync.Mutex
		written = map[string][]string{}
	)
	for p := range payments {
		writers.Go(func() {
			id := fmt.Sprintf("pay_%02d", p)
			for i := range perPayment {
				time.Sleep(rand.N(3 * time.Millisecond))
				ev, err := e.write(fmt.Sprintf("%s:Event%d", id, i))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				written[id] = append(written[id], ev.ID)
				mu.Unlock()
			}
		})
	}
	allWritten := make(chan struct{})
	go func() { writers.Wait(); close(allWritten) }()
	if !e.drain(30*time.Second, allWritten, relays...) {
		t.Fatalf("not everything was published in 30 s: %d events wait", e.count("published_at IS NULL"))
	}
	got := map[string][]string{}
	for _, ev := range rec.published() {
		got[ev.AggregateID] = append(got[ev.AggregateID], ev.ID)
	}
	for id, want := range written {
		if fmt.Sprint(got[id]) != fmt.Sprint(want) {
			t.Errorf("payment %s: published %v, written %v", id, got[id], want)
		}
	}
}

// TestReplayedEventIsPublishedAgain: an event an operator sends round again
// (published_at set back to NULL, as the ledger's replay procedure does) is
// published again, even one that was published without ever being a head
// (here by hand, with the event before it, in one statement).
func TestReplayedEventIsPublishedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	events := e.add("pay_a:PaymentCreated", "pay_a:PaymentSucceeded")
	if _, err := e.pool.Exec(ctx, `UPDATE outbox_events SET published_at = $1`, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	_, err := e.pool.Exec(ctx, `UPDATE outbox_events SET published_at = NULL, attempts = 0, next_attempt_at = $2 WHERE id = $1`,
		events[1].ID, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	mustRunOnce(t, e.relay(rec.publisher("r1"), outbox.RelayConfig{}), 1)
	if got := rec.published(); len(got) != 1 || got[0].ID != events[1].ID {
		t.Fatalf("published %v", ids(got))
	}
}

// TestReplayingSeveralEventsOfAPaymentKeepsTheirOrder: one statement sends
// both events of a payment round again; the head flag is set after the
// statement (an AFTER trigger, migration 00015), so only the earliest is a
// head, and the relay publishes them in their order again, one pass each.
func TestReplayingSeveralEventsOfAPaymentKeepsTheirOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.add("pay_a:PaymentCreated", "pay_a:PaymentSucceeded", "pay_b:PaymentCreated")
	if _, err := e.pool.Exec(ctx, `UPDATE outbox_events SET published_at = $1`, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	// The replay below reads the table in its physical order. Put the
	// PaymentCreated's live version after the PaymentSucceeded's, so that
	// the later event is sent round first: a trigger that decided each
	// row's head as its row was updated (a BEFORE trigger, as before
	// 00015) would see no earlier unpublished event and leave two heads.
	if _, err := e.pool.Exec(ctx, `UPDATE outbox_events SET last_error = 'moved' WHERE aggregate_id = 'pay_a' AND event_type = 'PaymentCreated'`); err != nil {
		t.Fatal(err)
	}
	var first string
	if err := e.pool.QueryRow(ctx, `SELECT event_type FROM outbox_events WHERE aggregate_id = 'pay_a' ORDER BY ctid LIMIT 1`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if first != "PaymentSucceeded" {
		t.Fatalf("the PaymentCreated did not move after the PaymentSucceeded (%s first): the test proves nothing", first)
	}
	_, err := e.pool.Exec(ctx, `UPDATE outbox_events SET published_at = NULL, attempts = 0, next_attempt_at = $1 WHERE aggregate_id = 'pay_a'`,
		e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := heads(t, e.pool); fmt.Sprint(got) != "[pay_a:PaymentCreated]" {
		t.Errorf("heads after the replay: %v", got)
	}
	rec := &recorder{}
	r := e.relay(rec.publisher("r1"), outbox.RelayConfig{})
	mustRunOnce(t, r, 1)
	mustRunOnce(t, r, 1)
	if got := ids(rec.published()); fmt.Sprint(got) != "[pay_a:PaymentCreated pay_a:PaymentSucceeded]" {
		t.Fatalf("published %v", got)
	}
}

// TestUpgradeFlagsTheWaitingHeads: the migration that adds heads flags the
// earliest unpublished event of each payment already in the outbox, so
// that the upgraded relay publishes what was waiting.
func TestUpgradeFlagsTheWaitingHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolAt(t, 10)
	_, err := pool.Exec(ctx, `
		INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, published_at, parked_at)
		VALUES (gen_random_uuid(), 'payment', 'pay_a', 'PaymentCreated', '{}', $1, $1, $1, NULL),
		       (gen_random_uuid(), 'payment', 'pay_b', 'PaymentCreated', '{}', $1, $1, NULL, $1),
		       (gen_random_uuid(), 'payment', 'pay_a', 'PaymentSucceeded', '{}', $1, $1, NULL, NULL),
		       (gen_random_uuid(), 'payment', 'pay_b', 'PaymentSucceeded', '{}', $1, $1, NULL, NULL),
		       (gen_random_uuid(), 'payment', 'pay_c', 'PaymentCreated', '{}', $1, $1, NULL, NULL)`, t0.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := database.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if got := heads(t, pool); fmt.Sprint(got) != "[pay_b:PaymentCreated pay_a:PaymentSucceeded pay_c:PaymentCreated]" {
		t.Fatalf("heads after the upgrade: %v", got)
	}
	rec := &recorder{}
	r, err := outbox.NewRelay(outbox.RelayDeps{DB: pool, Publisher: rec.publisher("r1"), Clock: clock.NewFake(t0)}, outbox.RelayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mustRunOnce(t, r, 2)
	if got := ids(rec.published()); fmt.Sprint(got) != "[pay_a:PaymentSucceeded pay_c:PaymentCreated]" {
		t.Fatalf("published %v", got)
	}
}

// heads lists the unpublished events flagged as heads, as "payment:Type",
// in seq order.
func heads(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT aggregate_id || ':' || event_type FROM outbox_events WHERE head AND published_at IS NULL ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}
