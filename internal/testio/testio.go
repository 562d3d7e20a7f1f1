// Package testio is test support: I/O helpers that the tests of several
// packages share. Only tests import it.
package testio

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that is safe for concurrent use, so that a
// goroutine, a logger or a child process may write to it while the test
// reads it. The zero value is an empty buffer ready to use.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what has been written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
