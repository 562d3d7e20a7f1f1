// Package sqlcond builds the WHERE clause of a statement whose conditions
// depend on its request (a listing's filters), numbering each argument as
// it is added, so that a condition is written beside its value.
package sqlcond

import (
	"fmt"
	"strings"
)

// Where is a conjunction of conditions and the arguments they number.
type Where struct {
	conds []string
	args  []any
}

// Add adds cond, whose verbs (%d, one per value) become the numbers of
// vals' parameters ($1, $2, ...).
func (w *Where) Add(cond string, vals ...any) {
	refs := make([]any, len(vals))
	for i, v := range vals {
		refs[i] = w.Arg(v)
	}
	w.conds = append(w.conds, fmt.Sprintf(cond, refs...))
}

// Arg adds v as the next argument, for a clause after the WHERE (a
// LIMIT), and returns its number.
func (w *Where) Arg(v any) int {
	w.args = append(w.args, v)
	return len(w.args)
}

// String is the conditions joined by AND.
func (w *Where) String() string { return strings.Join(w.conds, " AND ") }

// Args are the arguments, in their numbers' order.
func (w *Where) Args() []any { return w.args }
