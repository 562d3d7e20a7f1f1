package pgembed

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr runs a child as a (nil: the caller), in a process group of its
// own, with deathSig delivered to it when the thread that started it dies.
func sysProcAttr(a *account, deathSig syscall.Signal) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: deathSig}
	if a != nil {
		attr.Credential = a.credential()
	}
	return attr
}

// isServerOf reports whether process pid is a postgres serving dataDir: it
// runs the postgres program from dataDir (every server process works in
// its data directory). What /proc does not let us read counts as a match.
func isServerOf(pid int, dataDir string) bool {
	proc := "/proc/" + strconv.Itoa(pid)
	if comm, err := os.ReadFile(proc + "/comm"); err == nil && strings.TrimSpace(string(comm)) != "postgres" {
		return false
	}
	cwd, err := os.Readlink(proc + "/cwd")
	if err != nil {
		return true
	}
	want, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		return true
	}
	return cwd == want
}

// isZombie reports whether process pid has exited and waits for its parent
// to collect it.
func isZombie(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself hold spaces or parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
