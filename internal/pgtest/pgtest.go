// Package pgtest gives each database test its own freshly migrated database
// on a real PostgreSQL server.
//
// Usage, once per test package:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// then, in a test, pgtest.NewPool(t) or pgtest.NewURL(t).
//
// The server is the one named by TEST_DATABASE_URL, else by DATABASE_URL,
// else a throwaway cluster (see package pgembed) that Main starts in a
// temporary directory for the life of the test binary. Databases come from
// github.com/peterldowns/pgtestdb: the migrations of package migrations are
// applied once to a template database, which each test then clones (fast),
// and the clone is dropped when the test passes (kept for inspection when
// it fails). The server's user must be allowed to create roles and
// databases; tests connect as pgtestdb's own role, which is neither a
// superuser nor allowed to create databases or roles, like the application
// (on a throwaway cluster it may set log_min_messages: createTestRole).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib" // also registers the "pgx" database/sql driver for pgtestdb
	"github.com/peterldowns/pgtestdb"
	"github.com/peterldowns/pgtestdb/migrators/goosemigrator"
	"github.com/pressly/goose/v3"

	"github.com/paymentsapi/paymentsapi/internal/pgembed"
	"github.com/paymentsapi/paymentsapi/migrations"
)

// EnvURL is the environment variable that names the server the tests use.
// Main sets it to its throwaway cluster when neither it nor DATABASE_URL is
// set.
const EnvURL = "TEST_DATABASE_URL"

// envServerLog is where Main publishes its throwaway cluster's log file
// (ServerLog), as it publishes the cluster's URL in EnvURL.
const envServerLog = "PGTEST_SERVER_LOG"

// envBinDir is where Main publishes its throwaway cluster's binary
// directory (BinDir).
const envBinDir = "PGTEST_BIN_DIR"

// BinDir is the directory of the PostgreSQL programs (pg_dump, ...) of the
// throwaway cluster Main started for this test binary, whose major version
// is the server's; "" when the tests use a server named by
// TEST_DATABASE_URL or DATABASE_URL.
func BinDir() string { return os.Getenv(envBinDir) }

// ServerLog is the log file of the throwaway cluster Main started for this
// test binary, whose test role (createTestRole) may set log_min_messages;
// "" when the tests use a server named by TEST_DATABASE_URL or
// DATABASE_URL, which the tests do not own.
func ServerLog() string { return os.Getenv(envServerLog) }

// CommitMode is how the tests' idempotency engines commit
// (idempotency.Config.CommitMode): TEST_COMMIT_MODE, "" for the default.
// `make test` runs the packages that drive the engine once in each mode,
// so that every test of the protocol holds for both committers.
func CommitMode() string { return os.Getenv("TEST_COMMIT_MODE") }

// Main runs the tests of a package (m.Run) against a PostgreSQL server and
// returns the exit code for os.Exit. If TEST_DATABASE_URL or DATABASE_URL is
// set, it uses that server; otherwise it starts an ephemeral pgembed cluster
// in a temporary directory, publishes its URL in TEST_DATABASE_URL for
// NewURL, and removes it after the tests. If the cluster cannot start, Main
// reports why and fails the binary.
func Main(m *testing.M) int {
	if os.Getenv(EnvURL) != "" {
		return m.Run()
	}
	// Whatever the environment says, a server this binary did not start
	// has no log or binaries of ours.
	for _, name := range []string{envServerLog, envBinDir} {
		if err := os.Unsetenv(name); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			return 1
		}
	}
	if u := os.Getenv("DATABASE_URL"); u != "" {
		if err := os.Setenv(EnvURL, u); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			return 1
		}
		return m.Run()
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The temporary directory is 0700; as root, the cluster runs as the
	// postgres OS user, which must be able to enter it.
	if err := os.Chmod(dir, 0o711); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cluster, err := pgembed.Start(ctx, pgembed.Options{
		DataDir:   filepath.Join(dir, "postgres"),
		Ephemeral: true,
		Logger:    logger,
	})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: no test database server: %v\n"+
			"pgtest: set %s (or DATABASE_URL) to use an existing PostgreSQL server\n", err, EnvURL)
		return 1
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cluster.Stop(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
	}()
	if err := os.Setenv(EnvURL, cluster.URL("postgres")); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	for name, value := range map[string]string{envServerLog: cluster.LogPath(), envBinDir: cluster.BinDir()} {
		if err := os.Setenv(name, value); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			return 1
		}
	}
	if err := createTestRole(cluster.URL("postgres")); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	return m.Run()
}

