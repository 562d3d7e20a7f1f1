// Package statemachine is the one mechanism behind every resource's state
// machine (payments, refunds, ...): a table of allowed moves declared once in
// Go, mirrored in the database's state_machine_moves table that a trigger on
// the resource table enforces, and a guarded UPDATE that moves a row only
// from the state its writer last saw and records the move.
//
// The database is the authority: even SQL that bypasses this package cannot
// make a move its machine does not allow (TestIllegalMoveIsRefusedInGoAndByTheDatabase, TestWidgetMachineIsEnforcedByTheDatabase).
// The Go table exists so the code can refuse a move before it is sent and
// name states without raw strings; a test checks it says what the database
// says.
package statemachine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/refuse"
	"github.com/paymentsapi/paymentsapi/internal/rowset"
)

// ErrStaleWrite: a guarded move found the row no longer in the state the
// writer expected (another writer moved it first).
var ErrStaleWrite = errors.New("resource changed since it was read")

// IllegalMoveError is a move the state machine does not allow.
type IllegalMoveError struct {
	Machine  string
	From, To string
}

func (e *IllegalMoveError) Error() string {
	return fmt.Sprintf("illegal %s move %s -> %s", e.Machine, e.From, e.To)
}

// Table names where a machine's rows live.
type Table struct {
	Name        string // the resource table, e.g. "payments"; it has id, state, updated_at
	Transitions string // its audit table, e.g. "payment_transitions"
	ForeignKey  string // the audit table's column naming the row, e.g. "payment_id"
	// CreatedAt, if set, is the audit table's column that repeats the
	// row's created_at on each record, e.g. "payment_created_at": an
	// index on it finds a row's audit by its creation time (the row's id
	// tested on what it finds), and takes its entries at its right edge,
	// as rows are created in time order (an index on random ids takes them
	// anywhere).
	// The resource table then has created_at, and a creation's records
	// (Created, CreatedAs) are made at it.
	CreatedAt string
}

// record is the values of one audit record, as SQL expressions: the row's
// key, from, to, reason, when, who (package actor: the actor and the
// request id) and the row's created_at.
type record struct {
	key, from, to, reason, at, actor, requestID, createdAt string
}

// audit is the audit table's insert: its columns, then the values' SELECT
// list of r.
func (t Table) audit(r record) string {
	return `INSERT INTO ` + t.Transitions + ` (` + t.auditColumns() + `)
		SELECT ` + t.auditValues(r)
}

// auditColumns are the columns of an audit record that audit writes.
func (t Table) auditColumns() string {
	cols := t.ForeignKey + ", from_state, to_state, reason, occurred_at, actor, request_id"
	if t.CreatedAt != "" {
		cols += ", " + t.CreatedAt
	}
	return cols
}

// auditValues are the values of auditColumns.
func (t Table) auditValues(r record) string {
	vals := r.key + ", " + r.from + ", " + r.to + ", " + r.reason + ", " + r.at + ", " + r.actor + ", " + r.requestID
	if t.CreatedAt != "" {
		vals += ", " + r.createdAt
	}
	return vals
}

