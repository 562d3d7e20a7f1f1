// Package proctest runs the service's real binaries as child processes, for
// the end-to-end tests of cmd/paymentsapi and of the failover harness
// (tools/failover). It builds the binaries, starts one, and waits for the
// line in which it says where it listens. Only tests import it.
package proctest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// ListeningRE matches the line in which a server says where it listens;
// its submatch is the URL.
var ListeningRE = regexp.MustCompile(`listening on (http://\S+)`)

// LineWatcher collects a process's output line by line, so that a test
// waits for the line it expects instead of sleeping.
type LineWatcher struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

// NewLineWatcher returns a LineWatcher to use as a process's stdout or
// stderr. It keeps the last 1,024 lines that no one has read yet.
func NewLineWatcher() *LineWatcher { return &LineWatcher{lines: make(chan string, 1024)} }

// Write splits p into lines and hands each complete one to Lines.
func (w *LineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(w.buf.Next(i + 1))
		select {
		case w.lines <- strings.TrimRight(line, "\n"):
		default:
		}
	}
}

// Lines delivers each line written, without its newline, once.
func (w *LineWatcher) Lines() <-chan string { return w.lines }

// Await reads lines until one matches re and returns the last submatch of
// re in it, with the lines it read. It fails the test if no line matches
// within timeout.
func (w *LineWatcher) Await(t *testing.T, re *regexp.Regexp, timeout time.Duration) (string, []string) {
	t.Helper()
	deadline := time.After(timeout)
	var seen []string
	for {
		select {
		case line := <-w.lines:
			seen = append(seen, line)
			if m := re.FindStringSubmatch(line); m != nil {
				return m[len(m)-1], seen
			}
		case <-deadline:
			t.Fatalf("no line matching %s within %s; saw:\n%s", re, timeout, strings.Join(seen, "\n"))
		}
	}
}

// Binaries compiles cmd/paymentsapi and cmd/providersim into a directory
// of the test's, and returns their paths.
func Binaries(t *testing.T) (api, providersim string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/",
		"github.com/paymentsapi/paymentsapi/cmd/paymentsapi", "github.com/paymentsapi/paymentsapi/cmd/providersim")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	return filepath.Join(dir, "paymentsapi"), filepath.Join(dir, "providersim")
}

// Start starts the binary at path with args, and with env added to the
// test's environment, and returns it with the URL it says it listens on.
// The test's commit mode (pgtest.CommitMode) comes before env, so that a
// test's own COMMIT_MODE wins. The process is killed when the test ends,
// unless the test waited for it.
func Start(t *testing.T, path string, env []string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	stdout, stderr := NewLineWatcher(), NewLineWatcher()
	cmd := exec.Command(path, args...)
	cmd.Env = os.Environ()
	if mode := pgtest.CommitMode(); mode != "" {
		cmd.Env = append(cmd.Env, "COMMIT_MODE="+mode)
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	url, _ := stdout.Await(t, ListeningRE, 60*time.Second)
	return cmd, url
}