// createTestRole creates pgtestdb's role on a throwaway cluster before
// pgtestdb would, as pgtestdb would, plus the one privilege the service's
// role has in a deployment that does not run it as a superuser: it may set
// log_min_messages, so that migration 00016 makes refusals quiet. Tests
// then run the refusals of make run and make bench, not the fallback.
// (Servers named by TEST_DATABASE_URL or DATABASE_URL are left as they are.)
func createTestRole(adminURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("create the test role: %w", err)
	}
	defer conn.Close(ctx)
	role := pgx.Identifier{pgtestdb.DefaultRoleUsername}.Sanitize()
	for _, q := range []string{
		`CREATE ROLE ` + role,
		`ALTER ROLE ` + role + ` WITH LOGIN PASSWORD '` + pgtestdb.DefaultRolePassword + `' ` + pgtestdb.DefaultRoleCapabilities,
		`GRANT SET ON PARAMETER log_min_messages TO ` + role,
		// Logical decoding (package outbox/stream) needs a role that may
		// create and read replication slots.
		`ALTER ROLE ` + role + ` REPLICATION`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("create the test role: %s: %w", q, err)
		}
	}
	return nil
}

// NewURL creates a database with every migration applied, for this test
// only, and returns its connection URL. The database is dropped when the
// test ends, unless the test failed. NewURL fails the test if no server is
// configured (see Main) or the database cannot be made.
func NewURL(t testing.TB) string {
	t.Helper()
	return newURL(t, goosemigrator.New(".", goosemigrator.WithFS(migrations.FS)))
}

func newURL(t testing.TB, migrator pgtestdb.Migrator) string {
	t.Helper()
	serverURL := os.Getenv(EnvURL)
	if serverURL == "" {
		t.Fatalf("pgtest: %s is not set: call pgtest.Main from TestMain "+
			"(func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) })", EnvURL)
	}
	conf, err := pgtestdbConfig(serverURL)
	if err != nil {
		t.Fatalf("pgtest: %s: %v", EnvURL, err)
	}
	dbURL := pgtestdb.Custom(t, conf, migrator).URL()
	// Registered after pgtestdb's clean-up, so it runs before it: a
	// database with a replication slot cannot be dropped.
	t.Cleanup(func() { dropSlots(t, dbURL) })
	return dbURL
}

