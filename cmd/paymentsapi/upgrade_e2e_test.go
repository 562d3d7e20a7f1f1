package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/proctest"
	"github.com/paymentsapi/paymentsapi/migrations"
)

// Rolling upgrades (docs/operations.md, "Migrations"): while new instances
// migrate the database and start, the previous release keeps serving on
// the migrated schema, so every migration must leave it working: it may
// add, never drop or rename what the previous release reads or writes
// (expand now, contract one release later).
//
// The previous release is the commit before the newest migration: the
// parent of the commit that added it, or HEAD while the newest migration is
// not committed yet. The test builds that commit's binary from the
// repository's history (git archive), lets it create its schema and
// payments, starts the current binary on the same database (it migrates
// while the old one serves), and drives both at once: new payments,
// refunds of the other version's payments, replays of both versions' keys
// (byte for byte), a reference held by the other version. No answer may be
// a 5xx. Then the old one stops, and the current one replays everything.
//
// Only that release is tested: a rolling upgrade skips no release, so an
// older one never serves beside this one (docs/operations.md).
//
// It needs the repository's history (a clone, not an export or a shallow
// clone): without it the test fails and says so.
func TestRollingUpgrade(t *testing.T) {
	newest := newestMigration(t)
	versions := []int64{newest}
	apiBin, simBin := buildCurrent(t)
	for _, v := range versions {
		t.Run(fmt.Sprintf("from the release before %05d", v), func(t *testing.T) {
			old := previousRelease(t, v)
			oldBin := buildRelease(t, old)
			rollingUpgrade(t, oldBin, apiBin, simBin)
		})
	}
}

// newestMigration is the highest version among the current migrations.
func newestMigration(t *testing.T) int64 {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("migrations: %v %v", names, err)
	}
	var newest int64
	for _, n := range names {
		v, err := goose.NumericComponent(n)
		if err != nil {
			t.Fatalf("migration %s: %v", n, err)
		}
		newest = max(newest, v)
	}
	return newest
}

// git runs git in the repository that holds this package.
func git(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr))
	}
	return strings.TrimSpace(string(out)), nil
}

// previousRelease is the commit before the one that added migration
// version: its parent, or HEAD when HEAD does not have the migration yet.
func previousRelease(t *testing.T, version int64) string {
	t.Helper()
	const needHistory = "TestRollingUpgrade builds the previous release from the repository's history; " +
		"run it in a git clone with full history (git fetch --unshallow)"
	if _, err := git(t, "rev-parse", "--git-dir"); err != nil {
		t.Fatalf("%s: %v", needHistory, err)
	}
	if shallow, err := git(t, "rev-parse", "--is-shallow-repository"); err != nil || shallow != "false" {
		t.Fatalf("%s: shallow repository (%q, %v)", needHistory, shallow, err)
	}
	names, err := fs.Glob(migrations.FS, fmt.Sprintf("%05d_*.sql", version))
	if err != nil || len(names) != 1 {
		t.Fatalf("migration %05d: %v %v", version, names, err)
	}
	file := "migrations/" + names[0]
	top, err := git(t, "rev-parse", "--show-toplevel")
	if err != nil {
		t.Fatal(err)
	}
	commit := ""
	if _, err := git(t, "-C", top, "cat-file", "-e", "HEAD:"+file); err != nil {
		commit, err = git(t, "rev-parse", "HEAD") // not committed yet: HEAD is the previous release
		if err != nil {
			t.Fatal(err)
		}
	} else {
		// Along the first parents, a migration merged from a branch is
		// added by its merge, whose first parent is the release before it.
		added, err := git(t, "-C", top, "log", "--first-parent", "-m", "--diff-filter=A", "--format=%H", "HEAD", "--", file)
		if err != nil || added == "" {
			t.Fatalf("%s: no commit adds %s (%v)", needHistory, file, err)
		}
		lines := strings.Fields(added)
		first := lines[len(lines)-1] // the oldest, should it have been added twice
		if commit, err = git(t, "rev-parse", first+"^"); err != nil {
			t.Fatalf("%s: %v", needHistory, err)
		}
	}
	// The previous release is the one that does not have the migration.
	if _, err := git(t, "-C", top, "cat-file", "-e", commit+":"+file); err == nil {
		t.Fatalf("the release before %s (%s) already has it", file, commit)
	}
	subject, _ := git(t, "log", "-1", "--format=%h %s", commit)
	t.Logf("previous release: %s", subject)
	return commit
}