// stamp is who acts in ctx (package actor), as the audit record's values:
// NULL for what nothing named.
func stamp(ctx context.Context) (actorName, requestID any) {
	s := actor.From(ctx)
	return nullIfEmpty(s.Actor), nullIfEmpty(s.RequestID)
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Machine is one resource's state machine.
type Machine[S ~string] struct {
	name    string
	table   Table
	initial S
	moves   map[S][]S
	// createdIn are the states past the initial one a row may be created
	// in (CreatedIn), each one move from it.
	createdIn []S
	created   claim.Template // Created's statement
	createdAs claim.Template // CreatedAs's statement
	// claimMoves are MoveIfClaimed's templates, built once each, by
	// moveShape; plainMoves QueueMove's statements, likewise.
	claimMoves sync.Map
	plainMoves sync.Map
}

// New returns the machine called name (its name in state_machine_moves),
// whose rows are created in initial and may move as moves says.
func New[S ~string](name string, table Table, initial S, moves map[S][]S) *Machine[S] {
	m := &Machine[S]{name: name, table: table, initial: initial, moves: moves}
	m.created = claim.NewTemplate(func(claimed string) string {
		return table.audit(record{key: "$1", from: "NULL", to: "$2", reason: "$3", at: "$4", actor: "$5::text", requestID: "$6::text", createdAt: "$4"}) +
			` WHERE ` + claimed
	})
	// The creation's record, then the move's: ordered, so that their ids
	// (the order the audit is read in) say so.
	m.createdAs = claim.NewRows(`
		INSERT INTO `+table.Transitions+` (`+table.auditColumns()+`)
		VALUES (`+table.auditValues(record{key: "$1", from: "NULL", to: "$2", reason: "$4", at: "$6", actor: "$7", requestID: "$8", createdAt: "$6"})+`),
		       (`+table.auditValues(record{key: "$1", from: "$2", to: "$3", reason: "$5", at: "$6", actor: "$7", requestID: "$8", createdAt: "$6"})+`)`, []rowset.Column{
		{Name: "id", Type: "text"}, {Name: "initial_state", Type: "text"}, {Name: "state", Type: "text"},
		{Name: "created_reason", Type: "text"}, {Name: "reason", Type: "text"}, {Name: "at", Type: "timestamptz"},
		{Name: "actor", Type: "text"}, {Name: "request_id", Type: "text"},
	}, func(claimed string) string {
		return "\n\t\t" + table.audit(record{key: "input.id", from: "r.from_state", to: "r.to_state", reason: "r.reason", at: "input.at",
			actor: "input.actor", requestID: "input.request_id", createdAt: "input.at"}) + `
		FROM input CROSS JOIN LATERAL (VALUES (1, NULL, input.initial_state, input.created_reason),
		                                      (2, input.initial_state, input.state, input.reason)) AS r (n, from_state, to_state, reason)
		WHERE ` + claimed + `
		ORDER BY input.ord, r.n`
	})
	return m
}

// CreatedIn declares the states past the initial one that a row may be
// created in, each one move from it: a row created and moved on in one
// transaction, which its INSERT writes in the state it would have moved to
// (one row version and one statement fewer than an INSERT and an UPDATE),
// and whose audit records both (CreatedAs). The database's machine allows
// each such creation too (state_machine_moves: from ”). It returns m, for
// use where m is declared; a state that is not one move from the initial
// one is a programming error, and panics.
func (m *Machine[S]) CreatedIn(states ...S) *Machine[S] {
	for _, s := range states {
		if !m.Can(m.initial, s) {
			panic(fmt.Sprintf("statemachine: %s: a row cannot be created in %s: %s -> %s is no move", m.name, s, m.initial, s))
		}
	}
	m.createdIn = append(m.createdIn, states...)
	return m
}

// CanCreateIn reports whether a row may be created in s: the initial
// state, or one declared by CreatedIn.
func (m *Machine[S]) CanCreateIn(s S) bool {
	return s == m.initial || slices.Contains(m.createdIn, s)
}

// Name is the machine's name in state_machine_moves.
func (m *Machine[S]) Name() string { return m.name }

// Table is where the machine's rows live.
func (m *Machine[S]) Table() Table { return m.table }

// Initial is the state a row is created in.
func (m *Machine[S]) Initial() S { return m.initial }

// Can reports whether the machine allows from → to.
func (m *Machine[S]) Can(from, to S) bool {
	for _, s := range m.moves[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Final reports whether no move leaves s.
func (m *Machine[S]) Final(s S) bool { return len(m.moves[s]) == 0 }

// PathTo is a shortest list of moves that takes a new row to s: the states
// after the initial one, in order (empty for the initial state, nil if s
// cannot be reached).
func (m *Machine[S]) PathTo(s S) []S {
	prev := map[S]S{m.initial: m.initial}
	queue := []S{m.initial}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == s {
			var path []S
			for ; cur != m.initial; cur = prev[cur] {
				path = append([]S{cur}, path...)
			}
			return append([]S{}, path...)
		}
		for _, next := range m.moves[cur] {
			if _, seen := prev[next]; !seen {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return nil
}

// Pairs lists every allowed move as "from>to", each creation as ">state"
// (the initial state, and CreatedIn's).
func (m *Machine[S]) Pairs() []string {
	pairs := []string{">" + string(m.initial)}
	for _, s := range m.createdIn {
		pairs = append(pairs, ">"+string(s))
	}
	for from, tos := range m.moves {
		for _, to := range tos {
			pairs = append(pairs, string(from)+">"+string(to))
		}
	}
	return pairs
}

// Column is one more column a move or an insert writes.
type Column struct {
	Name  string
	Value any
	// Type is the value's SQL type; "" derives it from the value's Go type
	// (sqlType), which a nil value has none of.
	Type string
}

// sqlType is c's SQL type: Type, or the one of its value's Go type. A
// column whose type cannot be told is a programming error: it panics.
func (c Column) sqlType() string {
	if c.Type != "" {
		return c.Type
	}
	switch c.Value.(type) {
	case time.Time, *time.Time:
		return "timestamptz"
	case []byte:
		return "bytea"
	}
	if c.Value != nil {
		t := reflect.TypeOf(c.Value)
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.String:
			return "text"
		case reflect.Bool:
			return "boolean"
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint8, reflect.Uint16, reflect.Uint32:
			return "bigint"
		case reflect.Uint, reflect.Uint64:
			return "numeric"
		case reflect.Float32, reflect.Float64:
			return "double precision"
		}
	}
	panic(fmt.Sprintf("statemachine: column %s: no SQL type for %T: set its Type", c.Name, c.Value))
}

// NonEmpty returns the columns whose value is not "": what a move writes
// of the values it may or may not have (a provider reference, a decline
// code).
func NonEmpty(cols ...Column) []Column {
	var out []Column
	for _, c := range cols {
		if c.Value != "" {
			out = append(out, c)
		}
	}
	return out
}

// Move is one move of a row from the state its writer last saw.
type Move[S ~string] struct {
	ID       string
	From, To S
	Reason   string // recorded in the audit table
	At       time.Time
	Set      []Column // other columns the move writes (provider reference, ...)
	// If guards the move beyond its state: it is made only if each column
	// holds its value (compared with =), and refused like a stale write
	// otherwise (the action that holds a payment: only it moves it on).
	If []Column
}

// QueueMove adds m to b as one guarded statement: the row moves only if it
// is still in m.From, and the move is recorded in the audit table, with
// who made it under which request (package actor: ctx's); otherwise
// the statement refuses (refuse.StaleState, see IsStaleWrite), undoing the
// batch it runs in. A move the machine does not allow is
// refused before anything is queued (and would be refused by the database).
//
// The caller queues, before it in the same batch, the fenced statement on
// its idempotency key (idempotency.Owner): that locks the key row first, the
// order every writer uses, and proves the caller still owns the key.
func (m *Machine[S]) QueueMove(ctx context.Context, b *pgx.Batch, mv Move[S]) error {
	if err := m.check(mv); err != nil {
		return err
	}
	m.queueMove(ctx, b, mv)
	return nil
}

// check refuses a move the machine does not allow.
func (m *Machine[S]) check(mv Move[S]) error {
	if !m.Can(mv.From, mv.To) {
		return &IllegalMoveError{Machine: m.name, From: string(mv.From), To: string(mv.To)}
	}
	return nil
}

// MoveIfClaimed is QueueMove in a claim's transaction: the move is made,
// or refused, only if the claim took its key and, with ifInFrom, the row
// is in mv.From when the statement runs; otherwise it does nothing (one of
// several moves from different states, of which the row's state picks
// one).
func (m *Machine[S]) MoveIfClaimed(ctx context.Context, mv Move[S], ifInFrom bool) (claim.Statement, error) {
	if err := m.check(mv); err != nil {
		return claim.Statement{}, err
	}
	inFrom := func(id, from string) string {
		if !ifInFrom {
			return ""
		}
		return "(SELECT state FROM " + m.table.Name + " WHERE id = " + id + ") = " + from
	}
	t := builtOnce(&m.claimMoves, moveShape(mv, fmt.Sprint(ifInFrom)), func() claim.Template {
		return claim.NewRows(m.movePlain(mv, inFrom("$1", "$2")), moveColumns(mv), func(claimed string) string {
			if c := inFrom("input.id", "input.from_state"); c != "" {
				claimed += " AND " + c
			}
			return m.moveBody(mv, claimed)
		})
	})
	return t.With(moveArgs(ctx, mv)...), nil
}

// builtOnce is the value cache holds for shape, built by build the first
// time: a statement that depends on a move's shape, not on its values.
func builtOnce[T any](cache *sync.Map, shape string, build func() T) T {
	v, ok := cache.Load(shape)
	if !ok {
		v, _ = cache.LoadOrStore(shape, build())
	}
	return v.(T)
}

// moveArgs are the parameters of mv's statement, in move's order: the row,
// the states, the time, the reason, who made it (ctx's actor and request
// id), then the columns it writes and tests.
func moveArgs[S ~string](ctx context.Context, mv Move[S]) []any {
	args := make([]any, 0, 7+len(mv.Set)+len(mv.If))
	who, request := stamp(ctx)
	args = append(args, mv.ID, string(mv.From), string(mv.To), mv.At, mv.Reason, who, request)
	for _, c := range mv.Set {
		args = append(args, c.Value)
	}
	for _, c := range mv.If {
		args = append(args, c.Value)
	}
	return args
}

// moveShape is what the SQL of mv in a claim's batch depends on: the
// columns it writes and tests, their types, and extra, not their values. The states are
// parameters.
func moveShape[S ~string](mv Move[S], extra string) string {
	var b strings.Builder
	for _, c := range mv.Set {
		b.WriteString(c.Name + " " + c.sqlType())
		b.WriteByte(',')
	}
	b.WriteByte('|')
	for _, c := range mv.If {
		b.WriteString(c.Name + " " + c.sqlType())
		b.WriteByte(',')
	}
	b.WriteByte('|')
	b.WriteString(extra)
	return b.String()
}

// queueMove is QueueMove without the Go-side check, so that tests can show
// the database refuses what the code would not send. The statement is
// movePlain's, with moveBody's over input rows beside it (rowset.Paired),
// for a group committer to merge like batches' moves.
func (m *Machine[S]) queueMove(ctx context.Context, b *pgx.Batch, mv Move[S]) {
	sql := builtOnce(&m.plainMoves, moveShape(mv, ""), func() string {
		return rowset.Paired(m.movePlain(mv, ""), rowset.New(moveColumns(mv), m.moveBody(mv, "")))
	})
	b.Queue(sql, moveArgs(ctx, mv)...)
}

// movePlain is mv's statement, written for one row (its parameters are
// moveArgs'): the row moves from mv.From to mv.To if it is still in
// mv.From (and holds mv.If's values), writing mv.Set's columns, and the
// move is recorded in the audit table; otherwise the statement refuses
// (refuse.StaleState). A non-empty cond guards the move and its refusal.
func (m *Machine[S]) movePlain(mv Move[S], cond string) string {
	where, moved := "", "EXISTS (SELECT FROM moved)"
	if cond != "" {
		where, moved = " AND "+cond, "NOT ("+cond+") OR "+moved
	}
	n := 8 // the first parameter after the row, the states, the time, the reason and who
	var set strings.Builder
	for _, c := range mv.Set {
		fmt.Fprintf(&set, ", %s = $%d", c.Name, n)
		n++
	}
	var guard strings.Builder
	for _, c := range mv.If {
		fmt.Fprintf(&guard, " AND %s = $%d", c.Name, n)
		n++
	}
	t := m.table
	returning := "id"
	if t.CreatedAt != "" {
		returning += ", created_at"
	}
	return `
		WITH moved AS (
		    UPDATE ` + t.Name + ` SET state = $3, updated_at = $4` + set.String() + `
		    WHERE id = $1 AND state = $2` + guard.String() + where + `
		    RETURNING ` + returning + `
		), audit AS (
		    ` + t.audit(record{key: "id", from: "$2", to: "$3", reason: "$5", at: "$4", actor: "$6::text", requestID: "$7::text", createdAt: "created_at"}) + ` FROM moved
		)
		SELECT ` + refuse.Unless(moved, refuse.StaleState,
		"format('%s %s: %s -> %s: "+ErrStaleWrite.Error()+"', '"+m.name+"', $1::text, $2::text, $3::text)", "")
}

// moveColumns are the input columns of mv's statement, in moveArgs' order:
// id, from_state, to_state, at, reason, actor, request_id, then
// set_<column> for each column it writes and if_<column> for each it tests.
func moveColumns[S ~string](mv Move[S]) []rowset.Column {
	cols := make([]rowset.Column, 0, 7+len(mv.Set)+len(mv.If))
	cols = append(cols, rowset.Column{Name: "id", Type: "text"}, rowset.Column{Name: "from_state", Type: "text"},
		rowset.Column{Name: "to_state", Type: "text"}, rowset.Column{Name: "at", Type: "timestamptz"},
		rowset.Column{Name: "reason", Type: "text"}, rowset.Column{Name: "actor", Type: "text"},
		rowset.Column{Name: "request_id", Type: "text"})
	for _, c := range mv.Set {
		cols = append(cols, rowset.Column{Name: "set_" + c.Name, Type: c.sqlType()})
	}
	for _, c := range mv.If {
		cols = append(cols, rowset.Column{Name: "if_" + c.Name, Type: c.sqlType()})
	}
	return cols
}

// moveBody is the body of mv's statement over input rows (package rowset,
// columns moveColumns): each row's move, or its refusal. A non-empty cond
// (on the input row) guards the move and its refusal.
func (m *Machine[S]) moveBody(mv Move[S], cond string) string {
	where, moved := "", "EXISTS (SELECT FROM moved WHERE moved.ord = input.ord)"
	if cond != "" {
		where, moved = " AND "+cond, "NOT ("+cond+") OR "+moved
	}
	var set strings.Builder
	for _, c := range mv.Set {
		fmt.Fprintf(&set, ", %s = input.set_%s", c.Name, c.Name)
	}
	var guard strings.Builder
	for _, c := range mv.If {
		fmt.Fprintf(&guard, " AND m.%s = input.if_%s", c.Name, c.Name)
	}
	t := m.table
	createdAt := ""
	if t.CreatedAt != "" {
		createdAt = ", m.created_at"
	}
	return `, moved AS (
		    UPDATE ` + t.Name + ` AS m SET state = input.to_state, updated_at = input.at` + set.String() + `
		    FROM input
		    WHERE m.id = input.id AND m.state = input.from_state` + guard.String() + where + `
		    RETURNING input.ord, m.id, input.from_state, input.to_state, input.reason, input.at, input.actor, input.request_id` + createdAt + `
		), audit AS (
		    ` + t.audit(record{key: "id", from: "from_state", to: "to_state", reason: "reason", at: "at", actor: "actor", requestID: "request_id", createdAt: "created_at"}) + ` FROM moved ORDER BY ord
		)
		SELECT input.ord, ` + refuse.Unless(moved, refuse.StaleState,
		"format('%s %s: %s -> %s: "+ErrStaleWrite.Error()+"', '"+m.name+"', input.id, input.from_state, input.to_state)", "") + `
		FROM input ORDER BY input.ord`
}

// QueueSet adds to b a guarded write of cols on row id that stays in state
// in: no move, no audit record, and updated_at unchanged (it dates the last
// move); it refuses like a move (refuse.StaleState) if the row is no longer
// in that state.
func (m *Machine[S]) QueueSet(b *pgx.Batch, id string, in S, cols []Column) {
	args := []any{id, string(in)}
	set := make([]string, 0, len(cols))
	for _, c := range cols {
		args = append(args, c.Value)
		set = append(set, fmt.Sprintf("%s = $%d", c.Name, len(args)))
	}
	t := m.table
	b.Queue(`
		WITH written AS (
		    UPDATE `+t.Name+` SET `+strings.Join(set, ", ")+`
		    WHERE id = $1 AND state = $2
		    RETURNING id
		)
		SELECT `+refuse.Unless("EXISTS (SELECT FROM written)", refuse.StaleState,
		"format('%s %s: not in %s: "+ErrStaleWrite.Error()+"', '"+m.name+"', $1::text, $2::text)", ""),
		args...)
}

// Created is the audit record, in a claim's batch, of a row created (by
// the caller's INSERT, queued before it) in the initial state, by ctx's
// actor: written only if the claim took its key.
func (m *Machine[S]) Created(ctx context.Context, id, reason string, at time.Time) claim.Statement {
	who, request := stamp(ctx)
	return m.created.With(id, string(m.initial), reason, at, who, request)
}

// CreatedAs is the audit, in a claim's batch, of a row created (by the
// caller's INSERT, queued before it) directly in `in`, a state CreatedIn
// declared: two records, as if the row had been created in the initial
// state (with the reason created) and moved on to `in` (with reason), both
// at `at`; written only if the claim took its key. A state not declared is
// refused before anything is queued (and the database would refuse the
// INSERT).
func (m *Machine[S]) CreatedAs(ctx context.Context, id string, in S, created, reason string, at time.Time) (claim.Statement, error) {
	if in == m.initial || !m.CanCreateIn(in) {
		return claim.Statement{}, &IllegalMoveError{Machine: m.name, From: "", To: string(in)}
	}
	who, request := stamp(ctx)
	return m.createdAs.With(id, string(m.initial), string(in), created, reason, at, who, request), nil
}

// IsStaleWrite reports whether err is a guarded move that found its row no
// longer in the state its writer saw (the refusal QueueMove's statement
// raises).
func IsStaleWrite(err error) bool {
	_, ok := refuse.Is(err, refuse.StaleState)
	return ok
}

// IsIllegalMove reports whether err is the database refusing a move
// (the trigger on the resource table).
func IsIllegalMove(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514" && pgErr.ConstraintName == "state_machine_moves"
}
