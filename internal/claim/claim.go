// Package claim holds the statements an operation writes together with the
// claim of an idempotency key, in the claim's transaction
// (idempotency.Request.Create): the resource, its first audit record, its
// first event.
//
// Each Statement is written twice over, from one source:
//
//   - plain, for a transaction whose claim already took its key: the engine
//     that commits each request on its own (idempotency's inline committer)
//     runs the claim, stops if the key was taken (a retry), and only then
//     runs these (Taken);
//   - gated, for a batch sent in one round trip after the claim, with no
//     look at the claim's result in between (the group committer's, and an
//     owner's scheduled claim, idempotency.Engine.QueueScheduled). When the
//     key is already taken the claim writes nothing and raises nothing, and
//     so must every statement after it: an error would be logged by
//     PostgreSQL, and pgx drops every statement of a failed batch from the
//     connection's statement cache. So each gated statement tests
//     Condition, which holds exactly when the claim took its key, wherever
//     it writes, locks or refuses (After).
//
// The ways to make a Statement (Gated, NewTemplate, NewRows) hand their
// builder the condition to test, "true" for the plain form, and refuse a
// builder that ignores it.
//
// The condition is per row. A gated claim is a statement over input rows
// (package rowset): one row for one request, or the rows of several
// requests' like batches, merged (package groupcommit). It sets Setting to
// the list of the ordinals of the rows whose key it took (",1,3,"), and a
// statement over the same input rows (NewRows) tests its row's ordinal
// there; a statement written for one request (Gated) tests that the list
// is not empty, which for a claim of one row is the same thing.
package claim

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/rowset"
)

// Setting is the transaction-local setting the claim sets (set_config's
// is_local): the ordinals of its input rows whose key it took, each between
// commas (",1,3,"); empty if it took none, and outside a claim.
const Setting = "paymentsapi.claimed"

// took is Setting's value, "" when unset.
const took = "coalesce(current_setting('" + Setting + "', true), '')"

// condition holds, in the transaction of a claim's batch of one request,
// once the claim took its key.
const condition = took + " <> ''"

// rowCondition holds, in a statement over input rows (package rowset)
// after a claim over the same rows, for a row whose key the claim took.
const rowCondition = "strpos(" + took + ", ',' || input.ord || ',') > 0"

// plain is the condition a builder is handed for the plain form: the claim
// took its key before the statement runs.
const plain = "true"

// Statement is one statement of a claim's transaction, in its two forms
// (see the package's doc). Only this package makes one (Gated, and a
// Template's With).
type Statement struct {
	plain, gated string
	args         []any
}

// Gated makes a Statement from build, which is handed the SQL condition that
// holds once the claim took its key and must test it wherever the statement
// writes, locks or refuses (see Implies for a refusal); built with "true",
// it is the plain form. A builder that does not use its condition is a
// defect: Gated panics.
func Gated(build func(claimed string) string, args ...any) Statement {
	return NewTemplate(build).With(args...)
}

// Template is a Gated statement's SQL, built and checked once, for a
// statement of every request: With makes the Statement. A Template is
// immutable, so a package may keep one in a variable.
type Template struct{ plain, gated string }

// NewTemplate builds and checks the SQL of a Gated statement (see Gated).
func NewTemplate(build func(claimed string) string) Template {
	return Template{plain: build(plain), gated: checked(build(condition), condition)}
}

// NewRows makes the Template of a statement whose plain form is the text
// plainSQL, with the parameters $1, $2, ... of cols, in order, and whose
// gated form is over input rows with cols (rowset.New's body), so that a
// group committer may merge the batches of several claims: build is handed
// the condition that holds for an input row whose key the claim took, and
// must test it wherever the statement writes, locks or refuses (as
// Gated's). Its arguments (With) are the columns' values, in order.
func NewRows(plainSQL string, cols []rowset.Column, build func(claimed string) string) Template {
	body := checked(build(rowCondition), rowCondition)
	return Template{plain: plainSQL, gated: rowset.New(cols, body).SQL()}
}

// checked is sql, which must test cond: a builder that ignores it is a
// defect, and panics.
func checked(sql, cond string) string {
	if !strings.Contains(sql, cond) {
		panic(fmt.Sprintf("claim: a statement ignores the condition it was handed: %s", strings.Join(strings.Fields(sql), " ")))
	}
	return sql
}

// With is the Statement of t with args.
func (t Template) With(args ...any) Statement {
	return Statement{plain: t.plain, gated: t.gated, args: args}
}

// Implies is the guard of a claim statement's refusal: the SQL condition
// that holds when cond does or the claim did not take its key, so that a
// retry's statement never refuses (refuse.Unless(claim.Implies(claimed,
// cond), ...)). claimed is the condition Gated handed the builder; in the
// plain form it is cond.
func Implies(claimed, cond string) string {
	if claimed == plain {
		return cond
	}
	return "NOT (" + claimed + ") OR (" + cond + ")"
}

// Batch is what an operation's Create queues its statements in: the rest
// of a claim's transaction.
type Batch struct {
	b     *pgx.Batch
	gated bool
}

// Taken returns the Batch that queues the plain forms into b, a batch of
// the transaction whose claim took its key.
func Taken(b *pgx.Batch) *Batch { return &Batch{b: b} }

// After returns the Batch that queues the gated forms into b, after the
// claim that the caller (package idempotency) queued there.
func After(b *pgx.Batch) *Batch { return &Batch{b: b, gated: true} }

// Queue adds s to the batch.
func (c *Batch) Queue(s Statement) {
	if c.gated {
		c.b.Queue(s.gated, s.args...)
		return
	}
	c.b.Queue(s.plain, s.args...)
}

// Took is the SQL expression by which a claim over input rows sets the
// condition for the rest of its batch: rows is a relation of the ordinals
// (column ord) of its input rows whose key it took. The list is set whole,
// emptied if none took, because a batch may share its transaction with
// other requests' (package groupcommit): a claim must not inherit the
// condition an earlier claim of the transaction set.
func Took(rows string) string {
	return "(SELECT set_config('" + Setting + "', COALESCE(',' || string_agg(ord::text, ',' ORDER BY ord) || ',', ''), true) FROM " + rows + ")"
}

// Claimed is the statement that makes the condition hold in a batch of one
// request as its claim does when it takes its key: for a test of the
// statements queued after a claim, without one.
func Claimed() string { return "SELECT set_config('" + Setting + "', ',1,', true)" }

// Reset is the statement that clears the condition, for an owner's batch
// that queued a claim (idempotency.Engine.QueueScheduled) and goes on.
func Reset() string { return "SELECT set_config('" + Setting + "', '', true)" }
