package pgembed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/testio"
)

// skipWithoutPostgres skips tests that need the PostgreSQL binaries when
// they are not installed.
func skipWithoutPostgres(t *testing.T) {
	t.Helper()
	if _, err := findBinDir("", ""); err != nil {
		t.Skipf("no PostgreSQL binaries: %v", err)
	}
}

// testDir returns a fresh directory that the postgres OS user can enter
// when the test runs as root (os.MkdirTemp makes 0700 directories).
func testDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgembed-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// testLogger logs to the test output and to the returned buffer.
func testLogger() (*slog.Logger, *testio.SyncBuffer) {
	buf := &testio.SyncBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// startT starts a cluster and stops it when the test ends.
func startT(t *testing.T, opts Options) *Cluster {
	t.Helper()
	c, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

func connect(t *testing.T, c *Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.URL("postgres"))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func queryString(t *testing.T, conn *pgx.Conn, sql string) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(t.Context(), sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive after %s", pid, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLifecycle runs one data directory through start, query, stop, restart
// with its data, a second launcher, a killed server (stale postmaster.pid),
// a leftover server started by hand, and a taken port.
func TestLifecycle(t *testing.T) {
	skipWithoutPostgres(t)
	t.Parallel()
	ctx := t.Context()
	dataDir := filepath.Join(testDir(t), "nested", "pg")
	logger, logs := testLogger()
	opts := Options{DataDir: dataDir, Logger: logger}

	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if c.DataDir() != dataDir {
		t.Errorf("DataDir() = %q, want %q", c.DataDir(), dataDir)
	}
	wantURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/app?sslmode=disable", c.Port())
	if got := c.URL("app"); got != wantURL {
		t.Errorf("URL = %q, want %q", got, wantURL)
	}
	conn := connect(t, c)
	for sql, want := range map[string]string{
		"SHOW listen_addresses":        "127.0.0.1",
		"SHOW unix_socket_directories": "",
		"SHOW max_connections":         "200",
		"SHOW fsync":                   "on",
		"SELECT (current_setting('wal_compression') <> 'off')::text": "true", // a durable cluster compresses full-page images
		"SELECT current_user": "postgres",
		"SELECT rolsuper::text FROM pg_roles WHERE rolname = current_user": "true",
		"SHOW server_encoding": "UTF8",
	} {
		if got := queryString(t, conn, sql); got != want {
			t.Errorf("%s = %q, want %q", sql, got, want)
		}
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('survives')"); err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureDatabase(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureDatabase(ctx, "app"); err != nil {
		t.Fatalf("EnsureDatabase twice: %v", err)
	}
	conn.Close(ctx)

	t.Run("second launcher on the same data directory is refused", func(t *testing.T) {
		_, err := Start(ctx, opts)
		if err == nil || !strings.Contains(err.Error(), "in use by another process") {
			t.Fatalf("Start = %v, want an in-use error", err)
		}
	})

	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	if c.Err() != nil {
		t.Errorf("Err after a clean stop = %v", c.Err())
	}
	if processAlive(c.Pid()) {
		t.Errorf("postgres %d alive after Stop", c.Pid())
	}
	if _, err := os.Stat(filepath.Join(dataDir, "postmaster.pid")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("postmaster.pid after Stop: %v", err)
	}

	restart := func(t *testing.T) *Cluster {
		t.Helper()
		before := strings.Count(logs.String(), "initialising a new cluster")
		c := startT(t, opts)
		if after := strings.Count(logs.String(), "initialising a new cluster"); after != before {
			t.Errorf("initdb ran again on an existing cluster")
		}
		if got := queryString(t, connect(t, c), "SELECT v FROM kept"); got != "survives" {
			t.Errorf("kept = %q", got)
		}
		return c
	}

	t.Run("restart keeps the data", func(t *testing.T) {
		restart(t)
		if n := strings.Count(logs.String(), "initialising a new cluster"); n != 1 {
			t.Errorf("initdb ran %d times, want 1", n)
		}
	})

	t.Run("killed server leaves a stale postmaster.pid", func(t *testing.T) {
		c, err := Start(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(c.Pid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done not closed after the server was killed")
		}
		if c.Err() == nil {
			t.Error("Err() = nil after SIGKILL")
		}
		if err := c.Stop(ctx); err != nil {
			t.Errorf("Stop after death: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dataDir, "postmaster.pid")); err != nil {
			t.Fatalf("want a stale postmaster.pid: %v", err)
		}
		restart(t)
		if !strings.Contains(logs.String(), "stale postmaster.pid") {
			t.Errorf("stale postmaster.pid not noticed:\n%s", logs)
		}
	})

	t.Run("leftover server started by hand is stopped", func(t *testing.T) {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		acct, err := runAccount()
		if err != nil {
			t.Fatal(err)
		}
		binDir, err := findBinDir("", "")
		if err != nil {
			t.Fatal(err)
		}
		// pg_ctl detaches the server: it is nobody's child, as after a
		// launcher whose parent-death signal was lost.
		cmd := newCommand(ctx, filepath.Join(binDir, "pg_ctl"), []string{
			"start", "-D", dataDir, "-l", filepath.Join(dataDir, "leftover.log"), "-w", "-t", "30",
			"-o", "-p " + strconv.Itoa(port) + " -c listen_addresses=127.0.0.1 -c unix_socket_directories=''",
		}, acct, 0)
		if out, err := runToEnd(cmd); err != nil {
			t.Fatalf("pg_ctl start: %v\n%s", err, out)
		}
		pidFile, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
		if err != nil {
			t.Fatal(err)
		}
		leftover, _ := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
		if !processAlive(leftover) {
			t.Fatalf("leftover postgres %d not running", leftover)
		}
		restart(t)
		if processAlive(leftover) {
			t.Errorf("leftover postgres %d still running", leftover)
		}
		if !strings.Contains(logs.String(), "left by an earlier run") {
			t.Errorf("no log about the leftover server")
		}
	})

	t.Run("taken port fails with the server's log", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		taken := l.Addr().(*net.TCPAddr).Port
		o := opts
		o.Port = taken
		_, err = Start(ctx, o)
		if err == nil || !strings.Contains(err.Error(), "already in use") ||
			!strings.Contains(err.Error(), "last lines of") {
			t.Fatalf("Start on a taken port = %v, want an error quoting the log", err)
		}

		// With Port 0, a picked port that turns out taken is replaced.
		picks := []int{taken}
		sc := startConfig{pickPort: func() (int, error) {
			if len(picks) > 0 {
				p := picks[0]
				picks = picks[1:]
				return p, nil
			}
			return freePort()
		}}
		c, err := start(ctx, opts, sc)
		if err != nil {
			t.Fatalf("start with a taken first pick: %v", err)
		}
		defer c.Stop(context.Background())
		if c.Port() == taken {
			t.Errorf("cluster on the taken port %d", taken)
		}
		if got := queryString(t, connect(t, c), "SELECT v FROM kept"); got != "survives" {
			t.Errorf("kept = %q", got)
		}
	})
}

// TestTwoClusters runs two ephemeral clusters side by side.
func TestTwoClusters(t *testing.T) {
	skipWithoutPostgres(t)
	t.Parallel()
	dir := testDir(t)
	var (
		wg       sync.WaitGroup
		clusters [2]*Cluster
		errs     [2]error
	)
	for i := range clusters {
		wg.Go(func() {
			clusters[i], errs[i] = Start(t.Context(), Options{
				DataDir:   filepath.Join(dir, "pg"+strconv.Itoa(i)),
				Ephemeral: true,
			})
		})
	}
	wg.Wait()
	for i, c := range clusters {
		if errs[i] != nil {
			t.Fatalf("Start %d: %v", i, errs[i])
		}
		t.Cleanup(func() { c.Stop(context.Background()) })
	}
	a, b := clusters[0], clusters[1]
	if a.Port() == b.Port() {
		t.Fatalf("both clusters on port %d", a.Port())
	}
	connA, connB := connect(t, a), connect(t, b)
	if got := queryString(t, connA, "SHOW fsync"); got != "off" {
		t.Errorf("ephemeral fsync = %q, want off", got)
	}
	if _, err := connA.Exec(t.Context(), "CREATE TABLE only_in_a (id int)"); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, connB, "SELECT coalesce(to_regclass('only_in_a')::text, 'none')"); got != "none" {
		t.Errorf("table of cluster A visible in cluster B: %q", got)
	}
}

// TestUnreachableDataDir checks, as root, that a data directory the
// postgres user cannot reach is relocated, stably, and that the error is
// clear when no relocation works either.
func TestUnreachableDataDir(t *testing.T) {
	skipWithoutPostgres(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: only root runs PostgreSQL as another user")
	}
	t.Parallel()
	base := testDir(t)
	private := filepath.Join(base, "private") // like /root: mode 0700, owned by root
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	requested := filepath.Join(private, "checkout", ".data", "postgres")
	logger, logs := testLogger()
	opts := Options{DataDir: requested, FallbackRoot: filepath.Join(base, "fallback"), Ephemeral: true, Logger: logger}

	c, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	relocated := c.DataDir()
	if !strings.HasPrefix(relocated, opts.FallbackRoot+string(filepath.Separator)+"postgres-") {
		t.Errorf("DataDir() = %q, want it under %s", relocated, opts.FallbackRoot)
	}
	if !strings.Contains(logs.String(), "using a relocated one") || !strings.Contains(logs.String(), private) {
		t.Errorf("relocation not logged clearly:\n%s", logs)
	}
	if _, err := connect(t, c).Exec(t.Context(), "CREATE TABLE kept (id int)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}

	c = startT(t, opts)
	if c.DataDir() != relocated {
		t.Errorf("second start in %q, first in %q", c.DataDir(), relocated)
	}
	if got := queryString(t, connect(t, c), "SELECT to_regclass('kept')::text"); got != "kept" {
		t.Errorf("table lost across restart: %q", got)
	}

	t.Run("no reachable fallback", func(t *testing.T) {
		o := opts
		o.DataDir = filepath.Join(private, "other")
		o.FallbackRoot = filepath.Join(private, "fallback")
		_, err := Start(t.Context(), o)
		if err == nil {
			t.Fatal("Start succeeded")
		}
		for _, want := range []string{"DATABASE_URL", "move the checkout", private} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
	})
}

// TestKilledLauncherLeavesNoOrphan kills, with SIGKILL, a process that
// started a cluster, and checks that its server goes away with it and that
// the data directory can be started again.
func TestKilledLauncherLeavesNoOrphan(t *testing.T) {
	skipWithoutPostgres(t)
	t.Parallel()
	dataDir := filepath.Join(testDir(t), "pg")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLauncher$", "-test.v")
	cmd.Env = append(os.Environ(), "PGEMBED_HELPER_DATA_DIR="+dataDir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var pid int
	scanner := bufio.NewScanner(stdout)
	for scanner.Scan() {
		if _, err := fmt.Sscanf(scanner.Text(), "HELPER READY pid=%d", &pid); err == nil {
			break
		}
	}
	if pid == 0 {
		t.Fatalf("helper did not start a cluster (%v)", scanner.Err())
	}
	if !processAlive(pid) {
		t.Fatalf("postgres %d not running", pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitGone(t, pid, 15*time.Second)

	c := startT(t, Options{DataDir: dataDir, Ephemeral: true})
	if got := queryString(t, connect(t, c), "SELECT to_regclass('from_helper')::text"); got != "from_helper" {
		t.Errorf("helper's table missing: %q", got)
	}
}

// TestHelperLauncher is the launcher process of
// TestKilledLauncherLeavesNoOrphan; it does nothing in a normal run.
func TestHelperLauncher(t *testing.T) {
	dataDir := os.Getenv("PGEMBED_HELPER_DATA_DIR")
	if dataDir == "" {
		t.Skip("helper process only")
	}
	c, err := Start(context.Background(), Options{DataDir: dataDir, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	// synchronous_commit is off: a checkpoint makes the table durable before
	// this process dies.
	if _, err := conn.Exec(context.Background(), "CREATE TABLE from_helper (id int); CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("HELPER READY pid=%d\n", c.Pid())
	select {} // until killed
}

func TestFindBinDir(t *testing.T) {
	got := orderBinDirs([]string{
		"/usr/lib/postgresql/9.6/bin",
		"/usr/lib/postgresql/15/bin",
		"/usr/lib/postgresql/16/bin",
		"/usr/lib/postgresql/13/bin",
	}, "15")
	want := []string{
		"/usr/lib/postgresql/15/bin",
		"/usr/lib/postgresql/16/bin",
		"/usr/lib/postgresql/13/bin",
		"/usr/lib/postgresql/9.6/bin",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("orderBinDirs = %v, want %v", got, want)
	}
	if _, err := findBinDir(t.TempDir(), ""); err == nil {
		t.Error("findBinDir accepted a directory without binaries")
	}
	t.Setenv("PG_BIN_DIR", t.TempDir())
	if _, err := findBinDir("", ""); err == nil || !strings.Contains(err.Error(), "PG_BIN_DIR") {
		t.Errorf("findBinDir with a bad PG_BIN_DIR = %v", err)
	}
}

// TestWALCompressionFor: lz4 only where pg_config says the server has it,
// and on (pglz) everywhere else, which every server accepts.
func TestWALCompressionFor(t *testing.T) {
	for out, want := range map[string]string{
		"PostgreSQL 15.18 (Debian 15.18-0+deb12u1)\n'--with-icu' '--with-lz4' '--with-zstd'\n": "lz4",
		"PostgreSQL 16.4\n'--prefix=/usr/local' '--with-lz4'\n":                                "lz4",
		"PostgreSQL 15.18\n'--prefix=/usr/local' '--with-openssl'\n":                           "on",
		"PostgreSQL 14.12\n'--with-lz4'\n":                                                     "on", // wal_compression is a boolean before 15
		"":                                                                                     "on",
	} {
		if got := walCompressionFor(out); got != want {
			t.Errorf("walCompressionFor(%q) = %q, want %q", out, got, want)
		}
	}
}

func TestMajorVersion(t *testing.T) {
	for out, want := range map[string]string{
		"postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n": "15",
		"postgres (PostgreSQL) 17.0\n":                           "17",
		"postgres (PostgreSQL) 9.6.24\n":                         "9.6",
		"garbage":                                                "",
	} {
		if got := majorVersion(out); got != want {
			t.Errorf("majorVersion(%q) = %q, want %q", out, got, want)
		}
	}
}

func TestCanSearch(t *testing.T) {
	a := &account{name: "postgres", uid: 101, gid: 104, groups: []uint32{104, 103}}
	for _, tc := range []struct {
		perm     fs.FileMode
		uid, gid uint32
		want     bool
	}{
		{0o700, 0, 0, false},
		{0o711, 0, 0, true},
		{0o750, 0, 103, true},  // supplementary group
		{0o705, 0, 104, false}, // group bits apply to members, not other bits
		{0o700, 101, 0, true},
		{0o077, 101, 0, false}, // owner bits apply to the owner
		{0o755, 0, 0, true},
	} {
		if got := a.canSearch(tc.perm, tc.uid, tc.gid); got != tc.want {
			t.Errorf("canSearch(%04o, uid %d, gid %d) = %v, want %v", tc.perm, tc.uid, tc.gid, got, tc.want)
		}
	}
}

func TestStartNeedsDataDir(t *testing.T) {
	if _, err := Start(t.Context(), Options{}); err == nil {
		t.Fatal("Start without DataDir succeeded")
	}
}

// TestRestartCrashesAndComesBack: Restart ends the server as an immediate
// shutdown does (open sessions are cut), keeps it down for the time asked,
// and starts it again on the same port, after crash recovery, with every
// committed row.
func TestRestartCrashesAndComesBack(t *testing.T) {
	skipWithoutPostgres(t)
	t.Parallel()
	ctx := t.Context()
	c := startT(t, Options{DataDir: filepath.Join(testDir(t), "pg")})
	conn := connect(t, c)
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('survives')"); err != nil {
		t.Fatal(err)
	}
	oldPid, oldDone, port := c.Pid(), c.Done(), c.Port()

	began := time.Now()
	if err := c.Restart(ctx, 300*time.Millisecond); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Errorf("down for %s only", took)
	}
	select {
	case <-oldDone:
	default:
		t.Error("the old server is still running")
	}
	if c.Pid() == oldPid || c.Port() != port {
		t.Errorf("pid %d -> %d, port %d -> %d: want a new server on the same port", oldPid, c.Pid(), port, c.Port())
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("a session of the old server still works")
	}
	if got := queryString(t, connect(t, c), "SELECT v FROM kept"); got != "survives" {
		t.Errorf("kept = %q", got)
	}
	logs, err := os.ReadFile(c.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "received immediate shutdown request") || !strings.Contains(string(logs), "automatic recovery") {
		t.Errorf("no immediate shutdown and crash recovery in the server's log:\n%s", logs)
	}
}
