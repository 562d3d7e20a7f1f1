//go:build !linux

package database

import (
	"syscall"
	"time"
)

// setUserTimeout does nothing outside Linux: TCP_USER_TIMEOUT is a Linux
// option; keepalives and the per-statement deadlines still apply.
func setUserTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
