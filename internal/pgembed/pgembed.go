// Package pgembed starts a local PostgreSQL server from the PostgreSQL
// binaries installed on the machine (initdb, pg_ctl, postgres), offline. It
// serves the zero-config development mode (a cluster under ./.data/postgres,
// reused across runs and stopped with the server) and tests (a throwaway
// cluster in a temporary directory).
//
// For development and tests only: the cluster trusts every local connection
// (no password) for the "postgres" superuser, and it listens on 127.0.0.1
// only, over TCP, with no Unix socket, so nothing needs /var/run/postgresql.
//
// PostgreSQL refuses to run as root. When the calling process is root,
// initdb and postgres run as the "postgres" OS user (looked up with os/user
// and switched to through syscall.SysProcAttr.Credential, not su or sudo),
// and the data directory is handed to that user. If that user cannot enter
// the directories leading to Options.DataDir (a checkout under /root, mode
// 0700, say), the cluster goes to a stable per-checkout directory it can
// reach instead (see Options.FallbackRoot), and Start logs where it went;
// Cluster.DataDir reports it. Otherwise the launcher runs everything as the
// calling user.
//
// postgres runs as a direct child of the calling process, in its own process
// group, so that a Ctrl-C typed in a terminal reaches only the caller, which
// should then call Cluster.Stop (fast shutdown). On Linux the child also gets
// SIGINT (fast shutdown) as its parent-death signal, so a launcher killed
// with SIGKILL leaves no orphan server behind. A server that was left behind
// anyway (one started by hand with pg_ctl, say) is stopped by the next Start
// on its data directory, and a stale postmaster.pid is left to postgres,
// which recognises it. One data directory is used by one launcher at a time:
// Start holds an advisory lock (flock) next to it until Stop.
//
// A durable cluster (not Options.Ephemeral) keeps PostgreSQL's durability
// settings and turns wal_compression on (lz4 where the server has it): the
// full-page images in the WAL are compressed, and nothing is weakened.
//
// postgres writes its log to pgembed.log inside the data directory (the log
// of the previous run is kept as pgembed.log.1); start-up errors quote its
// last lines.
package pgembed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// Superuser is the name of the superuser role of the clusters that Start
	// creates, whatever the OS user.
	Superuser = "postgres"

	defaultMaxConnections = 200
	defaultStartTimeout   = 60 * time.Second
	logFileName           = "pgembed.log"
	portAttempts          = 5
)

// Options configures Start.
type Options struct {
	// DataDir is the cluster's data directory; required. Start creates and
	// initialises it if it is missing or empty, and reuses it if it already
	// holds a cluster (a PG_VERSION file).
	DataDir string
	// BinDir holds initdb, pg_ctl and postgres. "" detects it: $PG_BIN_DIR,
	// else the highest /usr/lib/postgresql/*/bin (the version of an existing
	// cluster first), else the directory of initdb, pg_ctl or postgres found
	// on $PATH (symbolic links resolved).
	BinDir string
	// Port is the TCP port on 127.0.0.1. 0 picks a free port, and picks
	// another if the chosen one turns out to be taken when postgres starts.
	// A port set here is used as is: if it is taken, Start fails.
	Port int
	// Ephemeral trades durability for speed, for throwaway test clusters:
	// fsync, synchronous_commit and full_page_writes are off, and initdb
	// skips syncing to disk. A crash of the machine may then corrupt the
	// cluster, never use it for data worth keeping.
	Ephemeral bool
	// MaxConnections is the server's max_connections; 0 means 200.
	MaxConnections int
	// StartTimeout bounds the wait for the server to accept connections
	// (crash recovery included); 0 means 60 seconds. Start also honours its
	// context.
	StartTimeout time.Duration
	// FallbackRoot is where, when running as root, a cluster goes if the
	// postgres OS user cannot reach DataDir: into a directory named after
	// DataDir and a hash of its absolute path, so each checkout keeps its
	// own. "" tries /var/lib/paymentsapi/pgembed, then
	// $TMPDIR/paymentsapi-pgembed. Directories that Start creates on the way
	// get mode 0711.
	FallbackRoot string
	// WALLevel is the server's wal_level; "" means logical, which the
	// outbox's stream reader needs (package outbox/stream). A test sets
	// replica to run the service as on a stock server, where it polls.
	WALLevel string
	// Logger receives what the launcher does; nil discards it.
	Logger *slog.Logger
}

