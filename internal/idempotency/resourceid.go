package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/ids"
)

// ResourceID is the id, with prefix, of the resource that the command with
// fingerprint creates under scope: derived from them (ids.Derive), never
// random. A retry whose key's records were lost with the last commits of a
// failed-over database recreates its resource under the id it had, and so
// calls the provider with the key it had, and the provider's own
// idempotency answers the original charge. scope.Operation must be a name
// that stays the same across a rename of the operation's scope (the name
// the operation's fingerprint holds), or a retry across the rename would
// derive another id.
func ResourceID(prefix string, scope Scope, fingerprint []byte) string {
	return ids.Derive(prefix, []byte(scope.Tenant), []byte(scope.Operation), []byte(scope.Key), fingerprint)
}

// existingResource answers a claim that the database refused (a rule of
// the operation, or the uniqueness of the resource's id) when the resource
// it was to create exists already. The id being derived from the scope and
// the command, that resource is this very command's, created under a key
// whose record clean-up has since deleted (IDEMPOTENCY_TTL and the
// metadata window passed): the key is answered as expired, naming the
// resource, rather than with the rule's refusal or a 500, and above all
// rather than as a new command. It is nil when req cannot tell
// (req.Exists is nil), when claimErr is no refusal (refused), or when the
// resource does not exist.
func existingResource(ctx context.Context, req Request, claimErr error) *KeyExpiredError {
	if req.Exists == nil || !refused(claimErr) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if exists, err := req.Exists(ctx); err != nil || !exists {
		return nil
	}
	return &KeyExpiredError{Resource: req.Resource}
}

// RowExists is a Request.Exists: whether query, a SELECT of args, finds a
// row in db (SELECT FROM payments WHERE id = $1 AND tenant_id = $2).
func RowExists(db *pgxpool.Pool, query string, args ...any) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		var exists bool
		if err := db.QueryRow(ctx, "SELECT EXISTS ("+query+")", args...).Scan(&exists); err != nil {
			return false, fmt.Errorf("look for the resource of a refused claim: %w", err)
		}
		return exists, nil
	}
}

// refused reports whether err is the database refusing a claim's batch on
// its data: a constraint (class 23) or a guard of package refuse (class PA,
// which PostgreSQL does not use). Anything else, a read-only or shutting
// down primary during a failover above all, is no refusal: the claim's own
// error answers it (503), not a look for the resource on a server that
// could not take the claim.
func refused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "23") || strings.HasPrefix(pgErr.Code, "PA"))
}
