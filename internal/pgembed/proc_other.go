//go:build unix && !linux

package pgembed

import "syscall"

// sysProcAttr runs a child as a (nil: the caller), in a process group of its
// own. This system has no parent-death signal: deathSig is unused, and a
// killed launcher may leave a server behind, which the next Start stops.
func sysProcAttr(a *account, _ syscall.Signal) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if a != nil {
		attr.Credential = a.credential()
	}
	return attr
}

// isServerOf reports whether process pid is a postgres serving dataDir;
// without /proc it cannot tell, and says yes.
func isServerOf(int, string) bool { return true }

// isZombie cannot tell without /proc: it says no.
func isZombie(int) bool { return false }
