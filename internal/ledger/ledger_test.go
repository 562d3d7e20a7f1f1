package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/cleanup"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/ledger"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub/natstest"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// modules are the service's operations: what the ledger books is theirs to
// say.
var modules = app.Modules(app.Config{})

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// env is a database, a fake clock, a projector and its metrics.
type env struct {
	t     *testing.T
	pool  *pgxpool.Pool
	clock *clock.Fake
	reg   *prometheus.Registry
	proj  *ledger.Projector
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, pool: pgtest.NewPool(t), clock: clock.NewFake(t0), reg: prometheus.NewRegistry()}
	// The projector's log goes to the test's output, printed when it fails.
	e.proj = ledger.NewProjector(ledger.Deps{DB: e.pool, Clock: e.clock, Registerer: e.reg, Modules: modules,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil))}, "")
	return e
}

func succeeded(t *testing.T, paymentID, amount string, at time.Time) outbox.Event {
	t.Helper()
	ev, err := outbox.NewEvent(context.Background(), "PaymentSucceeded", "payment", paymentID, payments.View{
		PaymentID: paymentID, Status: payments.StatusSucceeded, AccountID: "acc_1", Amount: amount, Currency: "EUR",
		MerchantReference: "inv-" + paymentID, PaymentMethod: "pm_card_visa", Channel: "web",
		CreatedAt: at, UpdatedAt: at, ProviderReference: "ch_" + paymentID,
	}, at)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func (e *env) count(query string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) outcomes() map[string]float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "paymentsapi_ledger_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				out[label(m, "outcome")] = v
			}
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func (e *env) wantOutcomes(want map[string]float64) {
	e.t.Helper()
	if got := e.outcomes(); fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Errorf("outcomes = %v, want %v", got, want)
	}
}

func (e *env) apply(ev outbox.Event, want ledger.Outcome) {
	e.t.Helper()
	got, err := e.proj.Apply(context.Background(), ev)
	if err != nil {
		e.t.Fatal(err)
	}
	if got != want {
		e.t.Fatalf("Apply(%s %s) = %s, want %s", ev.Type, ev.AggregateID, got, want)
	}
}

