package database_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/refuse"
)

// A refusal is an answer, not a fault (migration 00016): when the role that
// migrates may set log_min_messages, a refusal reaches the client as an
// error and leaves nothing in the server's log, while any other error is
// logged as before. The database is migrated, and refuse called, by a role
// that is not a superuser, as in a deployment that grants it the parameter.
func TestRefusalsStayOutOfTheServerLog(t *testing.T) {
	t.Parallel()
	admin := serverAdmin(t)
	conn, dbURL := migratedAs(t, admin, "GRANT SET ON PARAMETER log_min_messages TO %s")

	quiet, loud := marker(t), marker(t)
	assertRefuses(t, conn, quiet)
	// A caller that may not set the parameter (refuse runs with its owner's
	// rights) gets the refusal too, not a "permission denied".
	assertRefuses(t, connectAs(t, admin, conn, dbURL, marker(t)), quiet)
	if _, err := conn.Exec(context.Background(), `SELECT 1 / 0 AS `+pgx.Identifier{loud}.Sanitize()); err == nil {
		t.Fatal("1 / 0 did not fail")
	}
	log := serverLog(t)
	if !strings.Contains(log, loud) {
		t.Fatalf("the server log lacks the division by zero (%s): not the log of this server?", loud)
	}
	if strings.Contains(log, quiet) {
		t.Errorf("the refusal %s is in the server log", quiet)
	}
}

// A role that may not set log_min_messages gets the refuse of 00014: its
// refusals are logged, and they still refuse (a quiet refuse called by a
// role that may not set the parameter would fail with "permission denied"
// instead of refusing).
func TestARoleThatMayNotQuietRefusalsStillRefuses(t *testing.T) {
	t.Parallel()
	admin := serverAdmin(t)
	conn, _ := migratedAs(t, admin, "")

	loud := marker(t)
	assertRefuses(t, conn, loud)
	if log := serverLog(t); !strings.Contains(log, loud) {
		t.Errorf("the refusal %s is not in the server log", loud)
	}
}

// serverAdmin connects to the tests' server as its administrator, or skips
// the test if that is not a superuser (who alone may grant a superuser
// parameter and read the server's log).
func serverAdmin(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv(pgtest.EnvURL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	var super bool
	if err := conn.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil {
		t.Fatal(err)
	}
	if !super {
		t.Skip("the tests' server administrator is not a superuser")
	}
	return conn
}

// migratedAs creates a role that is not a superuser, runs grant (a format
// with the role's name, or empty) and creates a database it owns, migrates
// it as that role with database.Migrate, and returns a connection to it as
// that role, and its URL. Role and database are dropped when the test ends.
func migratedAs(t *testing.T, admin *pgx.Conn, grant string) (*pgx.Conn, *url.URL) {
	t.Helper()
	ctx := context.Background()
	name := marker(t)
	role := pgx.Identifier{name}.Sanitize()
	for _, q := range []string{
		`CREATE ROLE ` + role + ` LOGIN PASSWORD 'refusals' NOSUPERUSER`,
		`CREATE DATABASE ` + role + ` OWNER ` + role,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if grant != "" {
		if _, err := admin.Exec(ctx, fmt.Sprintf(grant, role)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = admin.Exec(ctx, `DROP DATABASE IF EXISTS `+role+` WITH (FORCE)`)
		_, _ = admin.Exec(ctx, `DROP ROLE IF EXISTS `+role)
	})

	u, err := url.Parse(admin.Config().ConnString())
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Skipf("the tests' server is not named by a URL: %q", admin.Config().ConnString())
	}
	u.User = url.UserPassword(name, "refusals")
	u.Path = "/" + name
	pool, err := database.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := database.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("migrate as %s: %v", name, err)
	}
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, u
}

// connectAs creates a login role name whose one privilege is to call
// refuse (granted by owner, the function's owner: no function is
// executable by PUBLIC, 00040) and connects it to the database of dbURL;
// the role is dropped when the test ends.
func connectAs(t *testing.T, admin, owner *pgx.Conn, dbURL *url.URL, name string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	role := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN PASSWORD 'refusals' NOSUPERUSER`); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Exec(ctx, `GRANT EXECUTE ON FUNCTION refuse(text, text, text) TO `+role); err != nil {
		t.Fatal(err)
	}
	u := *dbURL
	u.User = url.UserPassword(name, "refusals")
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close(context.Background())
		_, _ = owner.Exec(context.Background(), `REVOKE EXECUTE ON FUNCTION refuse(text, text, text) FROM `+role)
		_, _ = admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
	})
	return conn
}

// assertRefuses calls refuse with message and checks that the caller gets
// the refusal, not some other error.
func assertRefuses(t *testing.T, conn *pgx.Conn, message string) {
	t.Helper()
	_, err := conn.Exec(context.Background(), `SELECT refuse($1, $2)`, string(refuse.Fenced), message)
	if _, ok := refuse.Is(err, refuse.Fenced); !ok {
		var pgErr *pgconn.PgError
		errors.As(err, &pgErr)
		t.Fatalf("refuse = %v (%+v), want the refusal %s", err, pgErr, refuse.Fenced)
	}
}

// serverLog reads the log of the tests' throwaway cluster, or skips the
// test on a server it did not start.
func serverLog(t *testing.T) string {
	t.Helper()
	path := pgtest.ServerLog()
	if path == "" {
		t.Skip("not the tests' throwaway cluster: its log is not ours to read")
	}
	log, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(log)
}

// marker returns a fresh lower-case name, to find a statement in the log.
func marker(t *testing.T) string {
	t.Helper()
	return "refusal_" + strings.ToLower(rand.Text())
}
