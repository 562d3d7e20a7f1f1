package apigen

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedCodeIsCurrent regenerates the code from api/openapi.yaml
// with the pinned oapi-codegen into a temporary directory and fails when it
// differs from the committed apigen.gen.go: after a change of the spec, run
// `go generate ./client/...` and commit the result.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to run the pinned oapi-codegen: %v", err)
	}
	committed, err := os.ReadFile("apigen.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile("oapi-codegen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "apigen.gen.go")
	if !bytes.Contains(cfg, []byte("\noutput: apigen.gen.go\n")) {
		t.Fatal("oapi-codegen.yaml no longer writes apigen.gen.go: update this test")
	}
	cfg = bytes.Replace(cfg, []byte("\noutput: apigen.gen.go\n"), []byte("\noutput: "+out+"\n"), 1)
	cfgPath := filepath.Join(dir, "oapi-codegen.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "tool", "oapi-codegen", "-config", cfgPath, "../../../api/openapi.yaml")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen: %v\n%s", err, msg)
	}
	fresh, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fresh, committed) {
		t.Fatalf("client/internal/apigen/apigen.gen.go is stale: run `go generate ./client/...` and commit it\n%s", firstDifference(committed, fresh))
	}
}

// firstDifference shows the first line where the two files differ.
func firstDifference(committed, fresh []byte) string {
	a, b := strings.Split(string(committed), "\n"), strings.Split(string(fresh), "\n")
	for i := range max(len(a), len(b)) {
		var la, lb string
		if i < len(a) {
			la = a[i]
		}
		if i < len(b) {
			lb = b[i]
		}
		if la != lb {
			return fmt.Sprintf("line %d:\ncommitted: %s\ngenerated: %s", i+1, la, lb)
		}
	}
	return ""
}