// goBuild builds the packages of the module in dir into out. -trimpath
// makes a package's build the same whatever directory holds its source, so
// the packages a release shares with the current tree come from the build
// cache.
func goBuild(t *testing.T, dir, out string, pkgs ...string) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"build", "-trimpath", "-o", out + "/"}, pkgs...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build %v in %s: %v\n%s", pkgs, dir, err, stderr.String())
	}
}

// buildCurrent builds the API and the provider simulator of the working tree.
func buildCurrent(t *testing.T) (api, sim string) {
	t.Helper()
	out := t.TempDir()
	goBuild(t, ".", out, "github.com/paymentsapi/paymentsapi/cmd/paymentsapi", "github.com/paymentsapi/paymentsapi/cmd/providersim")
	return filepath.Join(out, "paymentsapi"), filepath.Join(out, "providersim")
}

// buildRelease builds the API of commit, from its tree in the repository.
func buildRelease(t *testing.T, commit string) string {
	t.Helper()
	src, out := t.TempDir(), t.TempDir()
	top, err := git(t, "rev-parse", "--show-toplevel")
	if err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", top, "archive", "--format=tar", commit)
	extract := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	extract.Stdin = pipe
	var archiveErr, extractErr bytes.Buffer
	archive.Stderr, extract.Stderr = &archiveErr, &extractErr
	if err := extract.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v: %s", commit, err, archiveErr.String())
	}
	if err := extract.Wait(); err != nil {
		t.Fatalf("tar: %v: %s", err, extractErr.String())
	}
	goBuild(t, src, out, "./cmd/paymentsapi")
	return filepath.Join(out, "paymentsapi")
}

const (
	upgradeTenant = "upgrade"
	upgradeSecret = "sk_upgrade"
)

// apiProcess is a running API binary and what it logged.
type apiProcess struct {
	name string
	url  string
	cmd  *exec.Cmd
	log  *syncBuffer
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// tail is the last n lines written.
func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(strings.TrimRight(b.buf.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// startAPI starts an API binary on dbURL with the provider at simURL. The
// returned channel is closed once it listens.
func startAPI(t *testing.T, name, bin, dbURL, simURL string) (*apiProcess, <-chan struct{}) {
	t.Helper()
	p := &apiProcess{name: name, log: &syncBuffer{}}
	stdout := proctest.NewLineWatcher()
	p.cmd = exec.Command(bin)
	p.cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "PROVIDER=sim", "PROVIDER_URL="+simURL,
		"API_KEYS="+upgradeTenant+":"+upgradeSecret, "HTTP_ADDR=127.0.0.1:0", "LOG_LEVEL=warn")
	p.cmd.Stdout, p.cmd.Stderr = stdout, p.log // stdout: the outbox's events
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s's last log lines:\n%s", name, p.log.tail(30))
		}
	})
	ready := make(chan struct{})
	go func() {
		defer close(ready)
		deadline := time.After(2 * time.Minute)
		for {
			select {
			case line := <-stdout.Lines():
				if m := proctest.ListeningRE.FindStringSubmatch(line); m != nil {
					p.url = m[1]
					return
				}
			case <-deadline:
				return
			}
		}
	}()
	return p, ready
}

