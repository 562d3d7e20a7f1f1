package idempotency

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A claim refused on its data (a constraint, a guard) whose resource exists
// is answered as an expired key; a claim the database could not take (a
// read-only or shutting-down primary during a failover) is not, even when
// the resource can be found: its own error answers it (503).
func TestOnlyARefusedClaimLooksForItsResource(t *testing.T) {
	exists := Request{Resource: Resource{Type: "widget", ID: "w_1"}, Exists: func(context.Context) (bool, error) { return true, nil }}
	for code, expired := range map[string]bool{
		"23505": true,  // the resource's id taken
		"PA003": true,  // a guard of package refuse
		"25006": false, // read-only transaction: a demoted primary
		"57P01": false, // admin shutdown
		"08006": false, // connection failure
	} {
		err := fmt.Errorf("claim idempotency key: %w", &pgconn.PgError{Code: code})
		if got := existingResource(context.Background(), exists, err); (got != nil) != expired {
			t.Errorf("SQLSTATE %s: %v, want expired %v", code, got, expired)
		}
	}
	if got := existingResource(context.Background(), exists, errors.New("dial tcp: refused")); got != nil {
		t.Errorf("an unreachable database: %v, want nil", got)
	}
}
