package main

import "syscall"

// childProcAttr makes the API die with the bench (SIGTERM when its parent
// dies), so that a killed run leaves no server behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