// Cluster is a running PostgreSQL server started by Start. Its methods are
// safe for concurrent use.
type Cluster struct {
	dataDir string
	binDir  string
	logPath string
	port    int
	acct    *account
	logger  *slog.Logger
	lock    *os.File
	opts    Options     // as Start got them, with their defaults
	sc      startConfig // as Start got it

	// stopMu guards proc's replacement (Restart) and the stop; the port
	// never changes after Start.
	stopMu  sync.Mutex
	proc    *process
	stopped bool
	stopErr error
}

// process is one postgres child process.
type process struct {
	pid     int
	done    chan struct{} // closed once the process has exited
	waitErr error         // what Wait returned; read only after done is closed
}

// startConfig holds what tests may replace in Start.
type startConfig struct {
	pickPort func() (int, error)
}

// Start starts a PostgreSQL server on opts.DataDir, initialising the cluster
// first if needed, and returns once it accepts connections. The context
// bounds the start-up only: the server runs until Cluster.Stop (or the death
// of the calling process). The caller must call Stop.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	return start(ctx, opts, startConfig{pickPort: freePort})
}

func start(ctx context.Context, opts Options, sc startConfig) (*Cluster, error) {
	if opts.DataDir == "" {
		return nil, errors.New("pgembed: Options.DataDir is required")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxConnections == 0 {
		opts.MaxConnections = defaultMaxConnections
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	requested, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("pgembed: data directory %q: %w", opts.DataDir, err)
	}
	acct, err := runAccount()
	if err != nil {
		return nil, err
	}
	dataDir, err := placeDataDir(requested, acct, opts.FallbackRoot, logger)
	if err != nil {
		return nil, err
	}
	lock, err := lockDataDir(dataDir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		dataDir: dataDir,
		logPath: filepath.Join(dataDir, logFileName),
		acct:    acct,
		logger:  logger,
		lock:    lock,
		opts:    opts,
		sc:      sc,
	}
	if err := c.prepareAndRun(ctx, opts, sc); err != nil {
		c.releaseLock()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) prepareAndRun(ctx context.Context, opts Options, sc startConfig) error {
	clusterVersion, err := readClusterVersion(c.dataDir)
	if err != nil {
		return err
	}
	c.binDir, err = findBinDir(opts.BinDir, clusterVersion)
	if err != nil {
		return err
	}
	if clusterVersion == "" {
		if err := initCluster(ctx, c.binDir, c.dataDir, c.acct, opts.Ephemeral, c.logger); err != nil {
			return err
		}
	} else {
		if err := checkVersion(ctx, c.binDir, c.dataDir, clusterVersion); err != nil {
			return err
		}
		if err := fixOwnership(c.dataDir, c.acct); err != nil {
			return err
		}
		if err := stopLeftover(ctx, c.binDir, c.dataDir, c.acct, c.logger); err != nil {
			return err
		}
	}
	if err := rotateLog(c.logPath); err != nil {
		return err
	}
	return c.run(ctx, opts, sc)
}

// run starts postgres and waits until it accepts connections, trying other
// ports when the one it picked is taken.
func (c *Cluster) run(ctx context.Context, opts Options, sc startConfig) error {
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	port := opts.Port
	portTries := 0
	for {
		if opts.Port == 0 {
			p, err := sc.pickPort()
			if err != nil {
				return err
			}
			port = p
		}
		portTries++
		logStart, err := fileSize(c.logPath)
		if err != nil {
			return err
		}
		proc, err := c.spawn(port, opts)
		if err != nil {
			return err
		}
		err = waitReady(ctx, port, c.dataDir, proc)
		if err == nil {
			if c.port != port {
				c.port = port // only by Start: a restart keeps its port
			}
			c.proc = proc
			c.logger.Info("pgembed: postgres is ready",
				"data_dir", c.dataDir, "port", port, "pid", proc.pid, "log", c.logPath)
			return nil
		}
		if !errors.Is(err, errExited) {
			kill(proc)
			return fmt.Errorf("pgembed: postgres on %s did not accept connections: %w\n%s",
				c.dataDir, err, c.logTail(logStart))
		}
		out := c.logTail(logStart)
		switch {
		case opts.Port == 0 && portTries < portAttempts && strings.Contains(out, "already in use") &&
			strings.Contains(out, "could not bind"):
			c.logger.Info("pgembed: port taken, trying another", "port", port)
			continue
		case strings.Contains(out, "pre-existing shared memory block") && ctx.Err() == nil:
			// Backends of a killed postmaster may hold its shared memory for a
			// moment: give them time to exit.
			c.logger.Info("pgembed: shared memory of a previous server still in use, retrying")
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		return fmt.Errorf("pgembed: postgres on %s exited during start-up (%v)\n%s",
			c.dataDir, proc.waitErr, out)
	}
}

// spawn starts postgres as a direct child. The goroutine that starts and
// waits for it stays locked to its OS thread: on Linux the parent-death
// signal fires when the thread that forked the child exits, not the process,
// and the Go runtime may end a thread that some other goroutine locked.
func (c *Cluster) spawn(port int, opts Options) (*process, error) {
	args := []string{
		"-D", c.dataDir,
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=",
		"-c", "max_connections=" + strconv.Itoa(opts.MaxConnections),
	}
	// The outbox relay reads changes through logical decoding (package
	// outbox/stream), from a replication slot: the WAL of every change
	// carries what decoding needs.
	level := cmp.Or(opts.WALLevel, "logical")
	args = append(args, "-c", "wal_level="+level, "-c", "max_replication_slots=32", "-c", "max_wal_senders=32")
	if opts.Ephemeral {
		args = append(args,
			"-c", "fsync=off",
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off")
	} else {
		// The first change of a page after a checkpoint writes the whole
		// page to the WAL (full_page_writes, which protects against torn
		// pages): up to a third of the WAL of a new payment, more as the
		// tables grow (docs/BENCHMARKS.md). Compressing those
		// images costs a little CPU, weakens nothing, and cuts the WAL
		// they take by half or more.
		args = append(args, "-c", "wal_compression="+walCompression(c.binDir))
	}
	logFile, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgembed: open log: %w", err)
	}
	defer logFile.Close()
	// Not bound to a context: the server outlives Start and ends with Stop.
	cmd := newCommand(context.Background(), filepath.Join(c.binDir, "postgres"), args, c.acct, syscall.SIGINT)
	cmd.Stdout = logFile
	cmd.Stderr = logFile

	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, see above
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("pgembed: start postgres: %w", err)
	}
	c.logger.Debug("pgembed: postgres started", "pid", p.pid, "port", port)
	return p, nil
}

var errExited = errors.New("postgres exited")

// waitReady polls a connection until the server accepts it, the process
// exits (errExited) or ctx ends. It checks that the server that answers
// serves dataDir: a port taken by another server must not pass for ours.
func waitReady(ctx context.Context, port int, dataDir string, p *process) error {
	// Abort a connection attempt as soon as the process exits: a port held
	// by some other program may accept the connection and never answer.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	connURL := clusterURL(port, Superuser)
	var lastErr error
	for {
		attemptCtx, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		served, err := servedDataDir(attemptCtx, connURL)
		cancelAttempt()
		if err == nil {
			if served != dataDir {
				return fmt.Errorf("port %d is served by another PostgreSQL server (data directory %s)", port, served)
			}
			return nil
		}
		lastErr = err
		select {
		case <-p.done:
			return errExited
		case <-ctx.Done():
			select {
			case <-p.done:
				return errExited
			default:
			}
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// servedDataDir connects to connURL and returns the server's data directory.
func servedDataDir(ctx context.Context, connURL string) (string, error) {
	conn, err := pgx.Connect(ctx, connURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var dir string
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dir); err != nil {
		return "", err
	}
	return dir, nil
}

// kill ends a process that failed to start: SIGQUIT (immediate shutdown),
// then SIGKILL if it lingers.
func kill(p *process) {
	_ = syscall.Kill(p.pid, syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
		<-p.done
	}
}

// Stop shuts the server down (fast shutdown: open sessions are ended,
// committed data is kept) and waits until it has exited. If ctx ends first,
// the server is killed (immediate shutdown, then SIGKILL) and Stop returns
// ctx's error. Stop may be called more than once, and after the server died:
// later calls return what the first returned, and a server that had already
// exited by itself is not an error (see Err). Stop releases the data
// directory lock.
func (c *Cluster) Stop(ctx context.Context) error {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	if c.stopped {
		return c.stopErr
	}
	c.stopped = true
	defer c.releaseLock()
	p := c.proc
	select {
	case <-p.done:
		c.logger.Warn("pgembed: postgres had already exited", "pid", p.pid, "err", p.waitErr)
		return nil
	default:
	}
	if err := syscall.Kill(p.pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		c.logger.Warn("pgembed: signal postgres", "pid", p.pid, "err", err)
	}
	select {
	case <-p.done:
		c.logger.Info("pgembed: postgres stopped", "data_dir", c.dataDir, "pid", p.pid)
	case <-ctx.Done():
		kill(p)
		c.stopErr = fmt.Errorf("pgembed: fast shutdown of postgres (pid %d) did not finish, killed it: %w",
			p.pid, ctx.Err())
	}
	return c.stopErr
}

// Restart crashes the server and starts it again, as `pg_ctl restart -m
// immediate` does: the postmaster gets SIGQUIT (immediate shutdown), which
// ends every session at once without a checkpoint, so the new server runs
// crash recovery before it accepts connections. The server stays down for
// down, then starts on the same port and data directory; Restart returns
// once it accepts connections. It is for tests of how clients live through
// a database outage. If ctx ends before the old server has exited, it is
// killed (SIGKILL). After a Restart, Done, Err and Pid are those of the new
// server.
func (c *Cluster) Restart(ctx context.Context, down time.Duration) error {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	if c.stopped {
		return errors.New("pgembed: restart of a stopped cluster")
	}
	p := c.proc
	if err := syscall.Kill(p.pid, syscall.SIGQUIT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgembed: signal postgres (pid %d): %w", p.pid, err)
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
		<-p.done
	}
	c.logger.Info("pgembed: postgres crashed on purpose (immediate shutdown)", "pid", p.pid, "down_for", down)
	select {
	case <-ctx.Done():
		return fmt.Errorf("pgembed: restart: %w", ctx.Err())
	case <-time.After(down):
	}
	opts := c.opts
	opts.Port = c.port // clients reconnect where they were
	return c.run(ctx, opts, c.sc)
}

// process returns the current server process.
func (c *Cluster) process() *process {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	return c.proc
}

// Done returns a channel that is closed when the server process has exited,
// whether through Stop or not.
func (c *Cluster) Done() <-chan struct{} { return c.process().done }

// Err returns how the server process ended (nil for a clean exit), once Done
// is closed; nil before.
func (c *Cluster) Err() error {
	p := c.process()
	select {
	case <-p.done:
		return p.waitErr
	default:
		return nil
	}
}

// URL returns the connection URL of database dbname as the superuser:
// postgres://postgres@127.0.0.1:PORT/dbname?sslmode=disable.
func (c *Cluster) URL(dbname string) string { return clusterURL(c.port, dbname) }

// EnsureDatabase creates database name if it does not exist yet.
func (c *Cluster) EnsureDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URL(Superuser))
	if err != nil {
		return fmt.Errorf("pgembed: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).
		Scan(&exists); err != nil {
		return fmt.Errorf("pgembed: look up database %q: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgembed: create database %q: %w", name, err)
	}
	return nil
}

// Port returns the TCP port the server listens on, on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// DataDir returns the absolute path of the cluster's data directory: the one
// asked for, or where it was relocated when the postgres OS user could not
// reach that one.
func (c *Cluster) DataDir() string { return c.dataDir }

// BinDir is the directory of the server's binaries (pg_waldump's too).
func (c *Cluster) BinDir() string { return c.binDir }

// LogPath returns the path of the server's log file.
func (c *Cluster) LogPath() string { return c.logPath }

// Pid returns the process id of the postmaster.
func (c *Cluster) Pid() int { return c.process().pid }

func clusterURL(port int, dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgembed: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) releaseLock() {
	if c.lock != nil {
		_ = c.lock.Close() // closing the descriptor drops the flock
		c.lock = nil
	}
}

// logTail returns the last lines that postgres logged since offset.
func (c *Cluster) logTail(offset int64) string {
	const maxTail = 4 << 10
	f, err := os.Open(c.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	if size-offset > maxTail {
		offset = size - maxTail
	}
	buf := make([]byte, size-offset)
	if _, err := f.ReadAt(buf, offset); err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	text := strings.TrimSpace(string(buf))
	if text == "" {
		return fmt.Sprintf("(%s is empty)", c.logPath)
	}
	return "last lines of " + c.logPath + ":\n" + text
}

func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pgembed: %w", err)
	}
	return st.Size(), nil
}

// rotateLog keeps the previous run's log as pgembed.log.1.
func rotateLog(path string) error {
	err := os.Rename(path, path+".1")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pgembed: rotate log: %w", err)
	}
	return nil
}