// dropSlots drops the replication slots of the database at dbURL (those
// the outbox relays of a test created there), waiting up to 10 s for each
// reader to let go of its slot: a reader's end reaches the server a moment
// after its Close.
func dropSlots(t testing.TB, dbURL string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Errorf("pgtest: drop the test database's slots: %v", err)
		return
	}
	defer conn.Close(context.Background())
	for {
		var left int
		_, err := conn.Exec(ctx, `
			SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE database = current_database() AND NOT active`)
		if err == nil {
			err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`).Scan(&left)
		}
		if err == nil && left == 0 {
			return
		}
		if err == nil {
			err = fmt.Errorf("%d still read", left)
		}
		if ctx.Err() != nil {
			t.Errorf("pgtest: drop the test database's slots: %v", err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// NewContractedPool is NewPool on the schema of the next release: every
// migration, then every contract step still pending (migrations.Pending,
// docs/operations.md, "Migrations"), numbered after the newest migration in name order.
// A test of what a contract step buys (a HOT update an old index prevents)
// runs here; with no step pending it is NewPool's schema.
func NewContractedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	fsys, err := contractedMigrations()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return poolOn(t, newURL(t, goosemigrator.New(".", goosemigrator.WithFS(fsys))))
}

// contractedMigrations is migrations.FS plus migrations.Pending's steps,
// each given the next version number.
func contractedMigrations() (fs.FS, error) {
	out := fstest.MapFS{}
	var newest int64
	current, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, err
	}
	for _, name := range current {
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return nil, err
		}
		out[name] = &fstest.MapFile{Data: b}
		v, err := goose.NumericComponent(name)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		newest = max(newest, v)
	}
	pending, err := fs.Glob(migrations.Pending, "pending/*.sql")
	if err != nil {
		return nil, err
	}
	for i, name := range pending { // fs.Glob sorts
		b, err := fs.ReadFile(migrations.Pending, name)
		if err != nil {
			return nil, err
		}
		out[fmt.Sprintf("%05d_%s", newest+int64(i)+1, path.Base(name))] = &fstest.MapFile{Data: b}
	}
	return out, nil
}

// NewestMigration returns the version of the newest migration of package
// migrations: the one a database of this release must hold.
func NewestMigration(t testing.TB) int64 {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("pgtest: no migrations: %v", err)
	}
	v, err := goose.NumericComponent(names[len(names)-1]) // fs.Glob sorts
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return v
}

// NewEmptyURL is NewURL without migrations: an empty database, for tests
// that migrate it themselves (an upgrade from an older schema).
func NewEmptyURL(t testing.TB) string {
	t.Helper()
	return newURL(t, pgtestdb.NoopMigrator{})
}

// NewPool returns a pool on a database made by NewURL; it is closed when
// the test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return poolOn(t, NewURL(t))
}

// NewEmptyPool returns a pool on a database made by NewEmptyURL.
func NewEmptyPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return poolOn(t, NewEmptyURL(t))
}

// MigrationVersion is the version of the migration named name (its file
// name without the number and ".sql"), so that an upgrade test names the
// step it stands before rather than a number that a renumbering moves.
func MigrationVersion(t testing.TB, name string) int64 {
	t.Helper()
	files, err := fs.Glob(migrations.FS, "*_"+name+".sql")
	if err != nil || len(files) != 1 {
		t.Fatalf("pgtest: migration %q: %v %v", name, files, err)
	}
	number, _, _ := strings.Cut(files[0], "_")
	v, err := strconv.ParseInt(number, 10, 64)
	if err != nil {
		t.Fatalf("pgtest: migration %q: %v", name, err)
	}
	return v
}

// NewPoolAt returns a pool on a database made by NewEmptyURL and migrated
// up to version only: for a test of an upgrade, which writes what an older
// version wrote and then applies the rest (database.Migrate).
func NewPoolAt(t testing.TB, version int64) *pgxpool.Pool {
	t.Helper()
	pool := NewEmptyPool(t)
	MigrateTo(t, pool, version)
	return pool
}

// MigrateTo applies the migrations of pool's database up to version, for
// an upgrade test that writes what each older release wrote on the way.
func MigrateTo(t testing.TB, pool *pgxpool.Pool, version int64) {
	t.Helper()
	migrate(t, pool, version, (*goose.Provider).UpTo)
}

// MigrateDownTo rolls pool's database back to version, for a test of a
// migration that fixes rows its constraints would refuse today: roll it
// back, write the rows, migrate again.
func MigrateDownTo(t testing.TB, pool *pgxpool.Pool, version int64) {
	t.Helper()
	migrate(t, pool, version, (*goose.Provider).DownTo)
}

func migrate(t testing.TB, pool *pgxpool.Pool, version int64,
	to func(*goose.Provider, context.Context, int64) ([]*goose.MigrationResult, error)) {
	t.Helper()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	migrator, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if _, err := to(migrator, t.Context(), version); err != nil {
		t.Fatalf("pgtest: migrate to version %d: %v", version, err)
	}
}

func poolOn(t testing.TB, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// Registered after NewURL's clean-up, so it runs before it: the
	// database can only be dropped once its connections are closed.
	t.Cleanup(pool.Close)
	return pool
}

// pgtestdbConfig turns a connection string (URL or key=value form) into
// pgtestdb's configuration of the admin connection. pgtestdb pastes the
// fields into a URL as they are, so they are escaped here; the query
// parameters of a URL are kept for every connection.
func pgtestdbConfig(connString string) (pgtestdb.Config, error) {
	pc, err := pgconn.ParseConfig(connString)
	if err != nil {
		return pgtestdb.Config{}, fmt.Errorf("parse: %w", err)
	}
	query := url.Values{}
	if u, err := url.Parse(connString); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		query = u.Query()
		query.Del("host") // set below from the parsed configuration
	}
	if query.Get("sslmode") == "" {
		if pc.TLSConfig == nil {
			query.Set("sslmode", "disable")
		} else {
			query.Set("sslmode", "prefer")
		}
	}
	host := pc.Host
	if strings.HasPrefix(host, "/") { // a Unix socket directory
		query.Set("host", host)
		host = ""
	}
	dbname := pc.Database
	if dbname == "" {
		dbname = "postgres"
	}
	return pgtestdb.Config{
		DriverName: "pgx",
		Host:       host,
		Port:       strconv.Itoa(int(pc.Port)),
		User:       url.User(pc.User).String(),
		Password:   strings.TrimPrefix(url.UserPassword("", pc.Password).String(), ":"),
		Database:   url.PathEscape(dbname),
		Options:    query.Encode(),
	}, nil
}

// URLAsNewRole returns dbURL (a database of NewURL or NewEmptyURL) as a
// login role made for this test only, with attributes (for instance
// "NOREPLICATION"), every privilege on the database and on its public
// schema, and nothing else (NewRole).
func URLAsNewRole(t testing.TB, dbURL, attributes string) string {
	t.Helper()
	roleURL, role := NewRole(t, dbURL, attributes)
	ctx := context.Background()
	database := databaseOf(t, dbURL)
	for _, q := range []struct{ url, sql string }{
		{os.Getenv(EnvURL), `GRANT ALL ON DATABASE ` + pgx.Identifier{database}.Sanitize() + ` TO ` + role},
		{adminURL(t, database), `GRANT ALL ON SCHEMA public TO ` + role},
	} {
		conn, err := pgx.Connect(ctx, q.url)
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		_, err = conn.Exec(ctx, q.sql)
		_ = conn.Close(ctx)
		if err != nil {
			t.Fatalf("pgtest: %s: %v", q.sql, err)
		}
	}
	return roleURL
}

// NewRole makes a login role for this test only, with attributes (for
// instance "REPLICATION") and no privilege but those every role has
// (PUBLIC's), and returns dbURL (a database of NewURL or NewEmptyURL) as
// that role, and the role's name. The server's administrator (EnvURL)
// makes it, and drops it when the test ends, with what it owns and every
// privilege granted to it in that database.
func NewRole(t testing.TB, dbURL, attributes string) (roleURL, role string) {
	t.Helper()
	ctx := context.Background()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	database := databaseOf(t, dbURL)
	admin, err := pgx.Connect(ctx, os.Getenv(EnvURL))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	adminDB, err := pgx.Connect(ctx, adminURL(t, database))
	if err != nil {
		_ = admin.Close(ctx)
		t.Fatalf("pgtest: %v", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role = "test_role_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = adminDB.Exec(ctx, `DROP OWNED BY `+role)
		_ = adminDB.Close(ctx)
		_, _ = admin.Exec(ctx, `REVOKE ALL ON DATABASE `+pgx.Identifier{database}.Sanitize()+` FROM `+role)
		_, _ = admin.Exec(ctx, `DROP ROLE IF EXISTS `+role)
		_ = admin.Close(ctx)
	})
	q := `CREATE ROLE ` + role + ` LOGIN PASSWORD '` + role + `' ` + attributes
	if _, err := admin.Exec(ctx, q); err != nil {
		t.Fatalf("pgtest: %s: %v", q, err)
	}
	u.User = url.UserPassword(role, role)
	return u.String(), role
}

// databaseOf is the database dbURL names.
func databaseOf(t testing.TB, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// adminURL is the server administrator's URL (EnvURL) on database.
func adminURL(t testing.TB, database string) string {
	t.Helper()
	au, err := url.Parse(os.Getenv(EnvURL))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	au.Path = "/" + database
	return au.String()
}
