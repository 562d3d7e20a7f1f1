package app_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/app"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// docTable returns the rows of the first table under heading in the
// markdown file doc (a path from the repository's root): each row's cells,
// trimmed, the header and its rule left out. It fails the test if doc has
// no such heading or no table under it.
func docTable(t *testing.T, doc, heading string) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, doc))
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(b), "\n"+heading+"\n")
	if !found {
		t.Fatalf("%s has no heading %q", doc, heading)
	}
	var rows [][]string
	for _, line := range strings.Split(section, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			break // the next section
		}
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 {
				break // the table's end
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	if len(rows) < 2 {
		t.Fatalf("%s has no table under %q", doc, heading)
	}
	return rows[2:] // the header and the rule
}

// unquote is cell without the backquotes around it ("" if it has none).
func unquote(cell string) string {
	if len(cell) < 2 || cell[0] != '`' || cell[len(cell)-1] != '`' {
		return ""
	}
	return cell[1 : len(cell)-1]
}

// docs/design.md opens with a map of the code: every Go package of the
// repository has its row in the layout table, and every row names a package
// that exists, so that the map stays whole as packages come and go.
func TestTheLayoutTableNamesEveryPackage(t *testing.T) {
	var packages []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "tmp" || name == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(name, ".go") {
			return nil
		}
		dir, err := filepath.Rel(repoRoot, filepath.Dir(path))
		if err != nil {
			return err
		}
		if dir = filepath.ToSlash(dir); !slices.Contains(packages, dir) {
			packages = append(packages, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, row := range docTable(t, "docs/design.md", "## The layout") {
		pkg := unquote(row[0])
		if pkg == "" {
			t.Errorf("docs/design.md, The layout: a row names no package in its first cell: %q", row)
			continue
		}
		listed = append(listed, pkg)
		if !slices.Contains(packages, pkg) {
			t.Errorf("docs/design.md, The layout, names %s, which is no package (moved or removed?)", pkg)
		}
	}
	for _, pkg := range packages {
		if !slices.Contains(listed, pkg) {
			t.Errorf("docs/design.md, The layout, has no row for the package %s: add one line saying what it holds", pkg)
		}
	}
}

// docs/events.md lists every event type the service writes to the outbox,
// with its name in the event log and in webhooks: those the registered
// operations declare (operation.Module.Events), and no other.
func TestEventsDocListsEveryEventType(t *testing.T) {
	type event struct{ typ, name string }
	var declared []event
	for _, m := range app.Modules(app.Config{}) {
		for _, e := range m.Events {
			declared = append(declared, event{e.Type, e.Name})
		}
	}
	if len(declared) == 0 {
		t.Fatal("the modules declare no event")
	}
	var listed []event
	for _, row := range docTable(t, "docs/events.md", "## Every event type") {
		if len(row) < 2 {
			t.Errorf("docs/events.md, Every event type: a row of fewer than two cells: %q", row)
			continue
		}
		name := unquote(row[1])
		if row[1] == "none" {
			name = ""
		}
		listed = append(listed, event{unquote(row[0]), name})
	}
	for _, e := range declared {
		if !slices.Contains(listed, e) {
			t.Errorf("docs/events.md, Every event type, has no row | `%s` | `%s` |", e.typ, e.name)
		}
	}
	for _, e := range listed {
		if !slices.Contains(declared, e) {
			t.Errorf("docs/events.md, Every event type, lists %q (named %q), which no operation declares", e.typ, e.name)
		}
	}
}

// docs/design.md's table of tables names every table of the schema
// (migrations/schema.sql) with the package that owns it, and no other.
func TestTheTablesTableNamesEveryTable(t *testing.T) {
	schema, err := os.ReadFile(filepath.Join(repoRoot, "migrations/schema.sql"))
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for _, line := range strings.Split(string(schema), "\n") {
		if name, ok := strings.CutPrefix(line, "CREATE TABLE public."); ok {
			tables = append(tables, strings.TrimSuffix(name, " ("))
		}
	}
	if len(tables) == 0 {
		t.Fatal("migrations/schema.sql creates no table")
	}
	var listed []string
	for _, row := range docTable(t, "docs/design.md", "## Tables") {
		for _, cell := range strings.Split(row[0], ",") {
			listed = append(listed, unquote(strings.TrimSpace(cell)))
		}
	}
	for _, table := range tables {
		if !slices.Contains(listed, table) {
			t.Errorf("docs/design.md, Tables, has no row for the table %s: name the package that owns it", table)
		}
	}
	for _, table := range listed {
		if !slices.Contains(tables, table) {
			t.Errorf("docs/design.md, Tables, names %q, which migrations/schema.sql does not create", table)
		}
	}
}
