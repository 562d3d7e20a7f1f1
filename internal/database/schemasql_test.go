package database_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// schemaSQLPath is the checked-in schema, from this package's directory.
const schemaSQLPath = "../../migrations/schema.sql"

// schemaSQLWrite is the variable that makes TestSchemaSQLIsWhatTheMigrationsProduce
// write the file instead of comparing it (`make schema` sets it).
const schemaSQLWrite = "SCHEMA_SQL_WRITE"

// schemaSQLMajor is the major version of PostgreSQL whose pg_dump wrote
// schema.sql: another version words the same schema differently.
const schemaSQLMajor = 15

// schemaSQLHeader opens migrations/schema.sql.
const schemaSQLHeader = `-- The whole schema of the payments database, as the numbered migrations in
-- migrations/ leave it. The contract steps waiting in migrations/pending/ are
-- NOT applied: this is the schema of the current release.
--
-- Generated: do not edit. Write a migration, then run ` + "`make schema`" + `, which
-- applies the migrations to a fresh database and dumps it (pg_dump -s of
-- PostgreSQL 15, without owners, privileges, session settings or goose's own
-- table). A test in internal/database fails when this file differs from what
-- the migrations produce. docs/design.md, "Tables", names the package that
-- owns each table.
`

// migrations/schema.sql is the schema the migrations produce, so that a
// reader sees every table, index, function and trigger in one file rather
// than in the migrations that built them up. `make schema` regenerates it.
func TestSchemaSQLIsWhatTheMigrationsProduce(t *testing.T) {
	dbURL := pgtest.NewURL(t) // the numbered migrations only (migrations.FS)
	write := os.Getenv(schemaSQLWrite) == "1"
	if major := serverMajor(t, dbURL); major != schemaSQLMajor {
		if write {
			t.Fatalf("migrations/schema.sql is PostgreSQL %d's pg_dump; this server is PostgreSQL %d", schemaSQLMajor, major)
		}
		t.Skipf("migrations/schema.sql is PostgreSQL %d's pg_dump; this server is PostgreSQL %d", schemaSQLMajor, major)
	}
	got := dumpSchema(t, dbURL)
	if write {
		if err := os.WriteFile(schemaSQLPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote migrations/schema.sql (%d bytes)", len(got))
		return
	}
	want, err := os.ReadFile(schemaSQLPath)
	if err != nil {
		t.Fatalf("%v: run `make schema`", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("migrations/schema.sql is not the schema the migrations produce: run `make schema`\n%s", firstDifference(want, got))
	}
}

// serverMajor is the major version of the server at dbURL.
func serverMajor(t *testing.T, dbURL string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var num int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&num); err != nil {
		t.Fatal(err)
	}
	return num / 10000
}

// dumpSchema is the schema of the database at dbURL as schema.sql holds it:
// pg_dump -s, normalised (normaliseDump), under schemaSQLHeader.
func dumpSchema(t *testing.T, dbURL string) []byte {
	t.Helper()
	pgDump := "pg_dump"
	if dir := pgtest.BinDir(); dir != "" {
		pgDump = filepath.Join(dir, "pg_dump")
	} else if _, err := exec.LookPath(pgDump); err != nil {
		t.Skipf("no pg_dump for the server named by %s: %v", pgtest.EnvURL, err)
	}
	cmd := exec.Command(pgDump, "--schema-only", "--no-owner", "--no-privileges",
		"--exclude-table=goose_db_version", "--dbname="+dbURL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("pg_dump: %v\n%s", err, stderr.String())
	}
	return []byte(schemaSQLHeader + "\n" + normaliseDump(string(out)))
}

// normaliseDump keeps of a pg_dump what the migrations decide. It drops
// what comes before the first object (the banner, which names pg_dump's and
// the server's minor versions, the session settings, and the \restrict
// line, whose key is new on every run) and what comes after the last (the
// closing banner and \unrestrict), the session settings it writes before
// the first table, and the three comment lines that head each object (its
// name, kind and schema, which its statement says again).
// The rest is pg_dump's, byte for byte: the objects in its stable order (by
// kind, then by name, each after what it depends on), function bodies as
// they are.
func normaliseDump(dump string) string {
	lines := strings.Split(dump, "\n")
	heading := func(i int) bool { // lines i to i+2 head an object
		return i+2 < len(lines) && lines[i] == "--" && strings.HasPrefix(lines[i+1], "-- Name: ") && lines[i+2] == "--"
	}
	var out []string
	started := false
	for i := 0; i < len(lines); i++ {
		switch {
		case heading(i):
			started = true
			i += 2
			if i+1 < len(lines) && lines[i+1] == "" {
				i++
			}
			continue
		case !started:
			continue
		case i+2 < len(lines) && lines[i] == "--" && lines[i+1] == "-- PostgreSQL database dump complete":
			i = len(lines)
			continue
		case lines[i] == "SET default_tablespace = '';" || lines[i] == "SET default_table_access_method = heap;":
			// Session settings pg_dump writes before the first table.
			if i+1 < len(lines) && lines[i+1] == "" {
				i++
			}
			continue
		}
		out = append(out, lines[i])
	}
	return strings.TrimSpace(strings.Join(out, "\n")) + "\n"
}

// firstDifference says where want and got part, line by line.
func firstDifference(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl || i >= len(w) || i >= len(g) {
			return fmt.Sprintf("line %d:\n  schema.sql:      %q\n  the migrations': %q", i+1, wl, gl)
		}
	}
	return "(no line differs)"
}
