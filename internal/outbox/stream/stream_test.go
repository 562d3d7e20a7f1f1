package stream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var t0 = time.Date(2026, 11, 27, 9, 0, 0, 123456000, time.UTC)

// env is a database with every migration, and the name of its slot.
type env struct {
	url     string
	pool    *pgxpool.Pool
	slot    string
	seq     int
	metrics *outbox.Metrics // given to the relays run, if set
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := pgtest.NewURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// The slot a relay on this database reads by default (pgtest drops
	// it with the database).
	return &env{url: url, pool: pool, slot: stream.SlotFor(pool.Config().ConnConfig.Database)}
}

func (e *env) open(t *testing.T, catchup func(ctx context.Context, snapshot string) (func(context.Context) error, error)) *stream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := stream.Open(ctx, e.url, stream.Options{Slot: e.slot, Catchup: catchup})
	for errors.Is(err, stream.ErrSlotBusy) && ctx.Err() == nil {
		// A reader just closed: the server notices a moment later.
		time.Sleep(20 * time.Millisecond)
		s, err = stream.Open(ctx, e.url, stream.Options{Slot: e.slot, Catchup: catchup})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// event is a distinct event of aggregate pay, as an operation writes it.
func (e *env) event(pay, typ string) outbox.Event {
	e.seq++
	return outbox.Event{
		ID:            fmt.Sprintf("01900000-0000-7000-8000-%012d", e.seq),
		Type:          typ,
		AggregateType: "payment",
		AggregateID:   pay,
		OccurredAt:    t0.Add(time.Duration(e.seq) * time.Millisecond),
		Payload:       []byte(fmt.Sprintf(`{"paymentId": "%s", "n": %d}`, pay, e.seq)),
		TraceParent:   "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	}
}

// begin opens a transaction that inserts evs, left open for the caller to
// commit or roll back.
func (e *env) begin(t *testing.T, evs ...outbox.Event) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if err := outbox.Write(ctx, tx, evs...); err != nil {
		t.Fatal(err)
	}
	return tx
}

func (e *env) commit(t *testing.T, evs ...outbox.Event) {
	t.Helper()
	if err := e.begin(t, evs...).Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds, failing t with what (and cond's
// last word on it) after 30 s.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testio.Eventually(t, what, 30*time.Second, cond)
}

func next(t *testing.T, s *stream.Stream) stream.Tx {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tx, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return tx
}

// nothing checks that the stream has no transaction for a while.
func nothing(t *testing.T, s *stream.Stream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if tx, err := s.Next(ctx); err == nil {
		t.Fatalf("got a transaction with %v, want none", ids(tx))
	}
}

func ids(tx stream.Tx) []string {
	out := make([]string, len(tx.Events))
	for i, ev := range tx.Events {
		out[i] = ev.ID
	}
	return out
}

// TestTransactionsComeInCommitOrder: events arrive grouped by transaction,
// in the order the transactions committed, not the order their rows were
// inserted; a transaction that rolled back or wrote no event sends
// nothing; each event reads as it was written.
func TestTransactionsComeInCommitOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, nil)
	ctx := context.Background()

	created, succeeded := e.event("pay_a", "PaymentCreated"), e.event("pay_a", "PaymentSucceeded")
	first := e.begin(t, created, succeeded) // inserted first, commits last
	other := e.event("pay_b", "PaymentCreated")
	e.commit(t, other)
	undone := e.begin(t, e.event("pay_c", "PaymentCreated"))
	if err := undone.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO tenant_api_keys (id, tenant_id, secret_hash, created_at) VALUES ('key_t', 't', '\x00', now())`); err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	tx1, tx2 := next(t, s), next(t, s)
	if got := [][]string{ids(tx1), ids(tx2)}; fmt.Sprint(got) != fmt.Sprint([][]string{{other.ID}, {created.ID, succeeded.ID}}) {
		t.Fatalf("transactions = %v, want pay_b's then pay_a's two events", got)
	}
	if !(tx1.End < tx2.End) || tx1.Committed.After(tx2.Committed) {
		t.Errorf("positions %s then %s, commits %v then %v: want both increasing", tx1.End, tx2.End, tx1.Committed, tx2.Committed)
	}
	got := tx2.Events[1]
	if got.Type != succeeded.Type || got.AggregateType != "payment" || got.AggregateID != "pay_a" ||
		!got.OccurredAt.Equal(succeeded.OccurredAt) || got.TraceParent != succeeded.TraceParent ||
		string(got.Payload) != `{"n": 2, "paymentId": "pay_a"}` { // jsonb's text
		t.Errorf("event = %+v (payload %s), want %+v", got, got.Payload, succeeded)
	}
	nothing(t, s)
}

// TestWhatWasNotConfirmedIsSentAgain: a reader that stops after confirming
// the first of two transactions gets the second again, and only it, from
// the slot; once everything is confirmed, nothing.
func TestWhatWasNotConfirmedIsSentAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, nil)
	a, b := e.event("pay_a", "PaymentCreated"), e.event("pay_b", "PaymentCreated")
	e.commit(t, a)
	e.commit(t, b)
	txA, txB := next(t, s), next(t, s)
	if err := s.Confirm(txA.End); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	s = e.open(t, nil)
	again := next(t, s)
	if !slices.Equal(ids(again), ids(txB)) || again.End != txB.End {
		t.Fatalf("after a restart got %v at %s, want %v at %s (the unconfirmed one)", ids(again), again.End, ids(txB), txB.End)
	}
	if err := s.Confirm(again.End); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	s = e.open(t, nil)
	nothing(t, s)
}

// TestASecondReaderIsTurnedAway: a slot has one reader; another gets
// ErrSlotBusy, and takes over once the first is gone.
func TestASecondReaderIsTurnedAway(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.open(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s, err := stream.Open(ctx, e.url, stream.Options{Slot: e.slot}); !errors.Is(err, stream.ErrSlotBusy) {
		if s != nil {
			_ = s.Close(ctx)
		}
		t.Fatalf("second reader: err = %v, want ErrSlotBusy", err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var second *stream.Stream
	for second == nil { // the server notices the first reader's end a moment later
		s, err := stream.Open(ctx, e.url, stream.Options{Slot: e.slot})
		switch {
		case err == nil:
			second = s
		case errors.Is(err, stream.ErrSlotBusy) && ctx.Err() == nil:
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("after the first reader left: %v", err)
		}
	}
	defer second.Close(ctx)
	ev := e.event("pay_a", "PaymentCreated")
	e.commit(t, ev)
	if got := ids(next(t, second)); !slices.Equal(got, []string{ev.ID}) {
		t.Fatalf("second reader got %v, want %s", got, ev.ID)
	}
}

// TestCatchupSeesExactlyWhatTheStreamDoesNot: when Open creates the slot,
// its catch-up snapshot sees the events committed before it, and the stream
// sends only those committed after: together, each event once.
func TestCatchupSeesExactlyWhatTheStreamDoesNot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := e.event("pay_a", "PaymentCreated")
	e.commit(t, before)

	var seen []string
	calls := 0
	s := e.open(t, func(ctx context.Context, snapshot string) (func(context.Context) error, error) {
		calls++
		return nil, pgx.BeginTxFunc(ctx, e.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET TRANSACTION SNAPSHOT '`+snapshot+`'`); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `SELECT id::text FROM outbox_events ORDER BY seq`)
			if err != nil {
				return err
			}
			seen, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
	})
	after := e.event("pay_a", "PaymentSucceeded")
	e.commit(t, after)

	if calls != 1 || !slices.Equal(seen, []string{before.ID}) {
		t.Fatalf("catch-up ran %d times and saw %v, want once, %s", calls, seen, before.ID)
	}
	if got := ids(next(t, s)); !slices.Equal(got, []string{after.ID}) {
		t.Fatalf("stream sent %v first, want %s", got, after.ID)
	}
	nothing(t, s)

	// The slot exists now: a restart catches nothing up.
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.open(t, func(context.Context, string) (func(context.Context) error, error) { calls++; return nil, nil })
	if calls != 1 {
		t.Errorf("catch-up ran again on an existing slot")
	}
}

