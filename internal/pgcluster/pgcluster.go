// Package pgcluster starts a PostgreSQL primary with a streaming standby for
// failover tests, and plays the failures a failover follows: the primary
// crashes (every process killed), or freezes (every process stopped with
// SIGSTOP: connections stay open and silent, as behind a partition or on a
// hung host); the standby's replay is paused (so that the promoted standby
// lacks the primary's last commits); the standby is promoted.
//
// For tests only: the servers trust every local connection, run with
// fsync off, and are killed when the test ends. When the test runs as root,
// the servers run as the postgres OS user, as PostgreSQL requires.
package pgcluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Node is one PostgreSQL server of a Pair.
type Node struct {
	Name    string
	Port    int
	DataDir string
	pair    *Pair
}

// Pair is a primary and its standby, streaming.
type Pair struct {
	t        testing.TB
	binDir   string
	dir      string
	cred     *syscall.Credential
	Primary  *Node
	Standby  *Node
	stopped  []int // pids this package stopped with SIGSTOP, to resume at clean-up
	Database string
}

// Options configures Start.
type Options struct {
	// Synchronous makes the standby synchronous (synchronous_standby_names
	// = '*', synchronous_commit = on): a commit is acknowledged only once
	// the standby has it, so a failover loses nothing acknowledged.
	Synchronous bool
	// Database is created on the primary (and so on the standby). Default
	// "payments".
	Database string
}

// BinDir returns the directory of the PostgreSQL server binaries, or ""
// when none is installed.
func BinDir() string {
	var candidates []string
	if p, err := exec.LookPath("initdb"); err == nil {
		// Distributions link a few of the binaries onto PATH (initdb,
		// pg_ctl), not all: look in the directory the link points to.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			candidates = append(candidates, filepath.Dir(real))
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- { // the newest major version sorts last up to 99
		candidates = append(candidates, dirs[i])
	}
	for _, dir := range candidates {
		complete := true
		for _, bin := range []string{"initdb", "pg_ctl", "pg_basebackup"} {
			if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
				complete = false
			}
		}
		if complete {
			return dir
		}
	}
	return ""
}

// Start starts a primary and a standby made from it with pg_basebackup -R,
// and waits until the standby streams. It skips the test when the
// PostgreSQL binaries are missing. Everything is stopped at the test's end.
func Start(t testing.TB, opts Options) *Pair {
	t.Helper()
	bin := BinDir()
	if bin == "" {
		t.Skip("pgcluster: no PostgreSQL server binaries (initdb) on PATH or in /usr/lib/postgresql/*/bin")
	}
	if opts.Database == "" {
		opts.Database = "payments"
	}
	p := &Pair{t: t, binDir: bin, dir: t.TempDir(), Database: opts.Database}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgcluster: running as root needs the postgres OS user: %v", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// t.TempDir makes the directory and its parent 0700: the server's
		// account must be able to enter both, and to write in the first.
		if err := os.Chmod(filepath.Dir(p.dir), 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p.dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(p.stopAll)

	p.Primary = p.node("primary")
	p.run("initdb", "-D", p.Primary.DataDir, "--locale=C", "-E", "UTF8", "-U", "postgres", "--auth=trust", "--no-sync")
	conf := []string{
		"listen_addresses = '127.0.0.1'",
		"port = " + strconv.Itoa(p.Primary.Port),
		"unix_socket_directories = ''",
		"fsync = off",
		"full_page_writes = off",
		// The outbox relay reads a replication slot (package
		// outbox/stream). A slot lives on the primary only: the standby,
		// once promoted, has none.
		"wal_level = logical",
		"max_replication_slots = 10",
		"max_wal_senders = 10",
		"wal_keep_size = '256MB'",
		"max_connections = 200",
		"hot_standby = on",
		"shared_buffers = '32MB'",
		"logging_collector = off",
	}
	p.appendConf(p.Primary, conf)
	p.pgctl("start", p.Primary)
	p.exec(p.Primary, "CREATE DATABASE "+pgx.Identifier{opts.Database}.Sanitize())

	p.Standby = p.node("standby")
	p.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Primary.Port), "-U", "postgres",
		"-D", p.Standby.DataDir, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
	p.appendConf(p.Standby, []string{"port = " + strconv.Itoa(p.Standby.Port)})
	p.pgctl("start", p.Standby)
	p.waitStreaming()
	if opts.Synchronous {
		// Only now: with synchronous_standby_names set before the standby
		// streams, every commit (CREATE DATABASE first) would wait for it.
		p.exec(p.Primary, "ALTER SYSTEM SET synchronous_standby_names = '*'")
		p.exec(p.Primary, "SELECT pg_reload_conf()")
		p.waitSync()
	}
	return p
}

