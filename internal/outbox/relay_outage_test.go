package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

var errBrokerDown = fmt.Errorf("nats: connection reconnecting: %w", outbox.ErrBrokerUnavailable)

// TestBrokerOutageParksNothing: while every publish fails with
// ErrBrokerUnavailable, a pass stops at its first row and hands the batch
// back uncounted, and the relay pauses with a backoff that doubles up to its
// cap; however long the outage, nothing is parked, no attempt is counted,
// and the outage is logged once when it starts and once when it ends. After
// a success the backoff starts over.
func TestBrokerOutageParksNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated", "pay_c:PaymentCreated", "pay_a:PaymentSucceeded")
	var (
		down  atomic.Bool
		calls atomic.Int32
	)
	down.Store(true)
	pub := outbox.PublisherFunc(func(context.Context, outbox.Event) error {
		calls.Add(1)
		if down.Load() {
			return errBrokerDown
		}
		return nil
	})
	logs := &testio.SyncBuffer{}
	r, err := outbox.NewRelay(outbox.RelayDeps{DB: e.pool, Publisher: pub, Clock: e.clock, Metrics: e.m,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))},
		outbox.RelayConfig{MaxAttempts: 2, OutageBackoff: time.Second, MaxOutageBackoff: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wantOutage := func(step string) {
		t.Helper()
		if n, err := r.RunOnce(context.Background()); n != 0 || !errors.Is(err, outbox.ErrBrokerUnavailable) {
			t.Fatalf("%s: RunOnce = %d, %v; want 0 and ErrBrokerUnavailable", step, n, err)
		}
	}

	// Ten failed probes: waits of 1s, 2s, 4s, then 8s (each jittered into
	// [d/2, d]): far more than MaxAttempts, and longer than every row
	// backoff.
	for probe := 1; probe <= 10; probe++ {
		before := calls.Load()
		wantOutage(fmt.Sprintf("probe %d", probe))
		if got := calls.Load() - before; got != 1 {
			t.Fatalf("probe %d: %d publishes, want 1: the pass goes on after the broker failed", probe, got)
		}
		d := min(time.Second<<(probe-1), 8*time.Second)
		start := e.clock.Now()
		wantOutage("right after a probe")
		e.clock.Set(start.Add(d/2 - time.Millisecond))
		wantOutage("before the shortest pause ran out")
		if got := calls.Load() - before; got != 1 {
			t.Fatalf("after probe %d: the relay published during its pause of at least %s", probe, d/2)
		}
		e.clock.Set(start.Add(d))
	}
	for _, ev := range events {
		if got := e.row(ev.ID); got.attempts != 0 || got.parked || got.claimed || got.published || got.lastError != "" {
			t.Fatalf("event %s (%s) after the outage: %+v", ev.AggregateID, ev.Type, got)
		}
	}
	e.wantMetric("paymentsapi_outbox_publish_failures_total", 0)
	e.wantMetric("paymentsapi_outbox_parked_events", 0)
	e.wantMetric("paymentsapi_outbox_broker_unavailable", 1)

	// The broker is back: everything goes out, in order per payment.
	down.Store(false)
	mustRunOnce(t, r, 3)
	mustRunOnce(t, r, 1)
	e.wantMetric("paymentsapi_outbox_broker_unavailable", 0)
	for _, ev := range events {
		if got := e.row(ev.ID); !got.published || got.attempts != 1 {
			t.Fatalf("event %s (%s): %+v", ev.AggregateID, ev.Type, got)
		}
	}

	// A new outage starts its backoff over: the first pause is at most 1s.
	e.add("pay_d:PaymentCreated")
	down.Store(true)
	wantOutage("second outage")
	e.clock.Advance(time.Second)
	before := calls.Load()
	wantOutage("second outage, after 1s")
	if calls.Load() == before {
		t.Fatal("the backoff did not start over after the broker came back")
	}

	out := logs.String()
	if n := strings.Count(out, `msg="outbox broker unavailable`); n != 2 {
		t.Errorf("outage start logged %d times, want 2 (once per outage):\n%s", n, out)
	}
	if n := strings.Count(out, `msg="outbox broker available again`); n != 1 {
		t.Errorf("outage end logged %d times, want 1:\n%s", n, out)
	}
}

