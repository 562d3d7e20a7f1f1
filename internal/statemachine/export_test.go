package statemachine

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// QueueMoveUnchecked is queueMove for the tests of package
// statemachine_test: a move sent without the Go-side check, so that they
// can show the database refuses it.
func QueueMoveUnchecked[S ~string](m *Machine[S], b *pgx.Batch, mv Move[S]) {
	m.queueMove(context.Background(), b, mv)
}