// TestApplyIsIdempotentByEventAndByPayment: the same event twice books one
// entry (inbox); another event announcing the same success books none
// (natural key); other types are recorded and ignored; an unusable payload
// is recorded with its reason.
func TestApplyIsIdempotentByEventAndByPayment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := succeeded(t, "pay_a", "10.50", t0)
	e.apply(ev, ledger.OutcomeApplied)
	e.apply(ev, ledger.OutcomeDuplicateEvent)
	e.apply(succeeded(t, "pay_a", "10.50", t0.Add(time.Second)), ledger.OutcomeDuplicateEntry)

	created, err := outbox.NewEvent(context.Background(), "PaymentCreated", "payment", "pay_a", map[string]string{"paymentId": "pay_a"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	e.apply(created, ledger.OutcomeIgnored)
	bad := succeeded(t, "pay_b", "10.555", t0) // three fraction digits for EUR
	e.apply(bad, ledger.OutcomeRejected)
	e.apply(bad, ledger.OutcomeDuplicateEvent)

	var (
		account, currency, providerRef, eventID string
		amount                                  int64
		tenant                                  *string
	)
	err = e.pool.QueryRow(context.Background(), `
		SELECT account_id, amount_minor, currency, provider_reference, event_id::text, tenant_id
		FROM ledger_entries WHERE payment_id = 'pay_a' AND entry_type = 'PAYMENT_SUCCEEDED'`).
		Scan(&account, &amount, &currency, &providerRef, &eventID, &tenant)
	if err != nil {
		t.Fatal(err)
	}
	if account != "acc_1" || amount != 1050 || currency != "EUR" || providerRef != "ch_pay_a" || eventID != ev.ID || tenant != nil {
		t.Errorf("entry: %s %d %s %s %s %v", account, amount, currency, providerRef, eventID, tenant)
	}
	if n := e.count(`SELECT count(*) FROM ledger_entries`); n != 1 {
		t.Errorf("%d ledger entries, want 1", n)
	}
	if n := e.count(`SELECT count(*) FROM inbox WHERE consumer = 'ledger'`); n != 4 {
		t.Errorf("%d inbox rows, want 4", n)
	}
	if n := e.count(`SELECT count(*) FROM inbox WHERE outcome = 'rejected' AND error LIKE '%fraction digits%'`); n != 1 {
		t.Errorf("the rejected event is not recorded with its reason")
	}
	e.wantOutcomes(map[string]float64{"applied": 1, "duplicate_event": 2, "duplicate_entry": 1, "ignored": 1, "rejected": 1})
}

// TestRedeliveryAfterInboxRetentionBooksNothing: once clean-up has deleted an
// event's inbox row (INBOX_RETENTION after it was received), a copy of the
// event arriving even later books nothing: the entry's natural key refuses
// it. The inbox is the first line, not the only one.
func TestRedeliveryAfterInboxRetentionBooksNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := succeeded(t, "pay_a", "10.50", t0)
	e.apply(ev, ledger.OutcomeApplied)
	e.clock.Advance(720*time.Hour + time.Minute)
	janitor := cleanup.New(e.pool, e.clock, cleanup.Policy{
		ReplayTTL: 24 * time.Hour, MetadataTTL: 720 * time.Hour, OutboxRetention: 168 * time.Hour, InboxRetention: 720 * time.Hour,
	}, slog.New(slog.DiscardHandler))
	if st, err := janitor.RunOnce(context.Background()); err != nil || st.InboxRowsDeleted != 1 {
		t.Fatalf("clean-up: %+v, %v", st, err)
	}
	e.apply(ev, ledger.OutcomeDuplicateEntry)
	if n := e.count(`SELECT count(*) FROM ledger_entries`); n != 1 {
		t.Errorf("%d ledger entries, want 1", n)
	}
}

// TestApplyBooksTenantWhenTheEventCarriesIt: the payments service sends
// tenantId in every event payload, and the entry books it (an event written
// before it did has none: see TestApplyIsIdempotentByEventAndByPayment,
// whose entry books NULL).
func TestApplyBooksTenantWhenTheEventCarriesIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev, err := outbox.NewEvent(context.Background(), "PaymentSucceeded", "payment", "pay_a", map[string]string{
		"paymentId": "pay_a", "tenantId": "tenant_a", "status": "SUCCEEDED", "accountId": "acc_1", "amount": "500", "currency": "jpy",
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	e.apply(ev, ledger.OutcomeApplied)
	if n := e.count(`SELECT count(*) FROM ledger_entries WHERE tenant_id = 'tenant_a' AND amount_minor = 500 AND currency = 'JPY'`); n != 1 {
		t.Fatal("tenant, amount or currency not booked")
	}
}

// TestConcurrentDeliveriesBookOneEntry: the same event handled by eight
// goroutines at once, then eight different events of one payment at once:
// one entry each time; the losers wait on the winner's keys and book
// nothing.
func TestConcurrentDeliveriesBookOneEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run := func(events []outbox.Event) map[ledger.Outcome]int {
		var (
			mu  sync.Mutex
			got = map[ledger.Outcome]int{}
			wg  sync.WaitGroup
		)
		start := make(chan struct{})
		for _, ev := range events {
			wg.Go(func() {
				<-start
				o, err := e.proj.Apply(context.Background(), ev)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got[o]++
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		return got
	}
	same := succeeded(t, "pay_a", "1.00", t0)
	if got := run([]outbox.Event{same, same, same, same, same, same, same, same}); got[ledger.OutcomeApplied] != 1 || got[ledger.OutcomeDuplicateEvent] != 7 {
		t.Errorf("same event: %v", got)
	}
	var distinct []outbox.Event
	for i := range 8 {
		distinct = append(distinct, succeeded(t, "pay_b", "2.00", t0.Add(time.Duration(i)*time.Millisecond)))
	}
	if got := run(distinct); got[ledger.OutcomeApplied] != 1 || got[ledger.OutcomeDuplicateEntry] != 7 {
		t.Errorf("distinct events of one payment: %v", got)
	}
	if n := e.count(`SELECT count(*) FROM ledger_entries`); n != 2 {
		t.Errorf("%d ledger entries, want 2", n)
	}
}

// --- through a real NATS server ---------------------------------------------

// broker is an embedded NATS server with the payments stream.
type broker struct {
	t      *testing.T
	js     jetstream.JetStream
	stream natspub.StreamConfig
}

func newBroker(t *testing.T, stream natspub.StreamConfig) *broker {
	t.Helper()
	_, js := natstest.Connect(t, natstest.Start(t))
	b := &broker{t: t, js: js, stream: stream.WithDefaults()}
	if _, err := natspub.EnsureStream(t.Context(), js, b.stream); err != nil {
		t.Fatal(err)
	}
	return b
}

// consume runs the projector's consumer until the test ends.
func (b *broker) consume(p *ledger.Projector) {
	b.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, b.js, ledger.ConsumerConfig{Stream: b.stream, AckWait: 5 * time.Second}) }()
	b.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.t.Error(err)
		}
	})
}

