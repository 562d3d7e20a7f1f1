package statemachine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/statemachine"
	smt "github.com/paymentsapi/paymentsapi/internal/statemachine/statemachinetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var (
	t0      = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	machine = smt.WidgetMachine
)

// The Go table answers what it declares: which moves it allows, which
// states are final, the shortest way to each state, and every pair.
func TestMachineTable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		from, to smt.WidgetState
		can      bool
	}{
		{smt.WidgetReceived, smt.WidgetSent, true},
		{smt.WidgetReceived, smt.WidgetCanceled, true},
		{smt.WidgetUnknown, smt.WidgetSent, true},
		{smt.WidgetReceived, smt.WidgetSucceeded, false},
		{smt.WidgetUnknown, smt.WidgetRetryable, false},
		{smt.WidgetUnknown, smt.WidgetCanceled, false},
		{smt.WidgetSucceeded, smt.WidgetDeclined, false},
		{smt.WidgetSent, smt.WidgetSent, false},
		{"NOWHERE", smt.WidgetSent, false},
	} {
		if got := machine.Can(c.from, c.to); got != c.can {
			t.Errorf("Can(%s, %s) = %v, want %v", c.from, c.to, got, c.can)
		}
	}

	var final []smt.WidgetState
	for _, s := range smt.WidgetStates() {
		if machine.Final(s) {
			final = append(final, s)
		}
	}
	if want := []smt.WidgetState{smt.WidgetSucceeded, smt.WidgetDeclined, smt.WidgetCanceled}; !slices.Equal(final, want) {
		t.Errorf("final states %v, want %v", final, want)
	}

	for s, want := range map[smt.WidgetState][]smt.WidgetState{
		smt.WidgetReceived:  {},
		smt.WidgetSent:      {smt.WidgetSent},
		smt.WidgetSucceeded: {smt.WidgetSent, smt.WidgetSucceeded},
		smt.WidgetUnknown:   {smt.WidgetSent, smt.WidgetUnknown},
		smt.WidgetCanceled:  {smt.WidgetCanceled},
		"NOWHERE":           nil,
	} {
		got := machine.PathTo(s)
		if !slices.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("PathTo(%s) = %#v, want %#v", s, got, want)
		}
	}

	pairs := machine.Pairs()
	slices.Sort(pairs)
	want := []string{
		">PROVIDER_REQUEST_SENT", ">RECEIVED", // created in either (CreatedIn)
		"FAILED_RETRYABLE>CANCELED", "FAILED_RETRYABLE>PROVIDER_REQUEST_SENT",
		"PROVIDER_REQUEST_SENT>DECLINED", "PROVIDER_REQUEST_SENT>FAILED_RETRYABLE",
		"PROVIDER_REQUEST_SENT>SUCCEEDED", "PROVIDER_REQUEST_SENT>UNKNOWN_REQUIRES_RECOVERY",
		"RECEIVED>CANCELED", "RECEIVED>PROVIDER_REQUEST_SENT",
		"UNKNOWN_REQUIRES_RECOVERY>DECLINED", "UNKNOWN_REQUIRES_RECOVERY>PROVIDER_REQUEST_SENT",
		"UNKNOWN_REQUIRES_RECOVERY>SUCCEEDED",
	}
	if !slices.Equal(pairs, want) {
		t.Errorf("Pairs() = %v\nwant %v", pairs, want)
	}
}

// The toy module installs its machine as the migrations install a real
// one: the database's rows say what the Go table says, and the trigger
// refuses every other move.
func TestWidgetMachineIsEnforcedByTheDatabase(t *testing.T) {
	t.Parallel()
	pool := widgets(t)
	n := 0
	smt.CheckEnforced(t, pool, machine, smt.WidgetStates(), func(ctx context.Context, tx pgx.Tx, s smt.WidgetState) (string, error) {
		n++
		id := fmt.Sprintf("w_%d", n)
		return id, smt.InsertWidget(ctx, tx, id, s, t0)
	})
}

// widgets is a fresh database with the widget module installed.
func widgets(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	smt.CreateWidgets(t, pool)
	return pool
}

