package groupcommit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Merging like batches (Options.Merge). A group's batches whose statements
// all have a text for many rows, the same statements in the same order,
// are sent as those statements, each once for all of them: its parameters
// become arrays, one element per batch in the group's order, and its rows
// go back to the batches they belong to by their first column, the batch's
// ordinal in that order (package rowset's ord). A batch of the merge gets
// what it would alone: its statements' rows, and what a statement that
// returned none for it gives (pgx.ErrNoRows to a QueryRow). What it gives
// up: its statements no longer run next to each other, but each after the
// same statement of the batches before it; and a refusal says nothing of
// whose row it was, so that the group is then sent again unmerged, which
// finds the batch refused (and sends the others alone before it).
//
// Batches with the same key are never merged (they go in separate units):
// an operation that keys its batches by what they contend for can then
// tell its rows apart by that too.

// errReadByRow is the error of a merged statement's batch whose callback
// reads its result other than with QueryRow.
var errReadByRow = errors.New("groupcommit: a merged statement's result is read with QueryRow only")

// units splits group (in its order) into what is sent as one: each merge
// of like batches (if merge), and each other batch alone. Each unit is the batches'
// indexes in group, in order; the units are in the order of their first.
// Only batches next to each other are merged: a merge runs where its first
// batch stands, so merging across a batch of another shape would take the
// later batch's locks before that one's, out of the order of their keys
// that every group keeps (and two groups would deadlock).
func (c *Committer) units(group []*request, merge bool) [][]int {
	units := make([][]int, 0, len(group))
	if !merge {
		all := make([]int, len(group)) // each batch alone: one allocation
		for i := range all {
			all[i] = i
			units = append(units, all[i:i+1:i+1])
		}
		return units
	}
	last := "" // the shape of the last unit, if it may take more batches
	for i, r := range group {
		shape, ok := c.shape(r.b)
		if n := len(units); ok && n > 0 && shape == last && group[units[n-1][len(units[n-1])-1]].key != r.key {
			units[n-1] = append(units[n-1], i)
			continue
		}
		last = ""
		if ok {
			last = shape
		}
		units = append(units, []int{i})
	}
	return units
}

// shape is what batches must share to be merged: their statements' texts
// and numbers of arguments, in order; false if one of them has no text for
// many rows.
func (c *Committer) shape(b *pgx.Batch) (string, bool) {
	if len(b.QueuedQueries) == 0 {
		return "", false
	}
	var s strings.Builder
	for _, q := range b.QueuedQueries {
		if _, ok := c.manyOf(q.SQL); !ok {
			return "", false
		}
		s.WriteString(q.SQL)
		s.WriteByte(0)
		s.WriteString(strconv.Itoa(len(q.Arguments)))
		s.WriteByte(0)
	}
	return s.String(), true
}

// manyOf is Options.Merge of sql, remembered.
func (c *Committer) manyOf(sql string) (string, bool) {
	if v, ok := c.many.Load(sql); ok {
		return v.(string), v.(string) != ""
	}
	many, ok := c.opts.Merge(sql)
	if !ok {
		many = ""
	}
	c.many.Store(sql, many)
	return many, ok
}

// queueMerged adds to all the statements of the like batches unit (their
// indexes in group), each once over arrays of their parameters. While a
// merged statement's result is read, *reading is -1: a refusal there is
// no one batch's.
func (c *Committer) queueMerged(all *pgx.Batch, group []*request, unit []int, reading *int) {
	first := group[unit[0]].b
	for j, q := range first.QueuedQueries {
		many, _ := c.manyOf(q.SQL)
		arrays := make([]any, len(q.Arguments))
		for k := range arrays {
			column := make([]any, len(unit))
			for n, i := range unit {
				column[n] = group[i].b.QueuedQueries[j].Arguments[k]
			}
			arrays[k] = column
		}
		fns := make([]func(pgx.BatchResults) error, len(unit))
		for n, i := range unit {
			fns[n] = group[i].b.QueuedQueries[j].Fn
		}
		plain := c.opts.Plain != nil && c.opts.Plain(q.SQL)
		all.QueuedQueries = append(all.QueuedQueries, &pgx.QueuedQuery{SQL: many, Arguments: arrays,
			Fn: func(br pgx.BatchResults) error {
				*reading = -1
				return dispatch(br, fns, plain)
			}})
	}
}

// dispatch reads a merged statement's rows and hands each to the callback
// of the batch its first column numbers (1: the first of the merge),
// without that column if plain; a batch that got none, its callback gets
// no row.
func dispatch(br pgx.BatchResults, fns []func(pgx.BatchResults) error, plain bool) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	got := make([]bool, len(fns))
	var fnErr error
	for rows.Next() {
		var ord int64
		dest := make([]any, len(rows.FieldDescriptions()))
		dest[0] = &ord
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("groupcommit: a merged statement's row: %w", err)
		}
		n := int(ord) - 1
		if n < 0 || n >= len(fns) || got[n] {
			return fmt.Errorf("groupcommit: a merged statement returned a row for batch %d of %d: at most one each", ord, len(fns))
		}
		got[n] = true
		if fns[n] != nil {
			if err := fns[n](rowResult{rows: rows, plain: plain}); err != nil && fnErr == nil {
				fnErr = err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for n, fn := range fns {
		if !got[n] && fn != nil {
			if err := fn(rowResult{}); err != nil && fnErr == nil {
				fnErr = err
			}
		}
	}
	return fnErr
}

// rowResult is one batch's result of a merged statement: its row (rows at
// it), or none (nil rows), read without its ordinal if plain. It is read
// with QueryRow only.
type rowResult struct {
	rows  pgx.Rows
	plain bool
}

func (r rowResult) QueryRow() pgx.Row { return r }

func (r rowResult) Scan(dest ...any) error {
	if r.rows == nil {
		return pgx.ErrNoRows
	}
	if r.plain {
		dest = append([]any{nil}, dest...)
	}
	return r.rows.Scan(dest...)
}

func (rowResult) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, errReadByRow }
func (rowResult) Query() (pgx.Rows, error)         { return nil, errReadByRow }
func (rowResult) Close() error                     { return nil }
func (rowResult) Tx() pgx.Tx                       { return nil }
