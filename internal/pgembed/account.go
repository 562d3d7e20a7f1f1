package pgembed

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// serverUser is the OS account that runs PostgreSQL when the caller is root.
const serverUser = "postgres"

// account is the OS user that initdb and postgres run as. A nil *account
// means the calling user.
type account struct {
	name   string
	uid    uint32
	gid    uint32
	groups []uint32
}

// runAccount returns the postgres OS user when the process runs as root,
// nil otherwise.
func runAccount() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		return nil, fmt.Errorf("pgembed: PostgreSQL refuses to run as root and the %q OS user is missing "+
			"(create it, e.g. `useradd --system --home-dir /var/lib/postgresql %s`, or run as a normal user): %w",
			serverUser, serverUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgembed: uid of %s: %w", serverUser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgembed: gid of %s: %w", serverUser, err)
	}
	a := &account{name: u.Username, uid: uint32(uid), gid: uint32(gid), groups: []uint32{uint32(gid)}}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil && !slices.Contains(a.groups, uint32(g)) {
				a.groups = append(a.groups, uint32(g))
			}
		}
	}
	if a.uid == 0 {
		return nil, fmt.Errorf("pgembed: OS user %q has uid 0, PostgreSQL refuses to run as root", serverUser)
	}
	return a, nil
}

func (a *account) credential() *syscall.Credential {
	return &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}
}

// canSearch reports whether a may enter (search) a directory with the given
// mode and owner, by the classic permission bits (ACLs are not consulted).
func (a *account) canSearch(perm fs.FileMode, uid, gid uint32) bool {
	switch {
	case uid == a.uid:
		return perm&0o100 != 0
	case slices.Contains(a.groups, gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// blockedDir is an existing directory that an account cannot enter.
type blockedDir struct {
	path string
	perm fs.FileMode
	uid  uint32
}

func (b *blockedDir) String() string {
	owner := strconv.FormatUint(uint64(b.uid), 10)
	if u, err := user.LookupId(owner); err == nil {
		owner = u.Username
	}
	return fmt.Sprintf("%s (mode %04o, owner %s)", b.path, uint32(b.perm), owner)
}

// firstBlocked returns the first existing directory on the way to dir (dir
// included; symbolic links resolved) that a cannot enter, or nil. Missing
// directories are not checked: the launcher creates them searchable.
func firstBlocked(dir string, a *account) (*blockedDir, error) {
	existing := filepath.Clean(dir)
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		existing = parent
	}
	resolved, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return nil, fmt.Errorf("pgembed: resolve %s: %w", existing, err)
	}
	p := string(filepath.Separator)
	parts := strings.Split(strings.TrimPrefix(resolved, p), p)
	for i := -1; i < len(parts); i++ {
		if i >= 0 {
			if parts[i] == "" {
				continue
			}
			p = filepath.Join(p, parts[i])
		}
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("pgembed: %w", err)
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return nil, fmt.Errorf("pgembed: no owner information for %s", p)
		}
		if !a.canSearch(st.Mode().Perm(), sys.Uid, sys.Gid) {
			return &blockedDir{path: p, perm: st.Mode().Perm(), uid: sys.Uid}, nil
		}
	}
	return nil, nil
}

// mkdirAll is os.MkdirAll with an exact mode (the umask does not apply) for
// the directories it creates.
func mkdirAll(dir string, perm fs.FileMode) error {
	dir = filepath.Clean(dir)
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("pgembed: %s is not a directory", dir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return fmt.Errorf("pgembed: %w", err)
	}
	if err := os.Chmod(dir, perm); err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	return nil
}

// defaultFallbackRoots are where clusters go, in this order, when the
// postgres OS user cannot reach the data directory asked for.
func defaultFallbackRoots() []string {
	return []string{
		"/var/lib/paymentsapi/pgembed",
		filepath.Join(os.TempDir(), "paymentsapi-pgembed"),
	}
}

