package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// TestOutboxCommandListsAndUnparks runs `paymentsapi outbox parked` and
// `paymentsapi outbox unpark` against a database with parked events, as the
// stream relay parks them (outbox_parked): pay_a's first event failed and
// its second waits behind it; pay_b's and pay_c's events failed.
func TestOutboxCommandListsAndUnparks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool, relay, pub := newOutboxDB(t)
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	var parked []outbox.Event
	for i, p := range []string{"pay_a", "pay_a", "pay_b", "pay_c"} {
		typ := "PaymentCreated"
		if i == 1 {
			typ = "PaymentSucceeded"
		}
		ev, err := outbox.NewEvent(ctx, typ, "payment", p, map[string]string{"paymentId": p}, at)
		if err != nil {
			t.Fatal(err)
		}
		if err := outbox.Write(ctx, pool, ev); err != nil {
			t.Fatal(err)
		}
		parked = append(parked, ev)
	}
	// Parked in turn, a millisecond apart: the first event of each payment
	// failed, after 10 attempts; pay_a's second waits for its first.
	for i, ev := range parked {
		attempts, lastError, waitsFor := 10, "broker says no", ""
		if i == 1 {
			attempts, lastError, waitsFor = 0, "", parked[0].ID
		}
		_, err := pool.Exec(ctx, `
			INSERT INTO outbox_parked (event_id, aggregate_type, aggregate_id, seq, attempts, last_error, waits_for, parked_at)
			SELECT id, aggregate_type, aggregate_id, seq, $2, NULLIF($3, ''), NULLIF($4, '')::uuid, $5
			FROM outbox_events WHERE id = $1`, ev.ID, attempts, lastError, waitsFor, at.Add(time.Duration(i)*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
	}
	released := func(id string) bool {
		t.Helper()
		var r bool
		if err := pool.QueryRow(ctx, `SELECT released_at IS NOT NULL FROM outbox_parked WHERE event_id = $1`, id).Scan(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	env := map[string]string{"DATABASE_URL": dbURL, "LOG_LEVEL": "error"}
	outboxCmd := func(args ...string) (string, error) {
		var stdout bytes.Buffer
		err := outboxCommand(ctx, args, getenv(env), &stdout, io.Discard)
		return stdout.String(), err
	}

	out, err := outboxCmd("parked")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("outbox parked printed %d lines:\n%s", len(lines), out)
	}
	var listed []outbox.ParkedEvent
	for _, line := range lines {
		var p outbox.ParkedEvent
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatal(err)
		}
		listed = append(listed, p)
	}
	if first := listed[0]; first.ID != parked[0].ID || first.Attempts != 10 || first.LastError != "broker says no" ||
		first.WaitsFor != "" || first.AggregateID != "pay_a" || first.Released || !first.ParkedAt.Equal(at) {
		t.Errorf("first parked event: %+v", first)
	}
	if second := listed[1]; second.ID != parked[1].ID || second.WaitsFor != parked[0].ID || second.LastError != "" || second.AggregateID != "pay_a" {
		t.Errorf("second parked event (waiting behind the first): %+v", second)
	}
	for i, p := range listed[2:] {
		if p.ID != parked[i+2].ID || p.LastError != "broker says no" {
			t.Errorf("parked event %d: %+v", i+2, p)
		}
	}

	// One by id (upper case works too): its payment's other parked event
	// is released with it, not the other payments'. An id that is not
	// parked is named and fails the command, after the others were
	// unparked.
	unknown := "01900000-0000-7000-8000-000000000000"
	out, err = outboxCmd("unpark", strings.ToUpper(parked[0].ID), unknown)
	if err == nil || !strings.Contains(err.Error(), unknown) {
		t.Fatalf("unpark with an unknown id = %v", err)
	}
	if !strings.Contains(out, `"unparked":1`) || !released(parked[0].ID) || !released(parked[1].ID) ||
		released(parked[2].ID) || released(parked[3].ID) {
		t.Fatalf("unpark by id: %s", out)
	}
	if listed, err := outboxCmd("parked"); err != nil || strings.Count(listed, `"released":true`) != 2 {
		t.Fatalf("outbox parked after unparking pay_a (want its 2 events released):\n%s%v", listed, err)
	}

	// The relay sends the released events round again, in order, and
	// forgets them; the others stay parked.
	stillParked := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT event_id::text FROM outbox_parked ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if _, err := relay.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := pub.ids(), []string{parked[0].ID, parked[1].ID}; !slices.Equal(got, want) {
		t.Fatalf("after unparking pay_a, the relay published %v, want its events %v", got, want)
	}
	if got, want := stillParked(), []string{parked[2].ID, parked[3].ID}; !slices.Equal(got, want) {
		t.Fatalf("parked after the relay published pay_a's: %v, want %v", got, want)
	}

	// The rest at once: pay_b's and pay_c's.
	out, err = outboxCmd("unpark", "-all")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != `{"unparked":2}` || !released(parked[2].ID) || !released(parked[3].ID) {
		t.Fatalf("unpark -all: %s", out)
	}
	if _, err := relay.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := pub.ids(), []string{parked[0].ID, parked[1].ID, parked[2].ID, parked[3].ID}; !slices.Equal(got, want) {
		t.Fatalf("after unpark -all, the relay published %v, want %v", got, want)
	}
	if got := stillParked(); len(got) != 0 {
		t.Fatalf("still parked after the relay published every released event: %v", got)
	}
	if out, err := outboxCmd("parked"); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("outbox parked with nothing parked: %q, %v", out, err)
	}

	for _, args := range [][]string{nil, {"unpark"}, {"unpark", "-all", parked[0].ID}, {"frobnicate"}} {
		if _, err := outboxCmd(args...); err == nil {
			t.Errorf("outbox %q succeeded", args)
		}
	}
	if _, err := outboxCmd("unpark", "-h"); !errors.Is(err, errUsage) {
		t.Errorf("outbox unpark -h = %v, want usage", err)
	}
}