// TestShutdownAfterTheAckStillMarks: when ctx ends while the broker
// acknowledges an event, the event is marked published all the same (the
// broker has it), and the rest of the batch is handed back uncounted.
func TestShutdownAfterTheAckStillMarks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated")
	ctx, cancel := context.WithCancel(context.Background())
	pub := outbox.PublisherFunc(func(context.Context, outbox.Event) error {
		cancel() // SIGTERM arrives while the broker acknowledges
		return nil
	})
	r := e.relay(pub, outbox.RelayConfig{})
	if n, err := r.RunOnce(ctx); n != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("RunOnce = %d, %v; want 1, context canceled", n, err)
	}
	if got := e.row(events[0].ID); !got.published || got.claimed {
		t.Fatalf("the acknowledged event was not marked published: %+v", got)
	}
	if got := e.row(events[1].ID); got.published || got.claimed || got.attempts != 0 {
		t.Fatalf("the rest of the batch was not handed back: %+v", got)
	}
	e.wantMetric("paymentsapi_outbox_published_total", 1)
}

// failingDB fails the statements whose SQL contains match, as a database
// that went away in the middle of a pass would.
type failingDB struct {
	outbox.DB
	match string
	fails atomic.Int32
}

// failOnce returns a failingDB on db that fails the first statement whose
// SQL contains match.
func failOnce(db outbox.DB, match string) *failingDB {
	f := &failingDB{DB: db, match: match}
	f.fails.Store(1)
	return f
}

func (f *failingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.Contains(sql, f.match) && f.fails.Add(-1) >= 0 {
		return pgconn.CommandTag{}, errors.New("database connection lost")
	}
	return f.DB.Exec(ctx, sql, args...)
}

// SendBatch fails a batch with a statement that contains match by queuing,
// after its statements, one that fails when it runs: the batch's own
// statements have run by then.
func (f *failingDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		if strings.Contains(q.SQL, f.match) && f.fails.Add(-1) >= 0 {
			b.Queue(`SELECT 1 / count(*) FROM outbox_events WHERE false`)
			break
		}
	}
	return f.DB.SendBatch(ctx, b)
}

// TestErrorExitHandsBackTheRest: a pass that stops on a database error in
// its middle (here: booking a failed publish) hands back the rows it did
// not start, at once and uncounted, instead of leaving them to their lease;
// the row it was on keeps its claim, and the attempt the claim counted,
// until the lease runs out.
func TestErrorExitHandsBackTheRest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated", "pay_c:PaymentCreated")
	rec := &recorder{fail: func(ev outbox.Event) error {
		if ev.AggregateID == "pay_a" {
			return errors.New("broker says no")
		}
		return nil
	}}
	r := e.relayOn(failOnce(e.pool, "last_error"), rec.publisher("r1"), outbox.RelayConfig{})
	if _, err := r.RunOnce(context.Background()); err == nil || !strings.Contains(err.Error(), "connection lost") {
		t.Fatalf("RunOnce = %v, want the database error", err)
	}
	if got := e.row(events[0].ID); got.published || !got.claimed || got.attempts != 1 || got.lastError != "" {
		t.Fatalf("the row whose failure was not booked: %+v (want it left to its lease)", got)
	}
	for _, ev := range events[1:] {
		if got := e.row(ev.ID); got.claimed || got.attempts != 0 || got.published {
			t.Fatalf("event %s not handed back: %+v", ev.AggregateID, got)
		}
	}
	mustRunOnce(t, r, 2) // the others go out at once
}

// TestFailedBookingWritesNothing: the end of a pass marks the rows it
// published and hands back the rest in one transaction. When it fails, here
// after both statements ran, neither is written: every row keeps its claim
// and the attempt the claim counted until the lease runs out, nothing is
// counted as published, and the published row is published again.
func TestFailedBookingWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated", "pay_c:PaymentCreated")
	rec := &recorder{fail: func(outbox.Event) error {
		e.clock.Advance(25 * time.Second) // a slow broker: the claim is too short for pay_b and pay_c
		return nil
	}}
	r := e.relayOn(failOnce(e.pool, "SET published_at"), rec.publisher("r1"),
		outbox.RelayConfig{Lease: 30 * time.Second, PublishTimeout: 10 * time.Second})
	if n, err := r.RunOnce(context.Background()); n != 0 || err == nil || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("RunOnce = %d, %v; want 0 and the database error", n, err)
	}
	if got := ids(rec.published()); fmt.Sprint(got) != "[pay_a:PaymentCreated]" {
		t.Fatalf("published %v", got)
	}
	for _, ev := range events {
		if got := e.row(ev.ID); got.published || !got.claimed || got.attempts != 1 {
			t.Fatalf("event %s: %+v; want the claim and its count as the claim left them", ev.AggregateID, got)
		}
	}
	e.wantMetric("paymentsapi_outbox_published_total", 0)

	rec.setFail(nil)
	e.clock.Advance(5 * time.Second) // the claim runs out: the rows are suspects, each published alone
	for range events {
		mustRunOnce(t, r, 1)
	}
	if got := ids(rec.published()); fmt.Sprint(got) != "[pay_a:PaymentCreated pay_a:PaymentCreated pay_b:PaymentCreated pay_c:PaymentCreated]" {
		t.Fatalf("published %v", got)
	}
	e.wantMetric("paymentsapi_outbox_published_total", 3)
}