// node reserves a port and a data directory path for a server.
func (p *Pair) node(name string) *Node {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return &Node{Name: name, Port: port, DataDir: filepath.Join(p.dir, name), pair: p}
}

// URL returns the URL of the pair's database on every host, primary first,
// as the service is configured in production: pgx tries the hosts in order
// and keeps the first that accepts writes.
func (p *Pair) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		p.Primary.Port, p.Standby.Port, p.Database)
}

// URL returns the URL of the pair's database on this node alone.
func (n *Node) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.Port, n.pair.Database)
}

// Pids returns the node's postmaster and every process it started.
func (n *Node) Pids() []int {
	b, err := os.ReadFile(filepath.Join(n.DataDir, "postmaster.pid"))
	if err != nil {
		return nil
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return nil
	}
	return append([]int{pm}, children(pm)...)
}

// Crash kills every process of the node with SIGKILL, as a host that lost
// power: no shutdown, no goodbye to its clients or its standby.
func (n *Node) Crash() {
	n.pair.t.Helper()
	n.pair.t.Logf("pgcluster: %s crashed (SIGKILL to %d processes)", n.Name, len(n.signal(syscall.SIGKILL)))
}

// Freeze stops every process of the node with SIGSTOP. The kernel still
// accepts and acknowledges on its sockets, so clients see open, silent
// connections: neither a reset nor keepalive failures, only deadlines
// notice. Clean-up kills them.
func (n *Node) Freeze() {
	n.pair.t.Helper()
	pids := n.signal(syscall.SIGSTOP)
	n.pair.stopped = append(n.pair.stopped, pids...)
	n.pair.t.Logf("pgcluster: %s frozen (SIGSTOP to %d processes)", n.Name, len(pids))
}

