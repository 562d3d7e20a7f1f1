package pgembed

import (
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The premise of runToEnd: a child started with a parent-death signal
// (newCommand) gets it when the OS thread that forked it ends, although
// the process lives on, and the runtime ends a thread when the goroutine
// locked to it returns. Here a goroutine locks its thread, starts a child
// and returns: the child is killed at once. Before runToEnd, an initdb
// forked on a thread that another test's server launcher then locked was
// killed so when that server restarted (CI, TestRestartCrashesAndComesBack).
func TestAChildDiesWithTheThreadThatForkedIt(t *testing.T) {
	t.Parallel()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep program")
	}
	// The process's main thread never ends (the runtime parks it instead),
	// so the child must be forked on another one: this goroutine keeps its
	// own thread, so that the next one runs on some other, and that one
	// must not be the main thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	release := make(chan struct{})
	defer close(release)
	var cmd *exec.Cmd
	for range 100 {
		started := make(chan *exec.Cmd, 1)
		go func() {
			runtime.LockOSThread()
			if syscall.Gettid() == syscall.Getpid() {
				// Keep the main thread busy until the test ends, so
				// that the next goroutine runs elsewhere.
				started <- nil
				<-release
				runtime.UnlockOSThread()
				return
			}
			// Never unlocked: the thread ends with this goroutine.
			c := newCommand(t.Context(), sleep, []string{"30"}, nil, syscall.SIGKILL)
			if err := c.Start(); err != nil {
				t.Error(err)
				started <- nil
				return
			}
			started <- c
		}()
		if cmd = <-started; cmd != nil || t.Failed() {
			break
		}
	}
	if cmd == nil {
		t.Fatal("no goroutine ran on a thread other than the main one")
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("the child ended with %v, want killed", err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the child outlived the thread that forked it")
	}
}
