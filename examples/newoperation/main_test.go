package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A copy of the example under a new name is a package that compiles, its
// tests included, and that names the example nowhere: `go test -c`
// compiles it where `make new-operation` writes it (internal/<name>), through an
// overlay, so that the repository is not written to.
func TestACopyOfTheExampleCompilesUnderItsNewName(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a package")
	}
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	r, err := newRenamer("transfers")
	if err != nil {
		t.Fatal(err)
	}
	files, err := r.packageFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	migration, err := r.migration(root)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	overlay := map[string]string{}
	for name, text := range files {
		if strings.Contains(strings.ToLower(text), "payout") || strings.Contains(text, "po_") {
			t.Errorf("%s still names the payouts", name)
		}
		written := filepath.Join(tmp, name)
		if err := os.WriteFile(written, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(root, "internal", "transfers", name)] = written
	}
	for _, want := range []string{"module.go", "command.go", "state.go", "payouts_test.go"} {
		if _, ok := files[r.replacer.Replace(want)]; !ok {
			t.Errorf("the copy has no %s", r.replacer.Replace(want))
		}
	}
	if !strings.Contains(migration.text, "CREATE TABLE transfers") || !strings.Contains(migration.text, "enforce_state_machine('transfer')") ||
		!strings.Contains(migration.text, "'PAYOUT_SUCCEEDED', 'TRANSFER_SUCCEEDED'") || !strings.HasSuffix(migration.file, "_transfers.sql") {
		t.Errorf("the migration %s:\n%s", migration.file, migration.text)
	}
	b, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// go test -c compiles the package and its tests (go vet would need the
	// directory to exist, so it is off).
	cmd := exec.Command("go", "test", "-vet=off", "-overlay", overlayFile, "-c", "-o", filepath.Join(tmp, "transfers.test"), "./internal/transfers/")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compiling the copy: %v\n%s", err, out)
	}
}

// The name must be a package name that the renaming cannot garble.
func TestANameThatIsNoPluralNounIsRefused(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "Transfers", "transfer", "payouts", "a-s", "ts"} {
		if _, err := newRenamer(name); err == nil {
			t.Errorf("%q was taken", name)
		}
	}
}
