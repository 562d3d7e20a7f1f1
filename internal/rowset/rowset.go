// Package rowset writes a statement once for one row or for many: its SQL
// reads its parameters from a relation named input, one row per request,
// numbered by its column ord (1, 2, ...), so that the like statements of
// several requests can be sent as one statement over arrays (package
// groupcommit merges a group's like batches so: Options.Merge is Many).
//
// New makes the one-row text: the input is one row of parameters,
//
//	-- rowset: id text, amount bigint
//	WITH input (ord, id, amount) AS (VALUES (1::bigint, $1::text, $2::bigint))
//	<body>
//
// and Many derives from that text the many-row one, whose parameters are
// arrays, one element per row, unnested in order:
//
//	WITH input (ord, id, amount) AS (SELECT u.ord, u.id, u.amount
//	    FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u (id, amount, ord))
//	<body>
//
// The body goes on from there: more common table expressions (", x AS
// (...)") and the statement itself. It must be right for any number of
// input rows: write and lock in the order of ord, and return, if it returns
// anything, at most one row per input row, ord first, so that each request
// gets its own (a caller reads ord and skips it: pgx's Scan takes a nil
// destination for it).
package rowset

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Column is one parameter of a statement's input rows: its name in input,
// and its SQL type (not an array: unnest would flatten it).
type Column struct{ Name, Type string }

// Statement is a statement over input rows, in its one-row form.
type Statement struct{ sql string }

// header starts a one-row text: it declares the columns Many needs.
const header = "-- rowset: "

// New returns the statement over input rows with cols whose body is body
// (see the package's doc). A column that is not a plain identifier, or
// whose type is an array, is a programming error: New panics.
func New(cols []Column, body string) Statement {
	if len(cols) == 0 {
		panic("rowset: a statement without input columns")
	}
	decl := make([]string, len(cols))
	for i, c := range cols {
		if !identifier.MatchString(c.Name) || c.Name == "ord" || !typeName.MatchString(c.Type) || strings.HasSuffix(c.Type, "]") {
			panic(fmt.Sprintf("rowset: column %q of type %q", c.Name, c.Type))
		}
		decl[i] = c.Name + " " + c.Type
	}
	return Statement{sql: header + strings.Join(decl, ", ") + "\n" + oneInput(cols) + body}
}

// SQL is the statement's one-row text; its parameters are the columns', in
// order.
func (s Statement) SQL() string { return s.sql }

var (
	identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	typeName   = regexp.MustCompile(`^[a-z][a-z0-9_ ]*(\[\])?$`)
)

// oneInput is the input of one row: ord 1 and the parameters.
func oneInput(cols []Column) string {
	var b strings.Builder
	b.WriteString("WITH input (ord")
	for _, c := range cols {
		b.WriteString(", " + c.Name)
	}
	b.WriteString(") AS (VALUES (1::bigint")
	for i, c := range cols {
		b.WriteString(", $" + strconv.Itoa(i+1) + "::" + c.Type)
	}
	b.WriteString("))")
	return b.String()
}

// manyInput is the input of many rows: each parameter an array, unnested
// in order, with each row's ordinal.
func manyInput(cols []Column) string {
	var names, arrays []string
	for i, c := range cols {
		names = append(names, c.Name)
		arrays = append(arrays, "$"+strconv.Itoa(i+1)+"::"+c.Type+"[]")
	}
	return "WITH input (ord, " + strings.Join(names, ", ") + ") AS (SELECT u.ord, u." + strings.Join(names, ", u.") +
		" FROM unnest(" + strings.Join(arrays, ", ") + ") WITH ORDINALITY AS u (" + strings.Join(names, ", ") + ", ord))"
}

// Many is the many-row text of sql, a one-row text made by New or a text
// made by Paired; false for any other text.
func Many(sql string) (string, bool) {
	sql, ok := Grouped(sql)
	if !ok {
		return "", false
	}
	rest, ok := strings.CutPrefix(sql, header)
	if !ok {
		return "", false
	}
	decl, rest, ok := strings.Cut(rest, "\n")
	if !ok {
		return "", false
	}
	var cols []Column
	for _, d := range strings.Split(decl, ", ") {
		name, typ, ok := strings.Cut(d, " ")
		if !ok {
			return "", false
		}
		cols = append(cols, Column{Name: name, Type: typ})
	}
	body, ok := strings.CutPrefix(rest, oneInput(cols))
	if !ok {
		return "", false
	}
	return manyInput(cols) + body, true
}

// A statement is read in its plain form: written for one request, with
// $1, $2, ... its parameters, the text a reader meets and the one that runs
// when each request's transaction is its own. Where like batches may be
// merged (package groupcommit), the same statement over input rows rides
// along in the text, inside a comment PostgreSQL skips: Paired makes that
// text, and Grouped finds the form over input rows in it.

// pairedMark opens the comment of a paired text.
const pairedMark = "\n/* over input rows (package rowset):\n"

// Paired is the text of the statement plain, which runs as it is written,
// carrying rows, the same statement over input rows with the same
// parameters in the same order and, after the ordinal, the same result
// columns. A group committer merges like batches with rows; everywhere
// else plain runs alone.
func Paired(plain string, rows Statement) string {
	if strings.Contains(rows.sql, "*/") || strings.Contains(plain, pairedMark) {
		panic("rowset: a statement that cannot be paired: " + strings.Join(strings.Fields(plain), " "))
	}
	return plain + pairedMark + rows.sql + "\n*/"
}

// Grouped is the form over input rows of sql: the one Paired put beside
// it, or sql itself if it is one (New's); false for any other text.
func Grouped(sql string) (string, bool) {
	if strings.HasPrefix(sql, header) {
		return sql, true
	}
	_, rows, ok := strings.Cut(sql, pairedMark)
	if !ok {
		return "", false
	}
	return strings.TrimSuffix(rows, "\n*/"), true
}

// IsPaired reports whether sql is a text Paired made: its result, read in
// the plain form's columns, comes without the ordinal.
func IsPaired(sql string) bool { return strings.Contains(sql, pairedMark) }