func (p *apiProcess) await(t *testing.T, ready <-chan struct{}) {
	t.Helper()
	<-ready
	if p.url == "" {
		t.Fatalf("%s did not listen within 2 minutes:\n%s", p.name, p.log.tail(30))
	}
}

// answer is one HTTP exchange.
type answer struct {
	status   int
	replayed bool
	body     []byte
}

var upgradeClient = &http.Client{Timeout: 30 * time.Second}

func (p *apiProcess) post(path, key, body string) (answer, error) {
	req, err := http.NewRequest(http.MethodPost, p.url+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+upgradeSecret)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := upgradeClient.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("%s: POST %s: %w", p.name, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("%s: POST %s: %w", p.name, path, err)
	}
	a := answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: b}
	if a.status >= 500 {
		return a, fmt.Errorf("%s: POST %s (key %s): %d %s", p.name, path, key, a.status, b)
	}
	return a, nil
}

// made is a request a version answered first, to be replayed.
type made struct {
	by, path, key, body string
	first               answer
}

// ledger collects what both versions made, and every failure, from
// concurrent goroutines.
type ledger struct {
	mu       sync.Mutex
	payments map[string][]string // by the version that created them: payment ids
	made     []made
	errs     []string
}

func (l *ledger) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
}

func (l *ledger) record(m made, paymentID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.made = append(l.made, m)
	if paymentID != "" {
		l.payments[m.by] = append(l.payments[m.by], paymentID)
	}
}

func (l *ledger) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs[:min(len(l.errs), 20)] {
		t.Error(e)
	}
	if len(l.errs) > 20 {
		t.Errorf("... and %d more failures", len(l.errs)-20)
	}
	if len(l.errs) > 0 {
		t.FailNow()
	}
}

func paymentBody(ref string) string {
	return `{"accountId":"acc_up","amount":"10.00","currency":"EUR","merchantReference":"` + ref + `","paymentMethod":"pm_card_visa"}`
}

// pay creates a payment on p under a new key and records it.
func (l *ledger) pay(p *apiProcess, key string) {
	body := paymentBody("inv-" + key)
	a, err := p.post("/payments", key, body)
	if err != nil {
		l.fail("%v", err)
		return
	}
	var pm struct{ PaymentID string }
	if a.status != http.StatusCreated || json.Unmarshal(a.body, &pm) != nil || pm.PaymentID == "" {
		l.fail("%s: new payment %s: %d %s, want 201", p.name, key, a.status, a.body)
		return
	}
	l.record(made{by: p.name, path: "/payments", key: key, body: body, first: a}, pm.PaymentID)
}

// refund refunds 0.10 of paymentID on p under a new key and records it.
func (l *ledger) refund(p *apiProcess, paymentID, key string) {
	path, body := "/payments/"+paymentID+"/refunds", `{"amount":"0.10","reason":"requested_by_customer"}`
	a, err := p.post(path, key, body)
	if err != nil {
		l.fail("%v", err)
		return
	}
	if a.status != http.StatusCreated {
		l.fail("%s: refund %s of %s: %d %s, want 201", p.name, key, paymentID, a.status, a.body)
		return
	}
	l.record(made{by: p.name, path: path, key: key, body: body, first: a}, "")
}

// replay sends m again to p: the stored answer, byte for byte.
func (l *ledger) replay(p *apiProcess, m made) {
	a, err := p.post(m.path, m.key, m.body)
	if err != nil {
		l.fail("%v", err)
		return
	}
	if a.status != m.first.status || !a.replayed || !bytes.Equal(a.body, m.first.body) {
		l.fail("%s: replay of %s's key %s: %d replayed=%v %s; want %d replayed, byte for byte %s",
			p.name, m.by, m.key, a.status, a.replayed, a.body, m.first.status, m.first.body)
	}
}

// snapshot is what was made so far, and the payments of version by.
func (l *ledger) snapshot(by string) ([]made, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.made), slices.Clone(l.payments[by])
}