// placeDataDir returns the data directory to use for requested (absolute):
// requested itself, unless a (the postgres user, when running as root)
// cannot reach it; then a per-checkout directory under a fallback root.
// Missing parents of the result are created, searchable.
func placeDataDir(requested string, a *account, fallbackRoot string, logger *slog.Logger) (string, error) {
	if a == nil {
		if err := mkdirAll(filepath.Dir(requested), 0o755); err != nil {
			return "", err
		}
		return requested, nil
	}
	blocked, err := firstBlocked(filepath.Dir(requested), a)
	if err != nil {
		return "", err
	}
	if blocked == nil {
		if err := mkdirAll(filepath.Dir(requested), 0o755); err != nil {
			return "", err
		}
		return requested, nil
	}
	roots := defaultFallbackRoots()
	if fallbackRoot != "" {
		roots = []string{fallbackRoot}
	}
	sum := sha256.Sum256([]byte(requested))
	name := filepath.Base(requested) + "-" + hex.EncodeToString(sum[:])[:12]
	var tried []string
	for _, root := range roots {
		root, err := filepath.Abs(root)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", root, err))
			continue
		}
		if err := mkdirAll(root, 0o711); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", root, err))
			continue
		}
		b, err := firstBlocked(root, a)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", root, err))
			continue
		}
		if b != nil {
			tried = append(tried, fmt.Sprintf("%s: user %s cannot enter %s", root, a.name, b))
			continue
		}
		dir := filepath.Join(root, name)
		logger.Warn("pgembed: OS user "+a.name+" cannot reach the data directory, using a relocated one",
			"requested", requested, "blocked_at", blocked.String(), "data_dir", dir,
			"hint", "to keep the data in place, let user "+a.name+" enter "+blocked.path+
				" (e.g. chmod o+x "+blocked.path+") or move the checkout")
		return dir, nil
	}
	return "", fmt.Errorf("pgembed: PostgreSQL runs as OS user %s, which cannot reach the data directory %s "+
		"because it cannot enter %s, and no fallback location worked (%s): "+
		"set DATABASE_URL to use an existing PostgreSQL server, or move the checkout "+
		"to a directory that user %s can enter (or let it enter %s, e.g. chmod o+x %s)",
		a.name, requested, blocked, strings.Join(tried, "; "), a.name, blocked.path, blocked.path)
}

// fixOwnership hands an existing cluster to a (when running as root) and
// gives it the 0700 mode that postgres insists on.
func fixOwnership(dataDir string, a *account) error {
	st, err := os.Stat(dataDir)
	if err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	if a != nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != a.uid {
			err := filepath.WalkDir(dataDir, func(path string, _ fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				return os.Lchown(path, int(a.uid), int(a.gid))
			})
			if err != nil {
				return fmt.Errorf("pgembed: give %s to user %s: %w", dataDir, a.name, err)
			}
		}
	}
	if st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dataDir, 0o700); err != nil {
			return fmt.Errorf("pgembed: %w", err)
		}
	}
	return nil
}

// lockDataDir takes an exclusive advisory lock that guards dataDir against a
// second launcher. The lock file sits next to the data directory, so it
// exists before initdb; the lock goes with the process, even a killed one.
func lockDataDir(dataDir string) (*os.File, error) {
	path := filepath.Join(filepath.Dir(dataDir), "."+filepath.Base(dataDir)+".pgembed.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgembed: open lock file: %w", err)
	}
	// A child forked by another goroutine of this process shares the
	// descriptor (and so the lock) until it execs, which on a loaded machine
	// can take a moment after the lock was released: retry briefly before
	// declaring the directory in use.
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	for deadline := time.Now().Add(2 * time.Second); errors.Is(err, syscall.EWOULDBLOCK) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("pgembed: data directory %s is in use by another process (pid %s holds %s)",
				dataDir, strings.TrimSpace(string(holder)), path)
		}
		return nil, fmt.Errorf("pgembed: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
