package database_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// No function of the schema is executable by PUBLIC (00040), and neither
// is one a later migration creates: the service's role is granted EXECUTE
// by name (docs/operations.md), and no other role may call a function the
// schema's owner wrote (refuse runs with its owner's rights).
func TestNoFunctionIsExecutableByPublic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if n := count(t, pool, `pg_proc WHERE pronamespace = 'public'::regnamespace`); n == 0 {
		t.Fatal("the schema has no function: nothing to check")
	}
	// A function a later migration would create, as the role that migrates.
	if _, err := pool.Exec(ctx, `CREATE FUNCTION a_later_function() RETURNS int LANGUAGE sql AS 'SELECT 1'`); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `
		SELECT oid::regprocedure::text FROM pg_proc
		WHERE pronamespace = 'public'::regnamespace AND has_function_privilege('public', oid, 'EXECUTE')
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	public, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(public) > 0 {
		t.Errorf("functions executable by PUBLIC: %s", strings.Join(public, ", "))
	}
}

// count counts the rows of from (a table and its conditions).
func count(t *testing.T, pool *pgxpool.Pool, from string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM `+from).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
