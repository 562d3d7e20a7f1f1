package pgtest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Plan is a node of EXPLAIN (ANALYZE, FORMAT JSON): what a statement
// really read, for tests that prove a query stays bounded.
type Plan struct {
	NodeType       string  `json:"Node Type"`
	Relation       string  `json:"Relation Name"`
	Index          string  `json:"Index Name"`
	ActualRows     float64 `json:"Actual Rows"`
	ActualLoops    float64 `json:"Actual Loops"`
	RemovedFilter  float64 `json:"Rows Removed by Filter"`
	RemovedRecheck float64 `json:"Rows Removed by Index Recheck"`
	SharedHit      float64 `json:"Shared Hit Blocks"`
	SharedRead     float64 `json:"Shared Read Blocks"`
	Plans          []Plan  `json:"Plans"`
}

// Blocks is how many pages the node and those under it touched (found in
// shared buffers or read). Unlike RowsRead, it counts the index entries a
// scan passes over without returning them: a condition on an index's
// second column, tested entry by entry, reads every entry of the first.
func (n Plan) Blocks() float64 { return n.SharedHit + n.SharedRead }

// RowsRead sums the rows that the scans of the plan read: returned, or read
// and then removed by a filter.
func (n Plan) RowsRead() float64 {
	total := 0.0
	if n.Relation != "" || n.Index != "" {
		total += n.ActualLoops * (n.ActualRows + n.RemovedFilter + n.RemovedRecheck)
	}
	for _, c := range n.Plans {
		total += c.RowsRead()
	}
	return total
}

// String renders the plan as an indented tree, for failure messages.
func (n Plan) String() string {
	var b strings.Builder
	var walk func(n Plan, depth int)
	walk = func(n Plan, depth int) {
		fmt.Fprintf(&b, "%s%s %s %s rows=%v loops=%v filtered=%v\n", strings.Repeat("  ", depth), n.NodeType, n.Relation, n.Index,
			n.ActualRows, n.ActualLoops, n.RemovedFilter+n.RemovedRecheck)
		for _, c := range n.Plans {
			walk(c, depth+1)
		}
	}
	walk(n, 0)
	return b.String()
}

// Explain runs query (a statement whose parameters have the types
// paramTypes, e.g. "timestamptz, int") as a prepared statement under
// plan_cache_mode mode ("force_custom_plan" or "force_generic_plan", the
// plan a cached prepared statement may get), with EXPLAIN ANALYZE, in a
// transaction that it rolls back, and returns the plan. args are literals.
func Explain(t testing.TB, pool *pgxpool.Pool, mode, paramTypes, query string, args ...string) Plan {
	t.Helper()
	return ExplainUnder(t, pool, nil, mode, paramTypes, query, args...)
}

// ExplainUnder is Explain with settings (such as "SET LOCAL
// enable_seqscan = off") run first in its transaction, as the transaction
// that runs query in the service runs them.
func ExplainUnder(t testing.TB, pool *pgxpool.Pool, settings []string, mode, paramTypes, query string, args ...string) Plan {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, s := range append(slices.Clone(settings), "SET LOCAL plan_cache_mode = "+mode) {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, "PREPARE planned("+paramTypes+") AS "+query); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = tx.Exec(ctx, "DEALLOCATE planned") }()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", "''") + "'"
	}
	var raw []byte
	err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE planned("+strings.Join(quoted, ", ")+")",
		pgx.QueryExecModeSimpleProtocol).Scan(&raw)
	if err != nil {
		t.Fatal(err)
	}
	var out []struct {
		Plan Plan `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out[0].Plan
}

// Params are the parameter types and literals of a statement's args, as
// Explain takes them: text, text[], timestamptz and int arguments.
func Params(args []any) (paramTypes string, literals []string) {
	var types []string
	for _, a := range args {
		switch a := a.(type) {
		case string:
			types, literals = append(types, "text"), append(literals, a)
		case []string:
			types, literals = append(types, "text[]"), append(literals, "{"+strings.Join(a, ",")+"}")
		case time.Time:
			types, literals = append(types, "timestamptz"), append(literals, a.Format(time.RFC3339Nano))
		case int:
			types, literals = append(types, "int"), append(literals, fmt.Sprint(a))
		default:
			panic(fmt.Sprintf("pgtest.Params: an argument of type %T", a))
		}
	}
	return strings.Join(types, ", "), literals
}

// ReadsAtMost runs query as Explain does under both plans a prepared
// statement may get (a custom plan, and the generic plan PostgreSQL caches
// after a few executions), each in a subtest, and fails the subtest whose
// plan read more than limit rows, showing its plan.
func ReadsAtMost(t *testing.T, pool *pgxpool.Pool, limit float64, paramTypes, query string, args ...string) {
	t.Helper()
	ReadsAtMostUnder(t, pool, nil, limit, paramTypes, query, args...)
}

// ReadsAtMostUnder is ReadsAtMost with settings run first in each
// transaction (ExplainUnder).
func ReadsAtMostUnder(t *testing.T, pool *pgxpool.Pool, settings []string, limit float64, paramTypes, query string, args ...string) {
	t.Helper()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			plan := ExplainUnder(t, pool, settings, mode, paramTypes, query, args...)
			if got := plan.RowsRead(); got > limit {
				t.Errorf("read %v rows, at most %v expected:\n%s", got, limit, plan)
			}
		})
	}
}