// TestCrashLoopParksOnlyTheCrashingRow: an instance that keeps dying while
// publishing one event gets that event parked after MaxAttempts, but not
// the events it had claimed beside it. The first crash leaves them with the
// attempt its claim counted; from then on the crashing row, a suspect, is
// published alone and they are handed back uncounted, so they keep that one
// attempt, and are published.
func TestCrashLoopParksOnlyTheCrashingRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated", "pay_c:PaymentCreated")
	rec := &recorder{}
	cfg := outbox.RelayConfig{MaxAttempts: 2, Lease: 30 * time.Second}
	cfg.Hooks.AfterPublish = crashOn("pay_a")
	r := e.relay(rec.publisher("r1"), cfg)
	for crash := 1; crash <= 2; crash++ {
		if _, err := r.RunOnce(context.Background()); !errors.Is(err, errCrash) {
			t.Fatalf("RunOnce = %v, want the crash", err)
		}
		for _, ev := range events[1:] {
			if got := e.row(ev.ID); got.attempts != 1 || got.published {
				t.Fatalf("after crash %d, event %s, never published: %+v; want the one attempt of the first crash", crash, ev.AggregateID, got)
			}
		}
		e.clock.Advance(31 * time.Second)
	}
	mustRunOnce(t, r, 1) // pay_a parked; pay_b, a suspect, alone
	mustRunOnce(t, r, 1) // pay_c
	mustRunOnce(t, r, 0)
	if got := e.row(events[0].ID); !got.parked || got.attempts != 2 || !strings.Contains(got.lastError, "gave up") {
		t.Fatalf("pay_a: %+v", got)
	}
	for _, ev := range events[1:] {
		if got := e.row(ev.ID); !got.published || got.parked || got.attempts != 2 {
			t.Fatalf("event %s: %+v", ev.AggregateID, got)
		}
	}
	if got := ids(rec.published()); fmt.Sprint(got) != "[pay_a:PaymentCreated pay_a:PaymentCreated pay_b:PaymentCreated pay_c:PaymentCreated]" {
		t.Fatalf("published %v", got)
	}
}

// TestExpiredClaimBooksNothing: relay A's claim runs out while it publishes
// and relay B claims the row again; whatever A then books (a failed
// attempt, or a hand-back after a broker outage or a shutdown) must not
// touch B's claim.
func TestExpiredClaimBooksNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error // what A's publish returns; nil: A's ctx ends instead
	}{
		{"failed attempt", errors.New("broker says no")},
		{"broker unavailable", errBrokerDown},
		{"shutdown", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ev := e.add("pay_a:PaymentCreated")[0]
			cfg := outbox.RelayConfig{Lease: 30 * time.Second, PublishTimeout: 10 * time.Second}

			bPublishing, aDone := make(chan struct{}), make(chan struct{})
			b := e.relay(outbox.PublisherFunc(func(context.Context, outbox.Event) error {
				close(bPublishing)
				<-aDone
				return nil
			}), cfg)
			bResult := make(chan error, 1)

			aCtx, aCancel := context.WithCancel(context.Background())
			defer aCancel()
			a := e.relay(outbox.PublisherFunc(func(ctx context.Context, _ outbox.Event) error {
				e.clock.Advance(31 * time.Second) // A stalls past its lease
				go func() {
					_, err := b.RunOnce(context.Background())
					bResult <- err
				}()
				<-bPublishing
				if tc.err == nil {
					aCancel()
					return ctx.Err()
				}
				return tc.err
			}), cfg)
			_, _ = a.RunOnce(aCtx)

			got := e.row(ev.ID)
			if !got.claimed || got.attempts != 2 || got.lastError != "" || got.parked {
				t.Errorf("after A booked its outcome: %+v; want B's claim intact (claimed, 2 attempts, no error)", got)
			}
			close(aDone)
			if err := <-bResult; err != nil {
				t.Fatal(err)
			}
			if got := e.row(ev.ID); !got.published {
				t.Errorf("B's publish was not marked: %+v", got)
			}
		})
	}
}