// signal sends sig to every process of the node and returns them.
func (n *Node) signal(sig syscall.Signal) []int {
	n.pair.t.Helper()
	pids := n.Pids()
	if len(pids) == 0 {
		n.pair.t.Fatalf("pgcluster: %s has no postmaster to signal", n.Name)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
	return pids
}

// Promote promotes the standby and waits until it accepts writes.
func (p *Pair) Promote() {
	p.t.Helper()
	p.pgctl("promote", p.Standby)
	p.t.Logf("pgcluster: standby promoted")
}

// PauseReplay pauses the standby's replay: it still receives the primary's
// WAL but applies none of it, so reads on it stand still. A promotion does
// replay what was received before it ends recovery (measured on PostgreSQL
// 15), so PauseReplay alone loses nothing: use Detach for a lost tail.
func (p *Pair) PauseReplay() {
	p.t.Helper()
	p.exec(p.Standby, "SELECT pg_wal_replay_pause()")
}

// Detach stops the standby's streaming (its primary_conninfo emptied and
// reloaded, so its WAL receiver exits and does not come back) and waits
// until the primary sees no standby. Every commit the primary makes from
// then on is missing from the standby: the lost tail of an asynchronous
// failover, made certain rather than left to timing.
func (p *Pair) Detach() {
	p.t.Helper()
	p.exec(p.Standby, "ALTER SYSTEM SET primary_conninfo = ''")
	p.exec(p.Standby, "SELECT pg_reload_conf()")
	p.waitReplicationCount("SELECT count(*) FROM "+standbys, 0)
	p.t.Logf("pgcluster: standby detached")
}

// exec runs one statement on node n's postgres database.
func (p *Pair) exec(n *Node, sql string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", n.Port))
	if err != nil {
		p.t.Fatalf("pgcluster: connect to %s: %v", n.Name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		p.t.Fatalf("pgcluster: %s on %s: %v", sql, n.Name, err)
	}
}

// standbys is pg_stat_replication without the senders of logical
// replication slots (the outbox relays'): the standby's sender alone.
const standbys = `(SELECT * FROM pg_stat_replication WHERE pid NOT IN (
	SELECT active_pid FROM pg_replication_slots WHERE slot_type = 'logical' AND active_pid IS NOT NULL)) r`

// waitStreaming waits until the primary sees its standby streaming.
func (p *Pair) waitStreaming() {
	p.t.Helper()
	p.waitReplication("SELECT count(*) FROM " + standbys + " WHERE state = 'streaming'")
}

// waitSync waits until the primary counts its standby as synchronous.
func (p *Pair) waitSync() {
	p.t.Helper()
	p.waitReplication("SELECT count(*) FROM " + standbys + " WHERE sync_state = 'sync'")
}

// waitReplication waits until query, on the primary, counts a standby.
func (p *Pair) waitReplication(query string) {
	p.t.Helper()
	p.waitReplicationCount(query, -1)
}

// waitReplicationCount waits until query, on the primary, answers want, or
// any positive count when want is negative.
func (p *Pair) waitReplicationCount(query string, want int) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Primary.Port)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var n int
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			err = conn.QueryRow(ctx, query).Scan(&n)
			conn.Close(ctx)
		}
		cancel()
		if err == nil && (want < 0 && n > 0 || n == want) {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("pgcluster: %q did not count the standby as wanted after 30 s (last error %v); standby log:\n%s", query, err, p.log(p.Standby))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *Pair) appendConf(n *Node, lines []string) {
	p.t.Helper()
	f, err := os.OpenFile(filepath.Join(n.DataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("\n" + strings.Join(lines, "\n") + "\n"); err != nil {
		p.t.Fatal(err)
	}
}

func (p *Pair) logPath(n *Node) string { return filepath.Join(p.dir, n.Name+".log") }

func (p *Pair) log(n *Node) string {
	b, _ := os.ReadFile(p.logPath(n))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (p *Pair) pgctl(action string, n *Node) {
	p.t.Helper()
	p.run("pg_ctl", action, "-D", n.DataDir, "-l", p.logPath(n), "-w", "-t", "60")
}

// run runs a PostgreSQL binary as the server's account.
func (p *Pair) run(name string, args ...string) {
	p.t.Helper()
	if err := p.runErr(name, args...); err != nil {
		p.t.Fatal(err)
	}
}

func (p *Pair) runErr(name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.binDir, name), args...)
	cmd.Dir = p.dir
	cmd.Env = serverEnv()
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// pg_ctl start leaves the server running with these pipes as its
	// output unless -l redirects it; WaitDelay keeps a child that
	// inherited them from holding Wait.
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgcluster: %s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return nil
}

// stopAll resumes what was frozen and kills every server process.
func (p *Pair) stopAll() {
	for _, n := range []*Node{p.Primary, p.Standby} {
		if n == nil {
			continue
		}
		for _, pid := range n.Pids() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for _, pid := range p.stopped {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
}

// serverEnv is the environment of the PostgreSQL binaries: no PG*
// variable of the caller's leaks into them, and the C locale.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || k == "LANG" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C")
}

// children returns the pids whose parent is pid, from /proc.
func children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name, in parentheses, may hold spaces: the fields
		// after its closing parenthesis are state, then ppid.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}
