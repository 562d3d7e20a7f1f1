// Package testio is test support: I/O helpers, waits, and the browser
// tests' Chromium, that the tests of several packages share. Only tests
// import it.
package testio

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// Eventually checks cond every 20 ms until it holds, and fails the test
// with what and cond's last word if it does not within limit: a test waits
// for what it expects instead of sleeping.
func Eventually(t testing.TB, what string, limit time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

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