// TestAnIdleStreamLetsGoOfTheWALBehindIt: once everything it was sent is
// confirmed, a stream waiting for events moves the slot past the changes
// that carry none (other tables), so the server need not keep their WAL.
func TestAnIdleStreamLetsGoOfTheWALBehindIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	s, err := stream.Open(ctx, e.url, stream.Options{Slot: e.slot, StatusInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	e.commit(t, e.event("pay_a", "PaymentCreated"))
	if err := s.Confirm(next(t, s).End); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := e.pool.Exec(ctx, `INSERT INTO tenant_api_keys (id, tenant_id, secret_hash, created_at) VALUES ('key_' || $1, $1, $2, now())`,
			fmt.Sprint("t", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var written string
	if err := e.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&written); err != nil {
		t.Fatal(err)
	}
	nothing(t, s) // 1.5 s of waiting: status reports, and the server's replies
	var behind int64
	if err := e.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, confirmed_flush_lsn) FROM pg_replication_slots WHERE slot_name = $2`,
		written, e.slot).Scan(&behind); err != nil {
		t.Fatal(err)
	}
	if behind > 0 {
		t.Errorf("the slot is still %d bytes behind the other tables' changes made before the wait", behind)
	}
}

// TestAReaderFrozenBeforeItsStreamStartsLetsGoOfItsLock: a reader that
// stops answering while it chooses its catch-up (a frozen process on a live
// host: TCP never notices) loses its session after IdleTimeout, and with it
// the lock: another reader opens the slot.
func TestAReaderFrozenBeforeItsStreamStartsLetsGoOfItsLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	frozen, thawed := make(chan struct{}), make(chan struct{})
	opened := make(chan error, 1)
	go func() {
		s, err := stream.Open(context.Background(), e.url, stream.Options{Slot: e.slot, Exclusive: true, IdleTimeout: time.Second,
			Catchup: func(context.Context, string) (func(context.Context) error, error) {
				close(frozen)
				<-thawed
				return nil, nil
			}})
		if err == nil {
			_ = s.Close(context.Background())
		}
		opened <- err
	}()
	<-frozen
	time.Sleep(1500 * time.Millisecond)
	second, err := stream.Open(context.Background(), e.url, stream.Options{Slot: e.slot, Exclusive: true})
	if err != nil {
		close(thawed)
		t.Fatalf("a second reader, the first frozen past its idle timeout: %v", err)
	}
	t.Cleanup(func() { _ = second.Close(context.Background()) })
	close(thawed)
	if err := <-opened; err == nil {
		t.Error("the frozen reader's Open succeeded after its session was ended")
	}
}

// TestACatchUpLongerThanTheIdleTimeoutKeepsItsSession: while a catch-up
// publishes (Catchup's then), Open keeps the session alive, however long
// that takes; the stream then starts, and streaming is not idleness.
func TestACatchUpLongerThanTheIdleTimeoutKeepsItsSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s, err := stream.Open(context.Background(), e.url, stream.Options{Slot: e.slot, Exclusive: true, IdleTimeout: time.Second,
		Catchup: func(context.Context, string) (func(context.Context) error, error) {
			return func(ctx context.Context) error { return clock.Sleep(ctx, 3*time.Second) }, nil
		}})
	if err != nil {
		t.Fatalf("Open with a catch-up three times the idle timeout: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	// Streaming, the session is not idle, however long nothing comes.
	nothing(t, s)
	time.Sleep(1500 * time.Millisecond)
	ev := e.event("pay_a", "PaymentCreated")
	e.commit(t, ev)
	if got := ids(next(t, s)); !slices.Equal(got, []string{ev.ID}) {
		t.Fatalf("stream sent %v, want %s", got, ev.ID)
	}
}
