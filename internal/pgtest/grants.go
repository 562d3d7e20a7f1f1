package pgtest

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// GrantsBlock is the first line of the block of docs/operations.md that
// holds the application role's grants ("Roles and grants").
const GrantsBlock = "-- The application role's grants."

// DocumentedGrants returns the statements of docs/operations.md's block of
// the application role's grants, for role (the block names it
// paymentsapi_app).
func DocumentedGrants(t testing.TB, role string) []string {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("pgtest: cannot tell where the repository is")
	}
	doc, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	_, block, found := strings.Cut(string(doc), "```sql\n"+GrantsBlock+"\n")
	block, _, closed := strings.Cut(block, "```")
	if !found || !closed {
		t.Fatalf("pgtest: docs/operations.md has no sql block that starts with %q", GrantsBlock)
	}
	var statements []string
	for s := range strings.SplitSeq(block, ";") {
		if s = strings.TrimSpace(s); s != "" {
			statements = append(statements, strings.ReplaceAll(s, "paymentsapi_app", role))
		}
	}
	if len(statements) == 0 {
		t.Fatal("pgtest: docs/operations.md lists no grants")
	}
	return statements
}

// URLAsApplicationRole returns dbURL (a database of NewURL, NewEmptyURL or
// NewPoolAt, whose owner is the tests' role) as a role made for this test
// only (NewRole, with attributes) that has exactly the grants
// docs/operations.md lists for the service's application role, granted by
// the owner: on what the database holds, and by default on what the
// owner's later migrations create.
func URLAsApplicationRole(t testing.TB, dbURL, attributes string) string {
	t.Helper()
	ctx := context.Background()
	roleURL, role := NewRole(t, dbURL, attributes)
	owner, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer owner.Close(ctx)
	for _, q := range DocumentedGrants(t, role) {
		if _, err := owner.Exec(ctx, q); err != nil {
			t.Fatalf("pgtest: %s: %v", q, err)
		}
	}
	return roleURL
}
