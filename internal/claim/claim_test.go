package claim_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/claim"
)

// A builder that ignores the condition it is handed would make a statement
// that runs on every retry: Gated refuses it.
func TestGatedRefusesABuilderThatIgnoresItsCondition(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "ignores the condition") {
			t.Fatalf("recovered %v, want Gated's panic", r)
		}
	}()
	claim.Gated(func(string) string { return `INSERT INTO widgets (id) VALUES ('w_1')` })
}

// A builder that tests its condition makes a statement that Batch queues
// with its arguments, after the claim.
func TestGatedStatementIsQueuedAsBuilt(t *testing.T) {
	b := &pgx.Batch{}
	claim.After(b).Queue(claim.Gated(func(claimed string) string {
		return `INSERT INTO widgets (id) SELECT $1 WHERE ` + claimed
	}, "w_1"))
	if b.Len() != 1 || !strings.Contains(b.QueuedQueries[0].SQL, "current_setting('"+claim.Setting+"'") ||
		len(b.QueuedQueries[0].Arguments) != 1 {
		t.Fatalf("queued %+v", b.QueuedQueries)
	}
}
