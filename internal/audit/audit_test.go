package audit_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/audit"
	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The service's role (the grants docs/operations.md lists) appends to the
// audit log, and can neither change nor delete what it holds, nor empty
// it.
func TestTheServiceRoleCannotRewriteTheAuditLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URLAsApplicationRole(t, pgtest.NewURL(t), ""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	as := actor.WithRequestID(actor.WithActor(ctx, actor.Operator("alice")), "req-1")
	if err := audit.Record(as, conn, time.Now(), audit.Change{Action: "api_key.revoked", TenantID: "t1", TargetID: "key_1"}); err != nil {
		t.Fatalf("the service's role cannot append: %v", err)
	}
	for _, sql := range []string{
		`UPDATE audit_events SET actor = 'someone else'`,
		`DELETE FROM audit_events`,
		`TRUNCATE audit_events`,
	} {
		if _, err := conn.Exec(ctx, sql); err == nil {
			t.Errorf("%s: allowed", sql)
		}
	}
	page, err := audit.List(ctx, conn, audit.Query{Limit: 10})
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("the log: %v %v", page, err)
	}
	if e := page.Items[0]; e.Actor != "operator:alice" || e.RequestID != "req-1" || e.Action != "api_key.revoked" || e.TargetID != "key_1" {
		t.Errorf("the event as read: %+v", e)
	}
}

// The owner of the table is refused too: only dropping the trigger, a
// change of schema, would let a row be changed.
func TestTheAuditLogRefusesItsOwnerToo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	as := actor.WithActor(ctx, actor.System)
	if err := audit.Record(as, pool, time.Now(), audit.Change{Action: "api_key.added"}); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{`UPDATE audit_events SET actor = 'x'`, `DELETE FROM audit_events`, `TRUNCATE audit_events`} {
		if _, err := pool.Exec(ctx, sql); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want the append-only refusal", sql, err)
		}
	}
}

// Work whose context names no actor cannot be audited: Record refuses it,
// and a claim's statement fails its transaction, rather than write an
// event that names nobody.
func TestAnEventNamesAnActor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if err := audit.Record(ctx, pool, time.Now(), audit.Change{Action: "api_key.created"}); !errors.Is(err, audit.ErrNoActor) {
		t.Errorf("Record without an actor: %v, want ErrNoActor", err)
	}
	b := &pgx.Batch{}
	claim.Taken(b).Queue(audit.Claimed(ctx, time.Now(), audit.Change{Action: "webhook_endpoint.created"}))
	if err := pool.SendBatch(ctx, b).Close(); err == nil {
		t.Error("a claim's event without an actor was written")
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_events`).Scan(new(int)); err != nil {
		t.Fatal(err)
	}
}
