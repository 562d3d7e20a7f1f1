// Package statemachinetest proves, against a real database, that a
// resource's state machine is enforced by the database itself. It also
// holds the widget (widget.go), a toy module with a payment's shape of
// states that the tests of statemachine and providerflow install in their
// own databases.
package statemachinetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// Insert creates a row of the machine's table in state with plain SQL and
// returns its id.
type Insert[S ~string] func(ctx context.Context, tx pgx.Tx, state S) (id string, err error)

// CheckEnforced checks that:
//   - state_machine_moves holds exactly m's moves (the Go table and the
//     database say the same);
//   - a row can be created in m's initial state, and in those m declares
//     (CreatedIn), only;
//   - from every state, every move m allows can be written with plain SQL,
//     and every other move is refused by the database (the trigger), not by
//     any Go code.
//
// states lists every state of m. Everything runs in transactions that are
// rolled back.
func CheckEnforced[S ~string](t *testing.T, db *pgxpool.Pool, m *statemachine.Machine[S], states []S, insert Insert[S]) {
	t.Helper()
	ctx := context.Background()

	rows, err := db.Query(ctx, `SELECT from_state || '>' || to_state FROM state_machine_moves WHERE machine = $1`, m.Name())
	if err != nil {
		t.Fatal(err)
	}
	inDB, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	inGo := m.Pairs()
	slices.Sort(inDB)
	slices.Sort(inGo)
	if !slices.Equal(inDB, inGo) {
		t.Errorf("the database's %s machine differs from the Go table:\n database: %v\n       Go: %v", m.Name(), inDB, inGo)
	}

	table := m.Table().Name
	for _, s := range states {
		inTx(t, db, func(tx pgx.Tx) {
			_, err := insert(ctx, tx, s)
			switch {
			case m.CanCreateIn(s) && err != nil:
				t.Errorf("creating a %s in %s: %v", m.Name(), s, err)
			case !m.CanCreateIn(s) && !statemachine.IsIllegalMove(err):
				t.Errorf("creating a %s in %s: the database did not refuse it: %v", m.Name(), s, err)
			}
		})
	}

	for _, from := range states {
		path := m.PathTo(from)
		if path == nil && from != m.Initial() {
			t.Errorf("%s cannot be reached from %s", from, m.Initial())
			continue
		}
		for _, to := range states {
			if to == from {
				continue
			}
			inTx(t, db, func(tx pgx.Tx) {
				id, err := insert(ctx, tx, m.Initial())
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range path {
					if _, err := tx.Exec(ctx, `UPDATE `+table+` SET state = $2 WHERE id = $1`, id, string(s)); err != nil {
						t.Fatalf("walking to %s: %v", from, err)
					}
				}
				_, err = tx.Exec(ctx, `UPDATE `+table+` SET state = $2 WHERE id = $1`, id, string(to))
				switch {
				case m.Can(from, to) && err != nil:
					t.Errorf("%s -> %s is allowed but the database refused it: %v", from, to, err)
				case !m.Can(from, to) && !statemachine.IsIllegalMove(err):
					t.Errorf("%s -> %s is not allowed but the database did not refuse it: %v", from, to, err)
				}
			})
		}
	}
}

// Check is CheckEnforced of one machine, bound to its states and its
// insert: a value that a suite taking any operation's machine can hold
// without naming the machine's state type (servicetest.Operation.Machine).
type Check func(t *testing.T, db *pgxpool.Pool)

// Bind returns CheckEnforced of m, states and insert, as a Check.
func Bind[S ~string](m *statemachine.Machine[S], states []S, insert Insert[S]) Check {
	return func(t *testing.T, db *pgxpool.Pool) {
		t.Helper()
		CheckEnforced(t, db, m, states, insert)
	}
}

// inTx runs f in a transaction that is always rolled back.
func inTx(t *testing.T, db *pgxpool.Pool, f func(pgx.Tx)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			t.Error(err)
		}
	}()
	f(tx)
}
