package pgembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// serverBinaries must all be in the bin directory.
var serverBinaries = [...]string{"initdb", "pg_ctl", "postgres"}

// findBinDir returns the directory holding the PostgreSQL server binaries;
// see Options.BinDir. want is the major version of an existing cluster, or
// "".
func findBinDir(explicit, want string) (string, error) {
	if explicit != "" {
		return explicit, checkBinDir(explicit)
	}
	if env := os.Getenv("PG_BIN_DIR"); env != "" {
		if err := checkBinDir(env); err != nil {
			return "", fmt.Errorf("PG_BIN_DIR: %w", err)
		}
		return env, nil
	}
	candidates, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for _, dir := range orderBinDirs(candidates, want) {
		if checkBinDir(dir) == nil {
			return dir, nil
		}
	}
	for _, name := range serverBinaries {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if dir := filepath.Dir(p); checkBinDir(dir) == nil {
			return dir, nil
		}
	}
	return "", errors.New("pgembed: no PostgreSQL server binaries (initdb, pg_ctl, postgres) found: " +
		"install them (Debian: apt-get install postgresql) or set PG_BIN_DIR to their directory")
}

// orderBinDirs sorts /usr/lib/postgresql/VERSION/bin directories by version,
// highest first, with the one of version want (if any) in front.
func orderBinDirs(dirs []string, want string) []string {
	version := func(dir string) float64 {
		v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		if err != nil {
			return -1
		}
		return v
	}
	out := slices.Clone(dirs)
	slices.SortStableFunc(out, func(a, b string) int {
		aw, bw := filepath.Base(filepath.Dir(a)) == want, filepath.Base(filepath.Dir(b)) == want
		switch {
		case aw && !bw:
			return -1
		case bw && !aw:
			return 1
		}
		va, vb := version(a), version(b)
		switch {
		case va > vb:
			return -1
		case va < vb:
			return 1
		}
		return 0
	})
	return out
}

func checkBinDir(dir string) error {
	for _, name := range serverBinaries {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("pgembed: %s is not a PostgreSQL bin directory: %w", dir, err)
		}
		if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("pgembed: %s is not executable", filepath.Join(dir, name))
		}
	}
	return nil
}

