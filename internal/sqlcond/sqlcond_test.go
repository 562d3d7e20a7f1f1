package sqlcond

import (
	"slices"
	"testing"
)

// Each condition's verbs become the numbers of its values, in the order
// the values were added, and an argument after the WHERE takes the next.
func TestConditionsNumberTheirArguments(t *testing.T) {
	t.Parallel()
	var w Where
	w.Add("tenant_id = $%d", "t")
	w.Add("NOT holds_reference")
	w.Add("(created_at, id) < ($%d, $%d)", "at", "id")
	if n := w.Arg(21); n != 4 {
		t.Errorf("the limit is $%d, want $4", n)
	}
	if got, want := w.String(), "tenant_id = $1 AND NOT holds_reference AND (created_at, id) < ($2, $3)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := w.Args(); !slices.Equal(got, []any{"t", "at", "id", 21}) {
		t.Errorf("args %v", got)
	}
}