// TestClaimSkipsRowsAnotherClaimLocks: a row locked by a claim in progress
// elsewhere (here: a transaction holding its row lock) is skipped, not
// waited for: the pass publishes the others at once, and the locked row
// goes out once the lock is gone.
func TestClaimSkipsRowsAnotherClaimLocks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated", "pay_c:PaymentCreated")
	tx, err := e.pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(context.Background(), `SELECT 1 FROM outbox_events WHERE id = $1 FOR UPDATE`, events[1].ID); err != nil {
		t.Fatal(err)
	}

	rec := &recorder{}
	r := e.relay(rec.publisher("r1"), outbox.RelayConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	n, err := r.RunOnce(ctx)
	if err != nil || n != 2 {
		t.Fatalf("RunOnce = %d, %v; want 2 published without waiting for the locked row", n, err)
	}
	if got := e.row(events[1].ID); got.claimed || got.attempts != 0 || got.published {
		t.Fatalf("the locked row: %+v", got)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustRunOnce(t, r, 1)
}

// TestLostClaimBooksNothingOverTheNewOwner: relay B, whose clock runs
// ahead, takes over a row of relay A's batch that A still holds by its own
// clock. A does not check its claim before each publish (that cost a commit
// per event), so it may publish the row too, which consumers tolerate (at
// least once); but what A books at the end of its pass must not undo B's:
// its hand-back leaves B's claim and count alone while handing back its own
// rows, and its mark, after B marked the row, keeps B's.
func TestLostClaimBooksNothingOverTheNewOwner(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// brokerDown: A's publish of the row B took fails for a broker
		// outage, so A hands it back with the rest; else A publishes it
		// too, after B marked it.
		brokerDown bool
	}{
		{"hand-back", true},
		{"mark", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated", "pay_c:PaymentCreated")
			// pay_b is due first, so that B (batches of one) claims it alone.
			if _, err := e.pool.Exec(context.Background(), `UPDATE outbox_events SET next_attempt_at = $1 WHERE id = $2`, t0.Add(-time.Second), events[1].ID); err != nil {
				t.Fatal(err)
			}
			bPublishing, aDone := make(chan struct{}), make(chan struct{})
			bClock := clock.NewFake(t0.Add(31 * time.Second)) // A's claim ran out, by B's clock
			b, err := outbox.NewRelay(outbox.RelayDeps{DB: e.pool, Clock: bClock, Publisher: outbox.PublisherFunc(func(context.Context, outbox.Event) error {
				close(bPublishing)
				<-aDone
				return nil
			})}, outbox.RelayConfig{BatchSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			bResult := make(chan error, 1)
			a := e.relay(outbox.PublisherFunc(func(ctx context.Context, ev outbox.Event) error {
				switch ev.AggregateID {
				case "pay_a":
					go func() {
						_, err := b.RunOnce(context.Background())
						bResult <- err
					}()
					<-bPublishing // B holds pay_b and is publishing it
				case "pay_b":
					if tc.brokerDown {
						return errBrokerDown
					}
					close(aDone) // B goes on and marks pay_b
					if err := <-bResult; err != nil {
						t.Error(err)
					}
				}
				return nil
			}), outbox.RelayConfig{})
			n, err := a.RunOnce(context.Background())

			if tc.brokerDown {
				if n != 1 || !errors.Is(err, outbox.ErrBrokerUnavailable) {
					t.Fatalf("A's RunOnce = %d, %v; want 1 and the outage", n, err)
				}
				if got := e.row(events[1].ID); !got.claimed || got.published || got.attempts != 2 {
					t.Errorf("pay_b after A's hand-back: %+v; want B's claim intact (claimed, 2 attempts)", got)
				}
				if got := e.row(events[2].ID); got.claimed || got.attempts != 0 {
					t.Errorf("pay_c, still A's: %+v; want it handed back uncounted", got)
				}
				close(aDone)
				if err := <-bResult; err != nil {
					t.Fatal(err)
				}
			} else if n != 3 || err != nil {
				t.Fatalf("A's RunOnce = %d, %v; want 3 published", n, err)
			}
			var publishedAt time.Time
			if err := e.pool.QueryRow(context.Background(), `SELECT published_at FROM outbox_events WHERE id = $1`, events[1].ID).Scan(&publishedAt); err != nil {
				t.Fatal(err)
			}
			if want := bClock.Now(); !publishedAt.Equal(want) {
				t.Errorf("pay_b published at %s, want %s: B's mark", publishedAt, want)
			}
			if got := e.row(events[0].ID); !got.published {
				t.Errorf("pay_a: %+v", got)
			}
		})
	}
}

type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestLogPublisherWriteFailureIsAnOutage: a writer that fails fails every
// event alike: the log publisher's broker is down, not the event.
func TestLogPublisherWriteFailureIsAnOutage(t *testing.T) {
	t.Parallel()
	ev, err := outbox.NewEvent(context.Background(), "PaymentCreated", "payment", "pay_a", map[string]string{"paymentId": "pay_a"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.NewLogPublisher(brokenWriter{}).Publish(context.Background(), ev); !errors.Is(err, outbox.ErrBrokerUnavailable) {
		t.Fatalf("Publish to a broken writer = %v, want ErrBrokerUnavailable", err)
	}
}