// readClusterVersion returns the major version in dataDir/PG_VERSION, or ""
// if dataDir holds no cluster.
func readClusterVersion(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("pgembed: read cluster version: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// walCompression is the wal_compression of a durable cluster (see spawn):
// what walCompressionFor makes of the pg_config next to the server, or on
// (pglz, which every server has) when there is none.
func walCompression(binDir string) string {
	out, err := exec.Command(filepath.Join(binDir, "pg_config"), "--version", "--configure").Output()
	if err != nil {
		return "on"
	}
	return walCompressionFor(string(out))
}

var pgConfigVersionRE = regexp.MustCompile(`(?m)^PostgreSQL (\d+)`)

// walCompressionFor picks the compression of full-page images from the
// output of `pg_config --version --configure`: lz4 where the server was
// built with it (an option of PostgreSQL 15 and later; the PGDG and Debian
// packages have it), the fastest of the methods for nearly the same ratio
// as pglz; otherwise on, which means pglz.
func walCompressionFor(pgConfig string) string {
	m := pgConfigVersionRE.FindStringSubmatch(pgConfig)
	if m == nil {
		return "on"
	}
	if major, _ := strconv.Atoi(m[1]); major >= 15 && strings.Contains(pgConfig, "'--with-lz4'") {
		return "lz4"
	}
	return "on"
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)(?:\.(\d+))?`)

// majorVersion extracts the major version from `postgres -V` output: "15"
// for 15.4, "9.6" for 9.6.24.
func majorVersion(out string) string {
	m := versionRE.FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	if n, _ := strconv.Atoi(m[1]); n < 10 && m[2] != "" {
		return m[1] + "." + m[2]
	}
	return m[1]
}

// checkVersion fails early, and clearly, when the binaries cannot run the
// existing cluster.
func checkVersion(ctx context.Context, binDir, dataDir, clusterVersion string) error {
	postgres := filepath.Join(binDir, "postgres")
	out, err := exec.CommandContext(ctx, postgres, "-V").Output()
	if err != nil {
		return fmt.Errorf("pgembed: %s -V: %w", postgres, err)
	}
	if v := majorVersion(string(out)); v != "" && v != clusterVersion {
		return fmt.Errorf("pgembed: %s holds a PostgreSQL %s cluster but %s is PostgreSQL %s: "+
			"remove the directory to start afresh, or set PG_BIN_DIR to PostgreSQL %s's bin directory",
			dataDir, clusterVersion, postgres, v, clusterVersion)
	}
	return nil
}

// initCluster runs initdb into a sibling directory and renames it to
// dataDir once complete, so that a killed initdb never leaves a half-made
// cluster behind. dataDir must be missing or empty.
func initCluster(ctx context.Context, binDir, dataDir string, a *account, ephemeral bool, logger *slog.Logger) error {
	if st, err := os.Stat(dataDir); err == nil && !st.IsDir() {
		return fmt.Errorf("pgembed: data directory %s is not a directory", dataDir)
	}
	if entries, err := os.ReadDir(dataDir); err == nil && len(entries) > 0 {
		return fmt.Errorf("pgembed: %s is not empty and holds no PostgreSQL cluster (no PG_VERSION): "+
			"empty it or choose another data directory", dataDir)
	}
	tmp := filepath.Join(filepath.Dir(dataDir), "."+filepath.Base(dataDir)+".initdb")
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("pgembed: remove leftover %s: %w", tmp, err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	if a != nil {
		if err := os.Chown(tmp, int(a.uid), int(a.gid)); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("pgembed: give %s to user %s: %w", tmp, a.name, err)
		}
	}
	args := []string{
		"-D", tmp,
		"-U", Superuser,
		"--auth=trust",
		"--encoding=UTF8",
		"--locale=C",
		"--no-instructions",
	}
	if ephemeral {
		args = append(args, "--no-sync")
	}
	logger.Info("pgembed: initialising a new cluster", "data_dir", dataDir)
	started := time.Now()
	out, err := runToEnd(newCommand(ctx, filepath.Join(binDir, "initdb"), args, a, syscall.SIGKILL))
	if err != nil {
		os.RemoveAll(tmp)
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("pgembed: initdb %s: %w\n%s", dataDir, err, tail(string(out), 2048))
	}
	if err := os.Remove(dataDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		os.RemoveAll(tmp)
		return fmt.Errorf("pgembed: %w", err)
	}
	if err := os.Rename(tmp, dataDir); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("pgembed: %w", err)
	}
	logger.Info("pgembed: cluster initialised", "data_dir", dataDir, "took", time.Since(started).Round(time.Millisecond))
	return nil
}

// stopLeftover stops a server still running on dataDir, left by an earlier
// launcher (started by hand, or one whose parent-death signal was lost),
// and removes a postmaster.pid whose process id now belongs to another
// program. A postmaster.pid whose process is gone is left to postgres, which
// ignores it.
func stopLeftover(ctx context.Context, binDir, dataDir string, a *account, logger *slog.Logger) error {
	pidPath := filepath.Join(dataDir, "postmaster.pid")
	b, err := os.ReadFile(pidPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid == 0 {
		logger.Warn("pgembed: removing unreadable postmaster.pid", "path", pidPath)
		return removeFile(pidPath)
	}
	if pid < 0 { // a single-user backend
		pid = -pid
	}
	if !processAlive(pid) {
		logger.Info("pgembed: stale postmaster.pid from a server that is gone", "pid", pid)
		return nil
	}
	if !isServerOf(pid, dataDir) {
		logger.Warn("pgembed: removing stale postmaster.pid, its pid now belongs to another process", "pid", pid)
		return removeFile(pidPath)
	}
	logger.Warn("pgembed: a postgres left by an earlier run is still running on the data directory, stopping it",
		"pid", pid, "data_dir", dataDir)
	out, err := runToEnd(newCommand(ctx, filepath.Join(binDir, "pg_ctl"),
		[]string{"stop", "-D", dataDir, "-m", "fast", "-w", "-t", "60"}, a, syscall.SIGKILL))
	if err != nil {
		logger.Warn("pgembed: pg_ctl stop failed, signalling the leftover directly",
			"pid", pid, "err", err, "output", strings.TrimSpace(string(out)))
		if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("pgembed: postgres (pid %d) is still running on %s and cannot be stopped "+
				"(pg_ctl: %s): %w", pid, dataDir, strings.TrimSpace(string(out)), err)
		}
	}
	// pg_ctl returns once postmaster.pid is gone, a moment before the
	// process itself.
	for processAlive(pid) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgembed: wait for leftover postgres (pid %d) to exit: %w", pid, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pgembed: %w", err)
	}
	return nil
}

// processAlive reports whether a process with this pid exists and has not
// yet exited (a zombie waiting for its parent counts as exited).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return (err == nil || errors.Is(err, syscall.EPERM)) && !isZombie(pid)
}

// newCommand builds a command for a PostgreSQL program: run as a (nil: the
// caller), in its own process group (killed whole when ctx ends), from "/" (a postgres user may not be
// allowed to read the caller's working directory), with a C locale and no
// PG* variables, and, on Linux, deathSig sent to it when its parent dies.
func newCommand(ctx context.Context, path string, args []string, a *account, deathSig syscall.Signal) *exec.Cmd {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Dir = "/"
	cmd.Env = childEnv()
	cmd.SysProcAttr = sysProcAttr(a, deathSig)
	return cmd
}

// runToEnd runs cmd, made by newCommand, to its end and returns its output
// (stdout and stderr together), with the calling goroutine locked to its
// OS thread: it is the one way to run such a command to its end. The command's parent-death
// signal (newCommand) fires when the thread that forked it exits, not the
// process, and the runtime ends a thread when the goroutine locked to it
// ends: the server's launcher (start) locks its thread for the server's
// life. Unlocked, the thread that forked an initdb could be taken and
// locked by another cluster's launcher a moment later, and end with that
// server, killing the initdb midway (seen in CI: "initdb: signal: killed"
// while a parallel test restarted its server). Locked, nobody else can
// lock the thread until the command has ended.
func runToEnd(cmd *exec.Cmd) ([]byte, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.CombinedOutput()
}

func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "LANGUAGE" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C")
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}