// newOutboxDB returns a migrated database of the test's own, a pool on it,
// and a stream relay publishing to a recordingPublisher (closed when the
// test ends, before the pool).
func newOutboxDB(t *testing.T) (string, *pgxpool.Pool, *stream.Relay, *recordingPublisher) {
	t.Helper()
	dbURL := pgtest.NewURL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pub := &recordingPublisher{}
	relay := stream.NewRelay(stream.RelayDeps{ConnString: dbURL, DB: pool, Publisher: pub, Clock: clock.System{}}, stream.RelayConfig{})
	t.Cleanup(func() { relay.Close(context.Background()) })
	return dbURL, pool, relay, pub
}

// recordingPublisher accepts every event and remembers the order.
type recordingPublisher struct {
	mu        sync.Mutex
	published []string
}

func (p *recordingPublisher) Publish(_ context.Context, e outbox.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published = append(p.published, e.ID)
	return nil
}

func (p *recordingPublisher) ids() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.published)
}

// TestOutboxCommandReplays runs `paymentsapi outbox replay`: the running
// stream relay publishes the event once more; an id the outbox does not
// hold is named, and fails the command after the others were asked for.
// With the poller, it is refused.
func TestOutboxCommandReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool, relay, pub := newOutboxDB(t)
	ev, err := outbox.NewEvent(ctx, "PaymentSucceeded", "payment", "pay_a", map[string]string{"paymentId": "pay_a"}, time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Write(ctx, pool, ev); err != nil {
		t.Fatal(err)
	}
	if n, err := relay.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("first publish: %d, %v", n, err)
	}

	unknown := "01900000-0000-7000-8000-000000000099"
	// A replay is a message in the stream's slot: with the poller it is
	// refused, asking for nothing.
	polling := map[string]string{"DATABASE_URL": dbURL, "LOG_LEVEL": "error", "OUTBOX_RELAY": "poll"}
	if err := outboxCommand(ctx, []string{"replay", ev.ID}, getenv(polling), io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "stream") {
		t.Errorf("replay while the servers poll: %v, want a refusal naming the stream", err)
	}
	env := map[string]string{"DATABASE_URL": dbURL, "LOG_LEVEL": "error", "OUTBOX_RELAY": "stream"}
	var stdout bytes.Buffer
	err = outboxCommand(ctx, []string{"replay", strings.ToUpper(ev.ID), unknown}, getenv(env), &stdout, io.Discard)
	if err == nil || !strings.Contains(err.Error(), unknown) {
		t.Errorf("replay with an unknown id: %v, want an error naming it", err)
	}
	if got, want := strings.TrimSpace(stdout.String()), `{"notFound":["`+unknown+`"],"replayed":1}`; got != want {
		t.Errorf("replay printed %s, want %s", got, want)
	}
	if n, err := relay.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("after the replay: %d published, %v; want the event again", n, err)
	}
	if got := pub.ids(); !slices.Equal(got, []string{ev.ID, ev.ID}) {
		t.Errorf("published %v, want %s twice", got, ev.ID)
	}
	if err := outboxCommand(ctx, []string{"replay"}, getenv(env), io.Discard, io.Discard); err == nil {
		t.Error("outbox replay without ids succeeded")
	}
}