// widgetAt creates widget id in RECEIVED at t0 and walks it to state with
// plain SQL, its last move at `at`.
func widgetAt(t *testing.T, pool *pgxpool.Pool, id string, state smt.WidgetState, at time.Time) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := smt.InsertWidget(ctx, tx, id, smt.WidgetReceived, t0); err != nil {
			return err
		}
		for _, s := range machine.PathTo(state) {
			if _, err := tx.Exec(ctx, `UPDATE widgets SET state = $2, updated_at = $3 WHERE id = $1`, id, string(s), at); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// row is what the database holds of a widget.
type row struct {
	State       smt.WidgetState
	Note        string
	UpdatedAt   time.Time
	LastSentAt  *time.Time
	Transitions []transition
}

type transition struct {
	From   *string
	To     string
	Reason string
	At     time.Time
}

func read(t *testing.T, pool *pgxpool.Pool, id string) row {
	t.Helper()
	ctx := context.Background()
	var r row
	if err := pool.QueryRow(ctx, `SELECT state, note, updated_at, last_sent_at FROM widgets WHERE id = $1`, id).
		Scan(&r.State, &r.Note, &r.UpdatedAt, &r.LastSentAt); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT from_state, to_state, reason, occurred_at FROM widget_transitions WHERE widget_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	r.Transitions, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (tr transition, err error) {
		err = row.Scan(&tr.From, &tr.To, &tr.Reason, &tr.At)
		return tr, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func send(pool *pgxpool.Pool, b *pgx.Batch) error {
	return pool.SendBatch(context.Background(), b).Close()
}

// A guarded move takes the row from the state its writer saw to the next,
// writes its columns and updated_at, and records the move with its reason
// and time.
func TestQueueMoveMovesAndRecords(t *testing.T) {
	t.Parallel()
	pool := widgets(t)
	widgetAt(t, pool, "w_1", smt.WidgetReceived, t0)
	t1 := t0.Add(time.Minute)
	b := &pgx.Batch{}
	err := machine.QueueMove(context.Background(), b, statemachine.Move[smt.WidgetState]{
		ID: "w_1", From: smt.WidgetReceived, To: smt.WidgetSent, Reason: "sending to provider", At: t1,
		Set: []statemachine.Column{{Name: "last_sent_at", Value: t1}, {Name: "note", Value: "moved"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := send(pool, b); err != nil {
		t.Fatal(err)
	}
	got := read(t, pool, "w_1")
	if got.State != smt.WidgetSent || !got.UpdatedAt.Equal(t1) || got.LastSentAt == nil || !got.LastSentAt.Equal(t1) || got.Note != "moved" {
		t.Errorf("after the move: %+v; want %s, updated and last sent at %v, note written", got, smt.WidgetSent, t1)
	}
	if len(got.Transitions) != 1 {
		t.Fatalf("transitions %+v, want one", got.Transitions)
	}
	tr := got.Transitions[0]
	if tr.From == nil || *tr.From != string(smt.WidgetReceived) || tr.To != string(smt.WidgetSent) ||
		tr.Reason != "sending to provider" || !tr.At.Equal(t1) {
		t.Errorf("recorded %+v (from %v), want RECEIVED -> PROVIDER_REQUEST_SENT, its reason, at %v", tr, tr.From, t1)
	}
}

// A move from a state the row is no longer in refuses in the database
// (IsStaleWrite, not an illegal move) and undoes every statement of its
// batch: the batch runs without BEGIN, as Owner.Commit sends it.
func TestQueueMoveFromAStaleStateRefusesAndUndoesTheBatch(t *testing.T) {
	t.Parallel()
	pool := widgets(t)
	widgetAt(t, pool, "w_1", smt.WidgetSent, t0)
	b := &pgx.Batch{}
	b.Queue(`UPDATE widgets SET note = 'written before the move' WHERE id = 'w_1'`)
	// Legal, but the row is in PROVIDER_REQUEST_SENT, not UNKNOWN.
	if err := machine.QueueMove(context.Background(), b, statemachine.Move[smt.WidgetState]{ID: "w_1", From: smt.WidgetUnknown, To: smt.WidgetSucceeded, Reason: "late", At: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	err := send(pool, b)
	if !statemachine.IsStaleWrite(err) || statemachine.IsIllegalMove(err) {
		t.Fatalf("got %v, want a stale write", err)
	}
	got := read(t, pool, "w_1")
	if got.State != smt.WidgetSent || got.Note != "" || len(got.Transitions) != 0 || !got.UpdatedAt.Equal(t0) {
		t.Errorf("after the refusal: %+v; want the row untouched and nothing recorded", got)
	}
}

// A move guarded beyond its state (Move.If) is made only while each column
// holds its value: otherwise it refuses as a stale write, with nothing
// written or recorded (a payment held by another action than the one
// ending it).
func TestQueueMoveGuardedByAColumnRefusesWhenItDiffers(t *testing.T) {
	t.Parallel()
	pool := widgets(t)
	widgetAt(t, pool, "w_1", smt.WidgetSent, t0)
	if _, err := pool.Exec(context.Background(), `UPDATE widgets SET note = 'held by a' WHERE id = 'w_1'`); err != nil {
		t.Fatal(err)
	}
	move := func(holder string) error {
		b := &pgx.Batch{}
		if err := machine.QueueMove(context.Background(), b, statemachine.Move[smt.WidgetState]{
			ID: "w_1", From: smt.WidgetSent, To: smt.WidgetSucceeded, Reason: "ended by " + holder, At: t0.Add(time.Minute),
			If: []statemachine.Column{{Name: "note", Value: "held by " + holder}}, Set: []statemachine.Column{{Name: "note", Value: ""}},
		}); err != nil {
			t.Fatal(err)
		}
		return send(pool, b)
	}
	if err := move("b"); !statemachine.IsStaleWrite(err) {
		t.Fatalf("the move of another holder: got %v, want a stale write", err)
	}
	if got := read(t, pool, "w_1"); got.State != smt.WidgetSent || got.Note != "held by a" || len(got.Transitions) != 0 {
		t.Fatalf("after the refusal: %+v", got)
	}
	if err := move("a"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, pool, "w_1"); got.State != smt.WidgetSucceeded || got.Note != "" || len(got.Transitions) != 1 {
		t.Fatalf("after the holder's move: %+v", got)
	}
}

// A move the machine does not allow is refused in Go before anything is
// queued; sent anyway, it is refused by the database's trigger, with
// nothing written or recorded.
func TestIllegalMoveIsRefusedInGoAndByTheDatabase(t *testing.T) {
	t.Parallel()
	mv := statemachine.Move[smt.WidgetState]{ID: "w_1", From: smt.WidgetReceived, To: smt.WidgetSucceeded, Reason: "skipping the provider", At: t0.Add(time.Minute)}
	b := &pgx.Batch{}
	err := machine.QueueMove(context.Background(), b, mv)
	var illegal *statemachine.IllegalMoveError
	if !errors.As(err, &illegal) || b.Len() != 0 {
		t.Fatalf("QueueMove: %v with %d statements queued, want an IllegalMoveError and none", err, b.Len())
	}
	if illegal.Machine != "widget" || illegal.From != string(smt.WidgetReceived) || illegal.To != string(smt.WidgetSucceeded) {
		t.Errorf("IllegalMoveError %+v, want widget RECEIVED -> SUCCEEDED", illegal)
	}

	pool := widgets(t)
	widgetAt(t, pool, "w_1", smt.WidgetReceived, t0)
	b = &pgx.Batch{}
	b.Queue(`UPDATE widgets SET note = 'written before the move' WHERE id = 'w_1'`)
	statemachine.QueueMoveUnchecked(machine, b, mv)
	err = send(pool, b)
	if !statemachine.IsIllegalMove(err) || statemachine.IsStaleWrite(err) {
		t.Fatalf("sent raw: %v, want the database's illegal move", err)
	}
	got := read(t, pool, "w_1")
	if got.State != smt.WidgetReceived || got.Note != "" || len(got.Transitions) != 0 {
		t.Errorf("after the refusal: %+v; want the row untouched and nothing recorded", got)
	}
}

// QueueSet writes columns of a row that stays where it is: no move, no
// record, updated_at (the time of the last move) unchanged. In another
// state it refuses like a stale move and undoes its batch.
func TestQueueSetWritesWithoutAMove(t *testing.T) {
	t.Parallel()
	pool := widgets(t)
	t1, t2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	widgetAt(t, pool, "w_1", smt.WidgetSent, t1)
	before := read(t, pool, "w_1")

	b := &pgx.Batch{}
	machine.QueueSet(b, "w_1", smt.WidgetSent, []statemachine.Column{{Name: "last_sent_at", Value: t2}, {Name: "note", Value: "sent again"}})
	if err := send(pool, b); err != nil {
		t.Fatal(err)
	}
	got := read(t, pool, "w_1")
	if got.State != smt.WidgetSent || got.LastSentAt == nil || !got.LastSentAt.Equal(t2) || got.Note != "sent again" {
		t.Errorf("after QueueSet: %+v; want the columns written in %s", got, smt.WidgetSent)
	}
	if !got.UpdatedAt.Equal(t1) || len(got.Transitions) != len(before.Transitions) {
		t.Errorf("QueueSet moved the row: updated_at %v (want %v), %d transitions (want %d)",
			got.UpdatedAt, t1, len(got.Transitions), len(before.Transitions))
	}

	b = &pgx.Batch{}
	b.Queue(`UPDATE widgets SET note = 'written beside it' WHERE id = 'w_1'`)
	machine.QueueSet(b, "w_1", smt.WidgetUnknown, []statemachine.Column{{Name: "last_sent_at", Value: t0.Add(time.Hour)}})
	if err := send(pool, b); !statemachine.IsStaleWrite(err) {
		t.Fatalf("QueueSet in the wrong state: %v, want a stale write", err)
	}
	if after := read(t, pool, "w_1"); after.Note != "sent again" || !after.LastSentAt.Equal(t2) {
		t.Errorf("after the refused QueueSet: %+v; want its batch undone", after)
	}
}

// Created records the creation (from nothing to the initial state, with
// its reason and time) only when the claim of its batch took its key.
func TestCreatedRecordsOnlyAfterAClaimThatTookItsKey(t *testing.T) {
	t.Parallel()
	pool := widgets(t)
	ctx := context.Background()
	for _, c := range []struct {
		id       string
		claimed  bool
		recorded bool
	}{
		{"w_yes", true, true},
		{"w_no", false, false},
	} {
		b := &pgx.Batch{}
		if c.claimed {
			b.Queue(claim.Claimed())
		}
		b.Queue(`INSERT INTO widgets (id, tenant_id, state, created_at, updated_at) VALUES ($1, 't', 'RECEIVED', $2, $2)`, c.id, t0)
		claim.After(b).Queue(machine.Created(context.Background(), c.id, "request accepted", t0))
		if err := send(pool, b); err != nil {
			t.Fatal(err)
		}
		got := read(t, pool, c.id).Transitions
		switch {
		case !c.recorded && len(got) != 0:
			t.Errorf("%s: recorded %+v without a claim", c.id, got)
		case c.recorded && (len(got) != 1 || got[0].From != nil || got[0].To != string(smt.WidgetReceived) ||
			got[0].Reason != "request accepted" || !got[0].At.Equal(t0)):
			t.Errorf("%s: recorded %+v, want one creation (nil -> RECEIVED, its reason, at %v)", c.id, got, t0)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM widget_transitions`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d transitions in all (%v), want 1", n, err)
	}
}

// MoveIfClaimed builds each shape of move once (the columns it writes and
// tests): moves of other shapes get SQL of their own, never one another's.
func TestMoveIfClaimedKeepsEachShapesOwnStatement(t *testing.T) {
	t.Parallel()
	pool := widgets(t)
	ctx := context.Background()
	t1 := t0.Add(time.Minute)
	first := []statemachine.Column{{Name: "first_sent_at", Value: t1}}
	moves := []struct {
		id    string
		set   []statemachine.Column
		guard []statemachine.Column // If
		// inFrom: the move is one of several from different states, made
		// only if the row is in its From (here it is not: SENT, not
		// RECEIVED).
		inFrom bool
		moved  bool
	}{
		{"w_first", first, nil, false, true},
		{"w_last", []statemachine.Column{{Name: "last_sent_at", Value: t1}}, nil, false, true},
		{"w_first_again", first, nil, false, true},
		{"w_both", []statemachine.Column{{Name: "first_sent_at", Value: t1}, {Name: "last_sent_at", Value: t1}}, nil, false, true},
		// The same columns written, but a guard of its own, or a condition
		// of its own that does not hold: not w_first's statement.
		{"w_guarded", first, []statemachine.Column{{Name: "note", Value: ""}}, false, true},
		{"w_held_back", first, nil, true, false},
	}
	for _, mv := range moves {
		b := &pgx.Batch{}
		b.Queue(claim.Claimed())
		b.Queue(`INSERT INTO widgets (id, tenant_id, state, created_at, updated_at) VALUES ($1, 't', 'RECEIVED', $2, $2)`, mv.id, t0)
		move := statemachine.Move[smt.WidgetState]{
			ID: mv.id, From: smt.WidgetReceived, To: smt.WidgetSent, Reason: "sending", At: t1, Set: mv.set, If: mv.guard,
		}
		if mv.inFrom {
			move.From, move.To = smt.WidgetSent, smt.WidgetSucceeded
		}
		st, err := machine.MoveIfClaimed(context.Background(), move, mv.inFrom)
		if err != nil {
			t.Fatal(err)
		}
		claim.After(b).Queue(st)
		if err := send(pool, b); err != nil {
			t.Fatalf("%s: %v", mv.id, err)
		}
	}
	for _, mv := range moves {
		var (
			firstAt, lastAt *time.Time
			state           smt.WidgetState
		)
		if err := pool.QueryRow(ctx, `SELECT first_sent_at, last_sent_at, state FROM widgets WHERE id = $1`, mv.id).Scan(&firstAt, &lastAt, &state); err != nil {
			t.Fatal(err)
		}
		if (state == smt.WidgetSent) != mv.moved {
			t.Errorf("%s: %s; moved: want %v", mv.id, state, mv.moved)
			continue
		}
		wrote := map[string]bool{}
		for _, c := range mv.set {
			wrote[c.Name] = mv.moved
		}
		first, last := firstAt, lastAt
		if (first != nil) != wrote["first_sent_at"] || (last != nil) != wrote["last_sent_at"] {
			t.Errorf("%s: first_sent_at %v, last_sent_at %v; the move set %v", mv.id, first, last, mv.set)
		}
	}
}

// A row created directly in a state its machine declares (CreatedIn) has
// both records written by CreatedAs, the creation's first, at its time,
// only when the claim took its key; a state not declared is refused by
// CreatedAs, and by the database when the row is inserted in it.
func TestARowCreatedSentRecordsItsCreationAndItsMove(t *testing.T) {
	t.Parallel()
	pool := widgets(t)
	t1 := t0.Add(time.Minute)
	for _, c := range []struct {
		id      string
		claimed bool
		want    []string // "from>to:reason"
	}{
		{"w_created", true, []string{">RECEIVED:request accepted", "RECEIVED>PROVIDER_REQUEST_SENT:sending"}},
		{"w_retry", false, nil},
	} {
		b := &pgx.Batch{}
		if c.claimed {
			b.Queue(claim.Claimed())
		}
		b.Queue(`INSERT INTO widgets (id, tenant_id, state, created_at, updated_at, first_sent_at) VALUES ($1, 't', 'PROVIDER_REQUEST_SENT', $2, $2, $2)`, c.id, t1)
		st, err := machine.CreatedAs(context.Background(), c.id, smt.WidgetSent, "request accepted", "sending", t1)
		if err != nil {
			t.Fatal(err)
		}
		claim.After(b).Queue(st)
		if err := send(pool, b); err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
		var got []string
		for _, tr := range read(t, pool, c.id).Transitions {
			from := ""
			if tr.From != nil {
				from = *tr.From
			}
			if !tr.At.Equal(t1) {
				t.Errorf("%s: %+v recorded at %v, want %v", c.id, tr, tr.At, t1)
			}
			got = append(got, from+">"+tr.To+":"+tr.Reason)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: recorded %q, want %q", c.id, got, c.want)
		}
	}

	for _, in := range []smt.WidgetState{smt.WidgetReceived, smt.WidgetSucceeded, smt.WidgetCanceled} {
		if _, err := machine.CreatedAs(context.Background(), "w_x", in, "request accepted", "sending", t1); err == nil {
			t.Errorf("CreatedAs recorded a creation in %s, which the machine does not declare", in)
		}
	}
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(t.Context(), `INSERT INTO widgets (id, tenant_id, state, created_at, updated_at) VALUES ('w_y', 't', 'SUCCEEDED', $1, $1)`, t1)
		return err
	})
	if !statemachine.IsIllegalMove(err) {
		t.Errorf("a widget created SUCCEEDED: %v, want the database to refuse it", err)
	}
}

// CreatedIn takes only states one move from the initial one: anything else
// is a mistake in the machine's declaration.
func TestCreatedInTakesOnlyAStateOneMoveFromTheInitialOne(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("CreatedIn took a state two moves from the initial one")
		}
	}()
	statemachine.New("toy", statemachine.Table{}, smt.WidgetReceived, map[smt.WidgetState][]smt.WidgetState{
		smt.WidgetReceived: {smt.WidgetSent}, smt.WidgetSent: {smt.WidgetSucceeded},
	}).CreatedIn(smt.WidgetSucceeded)
}

// Every form of a record names the actor and the request of the context it
// was queued with (package actor): a guarded move, a creation and a
// creation already moved on in a claim's batch, in their plain and gated
// forms, and a move in a claim's batch; a context that names nobody
// records NULL.
func TestRecordsNameTheirActorAndRequest(t *testing.T) {
	t.Parallel()
	pool := widgets(t)
	as := func(who, request string) context.Context {
		return actor.WithRequestID(actor.WithActor(context.Background(), who), request)
	}
	t1 := t0.Add(time.Minute)
	insert := `INSERT INTO widgets (id, tenant_id, state, created_at, updated_at) VALUES ($1, 't', $2, $3, $3)`

	b := &pgx.Batch{}
	b.Queue(insert, "w_plain", smt.WidgetReceived, t0)
	claim.Taken(b).Queue(machine.Created(as("api:key_1", "req-1"), "w_plain", "created", t0))
	if err := machine.QueueMove(as("reconciler", "req-2"), b, statemachine.Move[smt.WidgetState]{
		ID: "w_plain", From: smt.WidgetReceived, To: smt.WidgetSent, Reason: "sending", At: t1}); err != nil {
		t.Fatal(err)
	}
	b.Queue(claim.Claimed())
	b.Queue(insert, "w_gated", smt.WidgetSent, t0)
	createdAs, err := machine.CreatedAs(as("api:key_2", "req-3"), "w_gated", smt.WidgetSent, "created", "sending", t0)
	if err != nil {
		t.Fatal(err)
	}
	claim.After(b).Queue(createdAs)
	b.Queue(insert, "w_claimed", smt.WidgetReceived, t0)
	claim.After(b).Queue(machine.Created(as("operator:alice", "req-4"), "w_claimed", "created", t0))
	moved, err := machine.MoveIfClaimed(as("operator:alice", "req-4"), statemachine.Move[smt.WidgetState]{
		ID: "w_claimed", From: smt.WidgetReceived, To: smt.WidgetSent, Reason: "sending", At: t1}, false)
	if err != nil {
		t.Fatal(err)
	}
	claim.After(b).Queue(moved)
	b.Queue(insert, "w_nobody", smt.WidgetReceived, t0)
	claim.Taken(b).Queue(machine.Created(context.Background(), "w_nobody", "created", t0))
	if err := send(pool, b); err != nil {
		t.Fatal(err)
	}

	rows, err := pool.Query(context.Background(), `SELECT widget_id || ' ' || to_state || ' ' || coalesce(actor, '-') || ' ' || coalesce(request_id, '-')
		FROM widget_transitions ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"w_plain RECEIVED api:key_1 req-1",
		"w_plain PROVIDER_REQUEST_SENT reconciler req-2",
		"w_gated RECEIVED api:key_2 req-3",
		"w_gated PROVIDER_REQUEST_SENT api:key_2 req-3",
		"w_claimed RECEIVED operator:alice req-4",
		"w_claimed PROVIDER_REQUEST_SENT operator:alice req-4",
		"w_nobody RECEIVED - -",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("records:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
