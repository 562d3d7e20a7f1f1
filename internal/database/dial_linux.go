package database

import (
	"syscall"
	"time"
)

// tcpUserTimeout is TCP_USER_TIMEOUT from linux/tcp.h; the syscall package
// does not name it, and golang.org/x/sys is not worth a direct dependency
// for one constant.
const tcpUserTimeout = 0x12

// setUserTimeout returns a net.Dialer Control that sets TCP_USER_TIMEOUT on
// the socket before it connects.
func setUserTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		if network != "tcp" && network != "tcp4" && network != "tcp6" {
			return nil // a Unix socket has no TCP options
		}
		var sockErr error
		err := c.Control(func(fd uintptr) {
			sockErr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(d.Milliseconds()))
		})
		if err != nil {
			return err
		}
		return sockErr
	}
}
