// Package refuse is the Go side of the database function refuse (migration
// 00014): a statement that enforces its own precondition calls it when the
// precondition fails, and the error aborts the whole transaction.
//
// The service sends a transaction's statements as one pipelined batch with
// no BEGIN and no COMMIT (one round trip, one commit): PostgreSQL runs one
// batch as one implicit transaction. A check made in Go on a statement's
// answer would come after that transaction committed, so every check that
// must undo the batch is written into its statement with Unless, and read back
// with Is.
package refuse

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Code is the SQLSTATE a guard raises. Class PA is not used by PostgreSQL.
type Code string

// The codes of the engine and the state machines; operations number theirs
// from PA100.
const (
	// Fenced: the idempotency key is no longer the writer's.
	Fenced Code = "PA001"
	// PA002 was KeyTaken, a claim that found its key taken. A claim no
	// longer refuses: it writes nothing, and the statements after it test
	// the claim's condition (package claim; a refusal spoils pgx's
	// statement cache).
	// StaleState: a guarded move found its row no longer in the state its
	// writer saw.
	StaleState Code = "PA003"
)

// Unless is the SQL expression that is 0 when cond (an SQL boolean
// expression) holds, and otherwise raises code with message and detail
// (SQL text expressions; an empty detail is none). Statements put it in their
// select list, e.g.
//
//	WITH moved AS (UPDATE ... RETURNING id)
//	SELECT <Unless("EXISTS (SELECT FROM moved)", ...)>
func Unless(cond string, code Code, message, detail string) string {
	if detail == "" {
		detail = "''"
	}
	return `CASE WHEN ` + cond + ` THEN 0 ELSE refuse('` + string(code) + `', ` + message + `, ` + detail + `) END`
}

// Is reports whether err is the refusal code, and its detail.
func Is(err error, code Code) (detail string, ok bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == string(code) {
		return pgErr.Detail, true
	}
	return "", false
}
