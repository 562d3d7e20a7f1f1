package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// `paymentsapi reconcile` with only DATABASE_URL would start a simulator
// that knows nothing and "resolve" every unknown payment by sending it to
// it. It refuses, and so does every operator command
// without DATABASE_URL; none migrates a database behind the operator's
// back.
func TestOperatorCommandsRefuseWhatWouldBeUnsafe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	runWith := func(env map[string]string, args ...string) error {
		return run(ctx, args, getenv(env), strings.NewReader(""), io.Discard, io.Discard)
	}

	dbURL := pgtest.NewURL(t)
	err := runWith(map[string]string{"DATABASE_URL": dbURL}, "reconcile", "-once")
	if !errors.Is(err, errNeedsRealProvider) {
		t.Errorf("reconcile with only DATABASE_URL: %v, want a refusal naming PROVIDER_URL", err)
	}
	for _, args := range [][]string{{"reconcile", "-once"}, {"outbox", "parked"}, {"keys", "list"}} {
		err := runWith(map[string]string{"PROVIDER_URL": "http://127.0.0.1:1"}, args...)
		if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
			t.Errorf("%v without DATABASE_URL: %v, want a refusal (no embedded PostgreSQL)", args, err)
		}
	}

	// An empty database: the operator's commands do not migrate it.
	empty := pgtest.NewEmptyURL(t)
	var stderr bytes.Buffer
	for _, args := range [][]string{{"outbox", "parked"}, {"keys", "create", "demo"}} {
		err = run(ctx, args, func(k string) string {
			return map[string]string{"DATABASE_URL": empty}[k]
		}, strings.NewReader(""), io.Discard, &stderr)
		if err == nil || !strings.Contains(err.Error(), "run `paymentsapi migrate`") {
			t.Errorf("%v on an unmigrated database: %v, want a refusal naming paymentsapi migrate", args, err)
		}
	}
	pool, err := pgxpool.New(ctx, empty)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("an operator command created %d tables", tables)
	}
}
