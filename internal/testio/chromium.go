package testio

import (
	"os"
	"os/exec"
	"testing"
)

// Chromium returns the path of a Chromium binary for a browser test. With
// none installed it skips the test, or fails it in CI, which installs one
// (.ci/run).
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium binary in CI: .ci/run installs it")
	}
	t.Skip("no chromium binary (apt-get install chromium); .ci/run installs it")
	return ""
}
