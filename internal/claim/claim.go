// Package claim holds the statements of a claim's batch: what an operation
// writes together with the claim of an idempotency key, in one round trip
// and one transaction (idempotency.Request.Create).
//
// When the key is already taken (a retry: the common case) the claim writes
// nothing and raises nothing, and so must every statement queued after it:
// an error would be logged by PostgreSQL, and pgx drops every statement of
// a failed batch from the connection's statement cache, so that the next
// requests on the connection would pay a round trip to deallocate them and
// another to prepare them again. So each statement tests Condition, which
// holds exactly when the claim took its key, wherever it writes, locks or
// refuses.
//
// That is a property of each statement's type, not of its text: Create gets
// a *Batch, which queues only Statements, and the one way to make a
// Statement is Gated, whose builder is handed the condition to test (and
// must use it: Gated refuses a builder that ignores it).
package claim

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Setting is the transaction-local setting the claim sets once it took its
// key (set_config's is_local): outside such a claim it is empty.
const Setting = "paymentsapi.claimed"

// condition holds, in the transaction of a claim's batch, once the claim
// took its key.
const condition = "coalesce(current_setting('" + Setting + "', true), '') = 'on'"

// Statement is one statement of a claim's batch that writes, locks and
// refuses nothing unless the claim took its key. Only Gated makes one.
type Statement struct {
	sql  string
	args []any
	scan func(pgx.Row) error
}

// Gated makes a Statement from build, which is handed the SQL condition that
// holds once the claim took its key and must test it wherever the statement
// writes, locks or refuses (see Implies for a refusal). A builder that does
// not use its condition is a defect: Gated panics.
func Gated(build func(claimed string) string, args ...any) Statement {
	return NewTemplate(build).With(args...)
}

// Template is a Gated statement's SQL, built and checked once, for a
// statement of every request: With makes the Statement. A Template is
// immutable, so a package may keep one in a variable.
type Template struct{ sql string }

// NewTemplate builds and checks the SQL of a Gated statement (see Gated).
func NewTemplate(build func(claimed string) string) Template {
	sql := build(condition)
	if !strings.Contains(sql, condition) {
		panic(fmt.Sprintf("claim: a statement ignores the condition it was handed: %s", strings.Join(strings.Fields(sql), " ")))
	}
	return Template{sql: sql}
}

// With is the Statement of t with args.
func (t Template) With(args ...any) Statement { return Statement{sql: t.sql, args: args} }

// Scan returns s whose one row, if any, is read by scan when the batch runs.
func (s Statement) Scan(scan func(pgx.Row) error) Statement {
	s.scan = scan
	return s
}

// Implies is the guard of a claim statement's refusal: the SQL condition
// that holds when cond does or the claim did not take its key, so that a
// retry's statement never refuses (refuse.Unless(claim.Implies(claimed,
// cond), ...)). claimed is the condition Gated handed the builder.
func Implies(claimed, cond string) string { return "NOT (" + claimed + ") OR (" + cond + ")" }

// Batch is what an operation's Create queues its statements in: a claim's
// batch, after the claim.
type Batch struct{ b *pgx.Batch }

// After returns the Batch that queues into b, after the claim that the
// caller (package idempotency) queued there.
func After(b *pgx.Batch) *Batch { return &Batch{b: b} }

// Queue adds s to the batch.
func (c *Batch) Queue(s Statement) {
	q := c.b.Queue(s.sql, s.args...)
	if s.scan != nil {
		q.QueryRow(s.scan)
	}
}

// Set is the SQL expression by which the claim sets the condition for the
// rest of its batch: on if took (an SQL condition) holds, cleared if not.
// It is set both ways because a batch may share its transaction with other
// requests' (package groupcommit): a claim that did not take its key must
// not inherit the condition an earlier claim of the transaction set.
func Set(took string) string {
	return "set_config('" + Setting + "', CASE WHEN " + took + " THEN 'on' ELSE '' END, true)"
}

// Reset is the statement that clears the condition, for an owner's batch
// that queued a claim (idempotency.Engine.QueueScheduled) and goes on.
func Reset() string { return "SELECT set_config('" + Setting + "', '', true)" }
