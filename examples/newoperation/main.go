// Command newoperation copies the example operation (examples/payouts) into
// internal/<name>, renamed, with its migration under the next free number,
// and prints the one line to add to internal/app's Modules and the files a
// new operation may want to touch. `make new-operation NAME=transfers` runs
// it. The copy builds and its tests run as they are; what it pays out, and
// to whom, is then the new operation's to change.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

func main() {
	name := flag.String("name", "", "the new operation's package, a plural noun in lower case (transfers)")
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if err := run(*root, *name); err != nil {
		fmt.Fprintln(os.Stderr, "new-operation:", err)
		os.Exit(1)
	}
}

func run(root, name string) error {
	r, err := newRenamer(name)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, "internal", name)
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists already", dir)
	}
	files, err := r.packageFiles(root)
	if err != nil {
		return err
	}
	migration, err := r.migration(root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for file, text := range files {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(root, "migrations", migration.file), []byte(migration.text), 0o644); err != nil {
		return err
	}
	fmt.Printf(`Wrote internal/%[1]s/ and migrations/%[2]s.

Register it: add this line to Modules in internal/app/app.go:

	%[1]s.Module(),

Then:
  make schema     # migrations/schema.sql, with the new tables
  make spec       # api/openapi.yaml, with its paths, schemas, problem codes and events
  make generate   # the clients, from the spec
  add its requests to api/requests.http, its event types to docs/events.md, and a row for
    internal/%[1]s to the layout table of docs/design.md (their tests name what is missing)
  make the provider adapter (internal/provider/...) implement %[1]s.Port; until it does, the routes answer 501
  check migrations/%[2]s's ledger CHECK lists every entry type in use
`, name, migration.file)
	return nil
}

// renamer turns the example's names into the new operation's.
type renamer struct {
	plural, singular string
	replacer         *strings.Replacer
}

var validName = regexp.MustCompile(`^[a-z][a-z0-9]{2,30}s$`)

func newRenamer(name string) (*renamer, error) {
	if !validName.MatchString(name) || name == "payouts" {
		return nil, fmt.Errorf("NAME %q: want a plural noun in lower case letters and digits, ending in s (transfers)", name)
	}
	singular := strings.TrimSuffix(name, "s")
	title := func(s string) string { return strings.ToUpper(s[:1]) + s[1:] }
	return &renamer{plural: name, singular: singular, replacer: strings.NewReplacer(
		"examples/payouts", "internal/"+name,
		"payouts", name, "Payouts", title(name), "PAYOUTS", strings.ToUpper(name),
		"payout", singular, "Payout", title(singular), "PAYOUT", strings.ToUpper(singular),
		`"po_"`, `"`+singular[:2]+`_"`, `'^po_'`, `'^`+singular[:2]+`_'`,
	)}, nil
}

// packageFiles are the example's Go files and its part of the spec,
// renamed.
func (r *renamer) packageFiles(root string) (map[string]string, error) {
	src := filepath.Join(root, "examples", "payouts")
	entries, err := os.ReadDir(src)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return nil, err
		}
		out[r.replacer.Replace(e.Name())] = r.replacer.Replace(string(b))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no Go files in %s", src)
	}
	return out, nil
}

type migrationFile struct{ file, text string }

// migration is the example's migration, renamed, under the number after
// the last one. Its ledger CHECK keeps the example's entry type and adds
// the new one, and its Down restores the example's list.
func (r *renamer) migration(root string) (migrationFile, error) {
	dir := filepath.Join(root, "migrations")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return migrationFile{}, err
	}
	var numbers []int
	var example string
	for _, e := range entries {
		n, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err != nil || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		numbers = append(numbers, n)
		if strings.HasSuffix(e.Name(), "_payouts.sql") {
			example = e.Name()
		}
	}
	if example == "" {
		return migrationFile{}, fmt.Errorf("no migration of the payouts in %s", dir)
	}
	sort.Ints(numbers)
	b, err := os.ReadFile(filepath.Join(dir, example))
	if err != nil {
		return migrationFile{}, err
	}
	const exampleEntry = "'PAYOUT_SUCCEEDED'"
	newEntry := "'" + strings.ToUpper(r.singular) + "_SUCCEEDED'"
	var lines []string
	var upList string
	down := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "-- +goose Down"):
			down = true
		case strings.Contains(line, "CHECK (entry_type IN") && !down:
			upList = line
			line = strings.Replace(line, exampleEntry, exampleEntry+", "+newEntry, 1)
			lines = append(lines, line)
			continue
		case strings.Contains(line, "CHECK (entry_type IN") && down:
			lines = append(lines, upList)
			continue
		}
		lines = append(lines, r.replacer.Replace(line))
	}
	return migrationFile{
		file: fmt.Sprintf("%05d_%s.sql", numbers[len(numbers)-1]+1, r.plural),
		text: strings.Join(lines, "\n"),
	}, nil
}