// waitIdle waits until the ledger consumer exists and has every message of
// the stream delivered and acknowledged.
func (b *broker) waitIdle() {
	b.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var last string
	for {
		cons, err := b.js.Consumer(b.t.Context(), b.stream.Name, ledger.DefaultConsumer)
		if err == nil {
			info, err := cons.Info(b.t.Context())
			switch {
			case err != nil:
				last = "consumer info: " + err.Error()
			case info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0 && info.Delivered.Consumer > 0:
				return
			default:
				last = fmt.Sprintf("pending %d, ack pending %d, redelivered %d, delivered %d", info.NumPending, info.NumAckPending, info.NumRedelivered, info.Delivered.Consumer)
			}
		} else {
			last = "look up the consumer: " + err.Error()
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("the ledger consumer did not catch up in 15s (last seen: %s)", last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// outwaitDuplicateWindow returns once the broker has forgotten the message
// ids published so far: it publishes a probe under a fresh id (on a subject
// the ledger does not read) and repeats it until the broker stops calling it
// a duplicate.
func (b *broker) outwaitDuplicateWindow() {
	b.t.Helper()
	subject, id := natspub.Subject(b.stream.SubjectPrefix, "Probe"), fmt.Sprintf("probe-%d", time.Now().UnixNano())
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		ack, err := b.js.Publish(b.t.Context(), subject, nil, jetstream.WithMsgID(id))
		if err != nil {
			b.t.Fatal(err)
		}
		if i > 0 && !ack.Duplicate {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatal("the broker still remembers message ids after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// storedSucceeded is how many PaymentSucceeded messages the stream holds.
func (b *broker) storedSucceeded() uint64 {
	b.t.Helper()
	s, err := b.js.Stream(b.t.Context(), b.stream.Name)
	if err != nil {
		b.t.Fatal(err)
	}
	info, err := s.Info(b.t.Context(), jetstream.WithSubjectFilter(natspub.Subject(b.stream.SubjectPrefix, "PaymentSucceeded")))
	if err != nil {
		b.t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// createPayments runs real payments through the payments service and the
// provider simulator: the outbox then holds exactly what production writes.
// It returns the ids of the succeeded ones and the amount of each.
func (e *env) createPayments(n int) (map[string]int64, []string) {
	e.t.Helper()
	simSrv, err := sim.Start(context.Background(), "127.0.0.1:0", sim.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = simSrv.Close() })
	svc := app.New(app.Deps{
		DB: e.pool, Provider: simclient.New(simSrv.URL(), nil), Clock: e.clock,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.New(prometheus.NewRegistry()),
	}, app.Config{ReplayTTL: time.Hour, Lease: 30 * time.Second, ProviderTimeout: 5 * time.Second, ProviderKeyWindow: time.Hour}).Payments
	amounts := map[string]int64{}
	var declined []string
	for i := range n {
		method := "pm_card_visa"
		if i%4 == 3 {
			method = "pm_card_chargeDeclined"
		}
		cmd := payments.Command{AccountID: "acc_1", AmountMinor: int64(100 + i), Currency: "EUR",
			MerchantReference: fmt.Sprintf("inv-%d", i), PaymentMethod: method, Channel: "web"}
		res, err := svc.Create(context.Background(), "tenant_a", fmt.Sprintf("key-%d", i), cmd, 0)
		if err != nil && !errors.Is(err, payments.ErrProviderUnavailable) {
			e.t.Fatal(err)
		}
		if method == "pm_card_visa" {
			amounts[res.Resource.ID] = cmd.AmountMinor
		} else {
			declined = append(declined, res.Resource.ID)
		}
	}
	return amounts, declined
}

// relay returns a stream relay of the test's database publishing to pub;
// afterPublish, if not nil, runs after each batch is published and before it
// is confirmed (an error there ends the session as a crash would). Its
// session is closed when the test ends.
func (e *env) relay(pub outbox.Publisher, afterPublish func(context.Context, []outbox.Event) error) *stream.Relay {
	e.t.Helper()
	r := stream.NewRelay(stream.RelayDeps{ConnString: e.pool.Config().ConnConfig.ConnString(), DB: e.pool, Publisher: pub, Clock: e.clock},
		stream.RelayConfig{AfterPublish: afterPublish})
	e.t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// drain publishes, through r, everything committed so far (the first call
// on a database creates its slot and publishes from the table what came
// before it) and returns how many events the publisher accepted. A reader
// that has just let go of the slot is noticed by the server a moment later
// (ErrSlotBusy): drain tries again meanwhile.
func (e *env) drain(r *stream.Relay) int {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := r.RunOnce(context.Background())
		if err == nil {
			return n
		}
		if !errors.Is(err, stream.ErrSlotBusy) || time.Now().After(deadline) {
			e.t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantOneEntryPerSucceededPayment checks the ledger against the payments.
func (e *env) wantOneEntryPerSucceededPayment(amounts map[string]int64, declined []string) {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT payment_id, amount_minor FROM ledger_entries`)
	if err != nil {
		e.t.Fatal(err)
	}
	got := map[string]int64{}
	n := 0
	for rows.Next() {
		var (
			id     string
			amount int64
		)
		if err := rows.Scan(&id, &amount); err != nil {
			e.t.Fatal(err)
		}
		got[id] = amount
		n++
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	if n != len(amounts) || fmt.Sprint(got) != fmt.Sprint(amounts) {
		e.t.Errorf("ledger holds %d entries %v, want one per succeeded payment %v", n, got, amounts)
	}
	for _, id := range declined {
		if _, ok := got[id]; ok {
			e.t.Errorf("declined payment %s has an entry", id)
		}
	}
}

// twice publishes every event two times through the broker, the second
// copy under another message id so that the broker keeps it: the consumer
// gets every event twice.
func twice(js jetstream.JetStream, stream natspub.StreamConfig) outbox.Publisher {
	return outbox.PublisherFunc(func(ctx context.Context, ev outbox.Event) error {
		for i := range 2 {
			m, err := natspub.Message(stream.SubjectPrefix, ev)
			if err != nil {
				return err
			}
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s/%d", ev.ID, i))
			if _, err := js.PublishMsg(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestEveryEventDeliveredTwiceBooksOneEntryPerPayment: real payments, the
// relay, a real NATS server, and every event delivered twice on purpose:
// one ledger entry per succeeded payment, none for the declined.
func TestEveryEventDeliveredTwiceBooksOneEntryPerPayment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := newBroker(t, natspub.StreamConfig{})
	r := e.relay(twice(b.js, b.stream), nil)
	e.drain(r) // creates the slot: the payments' events go through its stream
	amounts, declined := e.createPayments(12)
	if n := e.drain(r); n != e.count(`SELECT count(*) FROM outbox_events`) {
		t.Fatalf("the relay published %d events, want every event of the outbox", n)
	}
	if got, want := b.storedSucceeded(), uint64(2*len(amounts)); got != want {
		t.Fatalf("stream holds %d PaymentSucceeded messages, want %d", got, want)
	}

	b.consume(e.proj)
	b.waitIdle()
	e.wantOneEntryPerSucceededPayment(amounts, declined)
	n := float64(len(amounts))
	e.wantOutcomes(map[string]float64{"applied": n, "duplicate_event": n})
}

// TestKillRelayBetweenPublishAndConfirm: the relay dies after the broker
// took a batch holding a PaymentSucceeded and before it confirmed the batch
// to the slot; the slot stays where it was, and the next relay to read it
// is sent the batch again and publishes the event again. The stream's
// duplicate window is made short and waited out, so that the broker keeps
// the repeat and the consumer really gets the event twice: it books one
// entry.
func TestKillRelayBetweenPublishAndConfirm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := newBroker(t, natspub.StreamConfig{DuplicateWindow: 100 * time.Millisecond})
	pub := natspub.NewPublisher(b.js, b.stream, nil)

	var crashed atomic.Bool
	dying := e.relay(pub, func(_ context.Context, batch []outbox.Event) error {
		for _, ev := range batch {
			if ev.Type == "PaymentSucceeded" {
				crashed.Store(true)
				return errors.New("killed between publish and confirm")
			}
		}
		return nil
	})
	// The slot is created first, so that the payment's events come through
	// its stream (and the failpoint), not through a new slot's catch-up.
	if n := e.drain(dying); n != 0 {
		t.Fatalf("the relay published %d events of an empty outbox", n)
	}
	amounts, _ := e.createPayments(1)
	if n, err := dying.RunOnce(context.Background()); err == nil || !crashed.Load() || n == 0 {
		t.Fatalf("RunOnce: published %d, %v; want the PaymentSucceeded's batch published, then the crash", n, err)
	}
	if got := b.storedSucceeded(); got != 1 {
		t.Fatalf("stream holds %d PaymentSucceeded messages after the crash, want 1", got)
	}

	b.outwaitDuplicateWindow()
	next := e.relay(pub, nil)
	if n := e.drain(next); n == 0 {
		t.Fatal("the next relay published nothing: the crashed batch was confirmed")
	}
	if got := b.storedSucceeded(); got != 2 {
		t.Fatalf("stream holds %d PaymentSucceeded messages, want 2: the event was not published again", got)
	}
	// The next relay confirmed what it published: a session after it is
	// sent nothing again.
	next.Close(context.Background())
	if n := e.drain(next); n != 0 {
		t.Fatalf("a session after the next relay's published %d events again: it had not confirmed them", n)
	}

	b.consume(e.proj)
	b.waitIdle()
	e.wantOneEntryPerSucceededPayment(amounts, nil)
	e.wantOutcomes(map[string]float64{"applied": 1, "duplicate_event": 1})
}

// flakyDB fails the first n transactions, as a database outage would.
type flakyDB struct {
	*pgxpool.Pool
	failures atomic.Int32
}

func (f *flakyDB) Begin(ctx context.Context) (pgx.Tx, error) {
	if f.failures.Add(-1) >= 0 {
		return nil, errors.New("database unavailable")
	}
	return f.Pool.Begin(ctx)
}

// TestConsumerAcknowledgesOnlyAfterCommit: while the database fails, the
// event is not acknowledged and the broker delivers it again; once the
// database is back, the entry is booked once.
func TestConsumerAcknowledgesOnlyAfterCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := &flakyDB{Pool: e.pool}
	db.failures.Store(1)
	e.reg = prometheus.NewRegistry()
	e.proj = ledger.NewProjector(ledger.Deps{DB: db, Clock: e.clock, Registerer: e.reg, Modules: modules}, "")
	b := newBroker(t, natspub.StreamConfig{})
	ev := succeeded(t, "pay_a", "3.00", t0)
	if err := natspub.NewPublisher(b.js, b.stream, nil).Publish(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	b.consume(e.proj)
	b.waitIdle()
	e.wantOneEntryPerSucceededPayment(map[string]int64{"pay_a": 300}, nil)
	e.wantOutcomes(map[string]float64{"error": 1, "applied": 1})
}

// TestMalformedMessageIsTerminated: a message that is not an event is
// terminated (not redelivered for ever) and counted.
func TestMalformedMessageIsTerminated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := newBroker(t, natspub.StreamConfig{})
	if _, err := b.js.Publish(t.Context(), natspub.Subject(b.stream.SubjectPrefix, "PaymentSucceeded"), []byte(`{"oops":true}`)); err != nil {
		t.Fatal(err)
	}
	good := succeeded(t, "pay_a", "1.00", t0)
	data, err := json.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.Publish(t.Context(), natspub.Subject(b.stream.SubjectPrefix, "PaymentSucceeded"), data); err != nil {
		t.Fatal(err)
	}
	b.consume(e.proj)
	b.waitIdle()
	e.wantOutcomes(map[string]float64{"malformed": 1, "applied": 1})
}

// gatedDB holds every transaction of the projector at Begin until release
// is closed, and tells when the first one arrived.
type gatedDB struct {
	*pgxpool.Pool
	arrived chan struct{}
	once    sync.Once
	release chan struct{}
}

func newGatedDB(pool *pgxpool.Pool) *gatedDB {
	return &gatedDB{Pool: pool, arrived: make(chan struct{}), release: make(chan struct{})}
}

func (g *gatedDB) Begin(ctx context.Context) (pgx.Tx, error) {
	g.once.Do(func() { close(g.arrived) })
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Pool.Begin(ctx)
}

// consumerInfo reads the state of the ledger's durable consumer.
func (b *broker) consumerInfo() *jetstream.ConsumerInfo {
	b.t.Helper()
	cons, err := b.js.Consumer(b.t.Context(), b.stream.Name, ledger.DefaultConsumer)
	if err != nil {
		b.t.Fatal(err)
	}
	info, err := cons.Info(b.t.Context())
	if err != nil {
		b.t.Fatal(err)
	}
	return info
}

// TestConsumerPrefetchesLittleAndStopsAfterItsHandler: the consumer pulls
// only Prefetch (default 20) messages ahead, not the client's default of 500
// (each one's AckWait runs while it waits its turn), and on shutdown Run returns only after the handler in flight
// finished, even when that takes longer than the drain allows: its caller
// closes the database right after.
func TestConsumerPrefetchesLittleAndStopsAfterItsHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := newGatedDB(e.pool)
	proj := ledger.NewProjector(ledger.Deps{DB: db, Clock: e.clock, Modules: modules}, "")
	b := newBroker(t, natspub.StreamConfig{})
	pub := natspub.NewPublisher(b.js, b.stream, nil)
	const published = 60
	for i := range published {
		if err := pub.Publish(t.Context(), succeeded(t, fmt.Sprintf("pay_%02d", i), "1.00", t0)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- proj.Run(ctx, b.js, ledger.ConsumerConfig{Stream: b.stream, AckWait: time.Second, HandleTimeout: 10 * time.Second})
	}()
	select {
	case <-db.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer did not start handling in 10s")
	}
	time.Sleep(100 * time.Millisecond) // let the broker deliver whatever it will
	if info := b.consumerInfo(); info.NumAckPending > 20 {
		t.Errorf("%d messages delivered and unacknowledged while the first is handled: the consumer prefetched more than 20", info.NumAckPending)
	}

	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while its handler was still running", err)
	case <-time.After(1500 * time.Millisecond): // past the drain's bound of AckWait
	}
	close(db.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its handler finished")
	}
	if n := e.count(`SELECT count(*) FROM ledger_entries`); n < 1 {
		t.Fatal("the handler in flight did not book its entry before Run returned")
	}
}

// TestSlowHandlingIsNotRedelivered: while a message takes longer than
// AckWait to handle (the database waits on a lock), the consumer tells the
// broker it is in progress, so the broker does not deliver it again.
func TestSlowHandlingIsNotRedelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := newGatedDB(e.pool)
	reg := prometheus.NewRegistry()
	proj := ledger.NewProjector(ledger.Deps{DB: db, Clock: e.clock, Registerer: reg, Modules: modules}, "")
	e.reg = reg
	b := newBroker(t, natspub.StreamConfig{})
	if err := natspub.NewPublisher(b.js, b.stream, nil).Publish(t.Context(), succeeded(t, "pay_a", "1.00", t0)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- proj.Run(ctx, b.js, ledger.ConsumerConfig{Stream: b.stream, AckWait: time.Second, HandleTimeout: 10 * time.Second})
	}()
	defer func() {
		cancel()
		<-done
	}()
	<-db.arrived
	time.Sleep(2500 * time.Millisecond) // two and a half AckWaits
	close(db.release)
	b.waitIdle()
	if info := b.consumerInfo(); info.Delivered.Consumer != 1 {
		t.Errorf("the message was delivered %d times, want once", info.Delivered.Consumer)
	}
	e.wantOutcomes(map[string]float64{"applied": 1})
}

func refundSucceeded(t *testing.T, refundID, paymentID, amount string, at time.Time) outbox.Event {
	t.Helper()
	ev, err := outbox.NewEvent(context.Background(), "RefundSucceeded", "refund", refundID, map[string]string{
		"refundId": refundID, "paymentId": paymentID, "status": "SUCCEEDED", "amount": amount, "currency": "EUR",
		"accountId": "acc_1", "tenantId": "tenant_a", "providerReference": "re_" + refundID,
	}, at)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestOneEntryPerSucceededRefund: each succeeded refund books one
// REFUND_SUCCEEDED entry, beside the payment's own entry; a redelivery or a
// second event of the same refund books nothing; two refunds of one payment
// book two entries.
func TestOneEntryPerSucceededRefund(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.apply(succeeded(t, "pay_a", "10.00", t0), ledger.OutcomeApplied)
	first := refundSucceeded(t, "re_1", "pay_a", "3.00", t0)
	e.apply(first, ledger.OutcomeApplied)
	e.apply(first, ledger.OutcomeDuplicateEvent)
	e.apply(refundSucceeded(t, "re_1", "pay_a", "3.00", t0), ledger.OutcomeDuplicateEntry)
	e.apply(refundSucceeded(t, "re_2", "pay_a", "2.00", t0), ledger.OutcomeApplied)
	if n := e.count(`SELECT count(*) FROM ledger_entries WHERE entry_type = 'REFUND_SUCCEEDED' AND payment_id = 'pay_a'`); n != 2 {
		t.Errorf("%d refund entries, want 2", n)
	}
	if n := e.count(`SELECT COALESCE(sum(amount_minor), 0)::int FROM ledger_entries WHERE entry_type = 'REFUND_SUCCEEDED'`); n != 500 {
		t.Errorf("refunds booked %d cents, want 500", n)
	}
	if n := e.count(`SELECT count(*) FROM ledger_entries WHERE entry_type = 'PAYMENT_SUCCEEDED'`); n != 1 {
		t.Errorf("%d payment entries, want 1", n)
	}
}