// rollingUpgrade runs the upgrade from the release built as oldBin to the
// one built as newBin, with the provider simulator simBin.
func rollingUpgrade(t *testing.T, oldBin, newBin, simBin string) {
	dbURL := pgtest.NewEmptyURL(t)
	_, simURL := proctest.Start(t, simBin, nil, "-addr", "127.0.0.1:0")
	l := &ledger{payments: map[string][]string{}}

	// The previous release alone, on the schema it migrated itself.
	oldAPI, ready := startAPI(t, "previous release", oldBin, dbURL, simURL)
	oldAPI.await(t, ready)
	for i := range 4 {
		l.pay(oldAPI, fmt.Sprintf("before-%d", i))
	}
	l.check(t)

	// The current release starts and migrates while the previous one
	// serves: it keeps answering, with no 5xx.
	newAPI, ready := startAPI(t, "current release", newBin, dbURL, simURL)
	during := 0
	for starting := true; starting; during++ {
		select {
		case <-ready:
			starting = false
		default:
			l.pay(oldAPI, fmt.Sprintf("during-%d", during))
		}
	}
	newAPI.await(t, ready)
	t.Logf("the previous release answered %d new payments while the current one started", during-1)
	l.check(t)

	// Both at once, each on the other's payments and keys.
	const rounds = 12
	var wg sync.WaitGroup
	for _, pair := range [][2]*apiProcess{{oldAPI, newAPI}, {newAPI, oldAPI}} {
		self, other := pair[0], pair[1]
		for w := range 2 {
			wg.Go(func() {
				for i := range rounds {
					l.pay(self, fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(self.name, " ", "-"), w, i))
					madeSoFar, theirs := l.snapshot(other.name)
					if len(theirs) > 0 {
						l.refund(self, theirs[(w+i)%len(theirs)], fmt.Sprintf("refund-%s-%d-%d", strings.ReplaceAll(self.name, " ", "-"), w, i))
					}
					for j := i % 3; j < len(madeSoFar); j += rounds / 2 {
						l.replay(self, madeSoFar[j])
					}
				}
			})
		}
	}
	wg.Wait()
	l.check(t)

	// A reference held by one version's payment, claimed under a new key
	// on the other: 409 naming the holder, from either side.
	for _, pair := range [][2]*apiProcess{{oldAPI, newAPI}, {newAPI, oldAPI}} {
		holder, claimer := pair[0], pair[1]
		_, theirs := l.snapshot(holder.name)
		var held struct{ MerchantReference string }
		g, err := holder.get("/payments/" + theirs[0])
		if err != nil || json.Unmarshal(g, &held) != nil || held.MerchantReference == "" {
			t.Fatalf("%s: GET payment %s: %v %s", holder.name, theirs[0], err, g)
		}
		a, err := claimer.post("/payments", "dup-"+strings.ReplaceAll(claimer.name, " ", "-"), paymentBody(held.MerchantReference))
		var problem struct{ Code, PaymentID string }
		if err != nil || a.status != http.StatusConflict || json.Unmarshal(a.body, &problem) != nil ||
			problem.Code != "DUPLICATE_MERCHANT_REFERENCE" || problem.PaymentID != theirs[0] {
			t.Errorf("%s: a reference %s's payment holds: %d %s %v; want 409 DUPLICATE_MERCHANT_REFERENCE %s",
				claimer.name, holder.name, a.status, a.body, err, theirs[0])
		}
	}

	// The upgrade is over: the current release alone replays every key.
	recStop(t, oldAPI.cmd)
	all, _ := l.snapshot("")
	for _, m := range all {
		l.replay(newAPI, m)
	}
	l.check(t)
	t.Logf("%d payments and refunds made; each replayed by the current release after the upgrade", len(all))
}

func (p *apiProcess) get(path string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, p.url+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+upgradeSecret)
	resp, err := upgradeClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%d", resp.StatusCode)
	}
	return b, err
}
