package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/config"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/proctest"
)

// e2eSecretsKey is the SECRETS_KEY of the servers the tests start outside
// dev mode that register webhook endpoints: the base64 of 32 bytes.
const e2eSecretsKey = "cGF5bWVudHNhcGktZTJlLXRlc3Qtc2VjcmV0cy1rZXk="

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var (
	simChargesRE = regexp.MustCompile(`(http://\S+/_sim/charges)`)
	dashboardRE  = regexp.MustCompile(`^dashboard: (http://\S+/dashboard/) \(the login form is filled in with the demo key\)`)
)

func tempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// The embedded PostgreSQL runs as the postgres account when tests run as
	// root: it must be able to enter the directory and its parent (t.TempDir
	// makes both 0700).
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The zero-configuration path of `make run`: embedded PostgreSQL, in-process
// simulator, demo key; and the curl command it prints works as printed.
func TestRunDevModeWithZeroConfiguration(t *testing.T) {
	dataDir := filepath.Join(tempDir(t), ".data")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr := proctest.NewLineWatcher(), proctest.NewLineWatcher()
	env := map[string]string{} // nothing set: dev mode
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-http-addr", "127.0.0.1:0", "-data-dir", dataDir},
			getenv(env), nil, stdout, stderr)
	}()
	base, _ := stdout.Await(t, proctest.ListeningRE, 90*time.Second)

	for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml"} {
		resp, err := http.Get(base + path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}

	// The banner's curl command, run as printed (twice: the second is a replay).
	var banner []string
	var simChargesURL, dashboardURL string
	collecting := false
	deadline := time.After(5 * time.Second)
	for len(banner) == 0 || strings.HasSuffix(banner[len(banner)-1], `\`) {
		select {
		case line := <-stdout.Lines():
			if m := simChargesRE.FindStringSubmatch(line); m != nil {
				simChargesURL = m[1]
			}
			if m := dashboardRE.FindStringSubmatch(line); m != nil {
				dashboardURL = m[1]
			}
			if strings.HasPrefix(line, "curl ") {
				collecting = true
			}
			if collecting {
				banner = append(banner, line)
			}
		case <-deadline:
			t.Fatalf("no curl command in the banner")
		}
	}
	if simChargesURL == "" {
		t.Fatal("the banner names no /_sim/charges URL of the in-process simulator")
	}
	// The banner names the dashboard, whose login form dev mode fills in
	// with the demo key.
	if dashboardURL != base+"/dashboard/" {
		t.Fatalf("the banner names the dashboard at %q, want %s/dashboard/", dashboardURL, base)
	}
	if resp, err := http.Get(dashboardURL + "login"); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`value="sk_test_demo"`)) {
			t.Fatalf("the dashboard's login form in dev mode: %d, not filled in with the demo key:\n%s", resp.StatusCode, b)
		}
	}
	command := strings.Join(banner, "\n")
	if !strings.Contains(command, base) || !strings.Contains(command, "sk_test_demo") {
		t.Fatalf("banner command does not target this server with the demo key:\n%s", command)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Log("curl is not installed: sending the banner's request with net/http instead")
		command = ""
	}
	var first, second []byte
	for i, out := range []*[]byte{&first, &second} {
		if command != "" {
			b, err := exec.Command("sh", "-c", strings.Replace(command, "curl -i", "curl -s -i", 1)).Output()
			if err != nil {
				t.Fatalf("banner command #%d: %v", i+1, err)
			}
			*out = b
			continue
		}
		req, _ := http.NewRequest("POST", base+"/payments", strings.NewReader(
			`{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"invoice-1","paymentMethod":"pm_card_visa"}`))
		req.Header.Set("Authorization", "Bearer sk_test_demo")
		req.Header.Set("Idempotency-Key", "demo-order-1")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		*out = []byte(resp.Status + "\n" + resp.Header.Get("Idempotent-Replayed") + "\n" + string(b))
	}
	if !bytes.Contains(first, []byte("201")) || !bytes.Contains(first, []byte(`"status":"SUCCEEDED"`)) {
		t.Fatalf("first banner request:\n%s", first)
	}
	if !bytes.Contains(bytes.ToLower(second), []byte("idempotent-replayed: true")) && !bytes.Contains(second, []byte("\ntrue\n")) {
		t.Fatalf("second banner request is not a replay:\n%s", second)
	}

	// The banner names the in-process simulator's page of charges, which
	// holds the one charge both requests made.
	var charges struct {
		Charges []struct {
			IdempotencyKey string `json:"idempotencyKey"`
		} `json:"charges"`
	}
	resp, err := http.Get(simChargesURL)
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&charges)
	resp.Body.Close()
	if err != nil || len(charges.Charges) != 1 {
		t.Errorf("GET %s (the banner's): %d charges, %v; want the one the banner's request made", simChargesURL, len(charges.Charges), err)
	}

	stopRun(t, cancel, done)
	// The data stays for the next run, and out of git whatever its name.
	if _, err := os.Stat(filepath.Join(dataDir, "postgres", "PG_VERSION")); err != nil {
		t.Errorf("embedded data dir not kept under %s: %v", dataDir, err)
	}
	if b, err := os.ReadFile(filepath.Join(dataDir, ".gitignore")); err != nil || !strings.Contains(string(b), "\n*\n") {
		t.Errorf("the data dir's .gitignore: %q, %v; want one that ignores everything (*)", b, err)
	}
}

// stopRun ends the context of a run started in-process (cancel) and waits
// for it to return (on done), failing the test if it returned an error or
// did not return within a minute.
func stopRun(t *testing.T, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}

func TestRunRefusesALeaseShorterThanTheProviderTimeout(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://unused", "LEASE_DURATION": "5s", "PROVIDER_TIMEOUT": "5s"}
	err := run(context.Background(), nil, getenv(env), nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "LEASE_DURATION") {
		t.Fatalf("got %v, want a LEASE_DURATION error", err)
	}
}

// Outside dev mode the server refuses to start without a named provider,
// before it touches the database.
func TestRunRefusesAServerWithoutANamedProvider(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}
	err := run(context.Background(), nil, func(k string) string { return env[k] }, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "PROVIDER must be named") {
		t.Fatalf("got %v, want a refusal naming PROVIDER", err)
	}
}

type httpResult struct {
	status int
	header http.Header
	body   []byte
}

func call(t *testing.T, method, url, secret, key, body string) httpResult {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return httpResult{resp.StatusCode, resp.Header, b}
}

// The real binaries, as separate processes, driven over HTTP: the API on a
// real database, the provider simulator in its own process.
func TestEndToEndWithRealBinaries(t *testing.T) {
	apiBin, simBin := proctest.Binaries(t)
	_, simURL := proctest.Start(t, simBin, nil, "-addr", "127.0.0.1:0", "-slow", "200ms")
	api, apiURL := proctest.Start(t, apiBin, []string{
		"DATABASE_URL=" + pgtest.NewURL(t), "PROVIDER=sim", "PROVIDER_URL=" + simURL,
		"API_KEYS=e2e:sk_e2e", "HTTP_ADDR=127.0.0.1:0",
	})

	paid := `{"accountId":"acc_e2e","amount":"25.50","currency":"eur","merchantReference":"order-1","paymentMethod":"pm_sim_slow"}`
	first := call(t, "POST", apiURL+"/payments", "sk_e2e", "e2e-1", paid)
	if first.status != http.StatusCreated {
		t.Fatalf("create: %d %s", first.status, first.body)
	}
	replay := call(t, "POST", apiURL+"/payments", "sk_e2e", "e2e-1", paid)
	if replay.status != http.StatusCreated || !bytes.Equal(replay.body, first.body) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v %s", replay.status, replay.header, replay.body)
	}
	declined := call(t, "POST", apiURL+"/payments", "sk_e2e", "e2e-2",
		`{"accountId":"acc_e2e","amount":"5","currency":"EUR","merchantReference":"order-2","paymentMethod":"pm_card_chargeDeclined"}`)
	if declined.status != http.StatusPaymentRequired {
		t.Fatalf("decline: %d %s", declined.status, declined.body)
	}
	if r := call(t, "POST", apiURL+"/payments", "sk_nope", "e2e-3", paid); r.status != http.StatusUnauthorized {
		t.Fatalf("bad key: %d", r.status)
	}
	var p struct{ PaymentID, Amount string }
	if err := json.Unmarshal(first.body, &p); err != nil || p.Amount != "25.50" {
		t.Fatalf("payment %s: %v", first.body, err)
	}
	if g := call(t, "GET", apiURL+"/payments/"+p.PaymentID, "sk_e2e", "", ""); g.status != http.StatusOK {
		t.Fatalf("GET: %d %s", g.status, g.body)
	}
	if m := call(t, "GET", apiURL+"/metrics", "", "", ""); !bytes.Contains(m.body, []byte("paymentsapi_idempotency_replays_total 1")) {
		t.Errorf("metrics do not show the replay")
	}

	// Money moved exactly once per payment, as the provider itself reports.
	var charges struct {
		Charges []struct {
			IdempotencyKey, Amount, Status string
			RequestCount                   int
		}
	}
	s := call(t, "GET", simURL+"/_sim/charges", "", "", "")
	if err := json.Unmarshal(s.body, &charges); err != nil {
		t.Fatal(err)
	}
	if len(charges.Charges) != 2 || charges.Charges[0].RequestCount != 1 || charges.Charges[0].Amount != "25.50" ||
		!strings.Contains(charges.Charges[0].IdempotencyKey, p.PaymentID) {
		t.Errorf("provider charges: %s", s.body)
	}

	if err := api.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := api.Wait(); err != nil {
		t.Errorf("API did not exit cleanly on SIGTERM: %v", err)
	}
}

// The banner says which provider the service calls (the in-process
// simulator, the simulator at PROVIDER_URL, or Stripe), and in dev mode
// where its database is.
func TestBannerNamesTheProviderAndTheDevDatabase(t *testing.T) {
	for _, c := range []struct {
		cfg    config.Config
		simURL string
		want   []string
	}{
		{config.Config{Provider: "sim"}, "http://127.0.0.1:9999", []string{
			"provider: the in-process provider simulator at http://127.0.0.1:9999", "http://127.0.0.1:9999/_sim/charges",
			"database: postgres://dev"}},
		{config.Config{Provider: "sim", ProviderURL: "http://127.0.0.1:8081"}, "", []string{"provider: the provider simulator at http://127.0.0.1:8081"}},
		{config.Config{Provider: "stripe", StripeAPIBase: "http://127.0.0.1:12111", DatabaseURL: "postgres://db"}, "", []string{"provider: Stripe's API at http://127.0.0.1:12111"}},
	} {
		var b strings.Builder
		printBanner(&b, c.cfg, banner{base: "http://127.0.0.1:8080", dataDir: "/data", devURL: "postgres://dev", simURL: c.simURL})
		for _, w := range c.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("banner for %+v lacks %q:\n%s", c.cfg, w, b.String())
			}
		}
		if c.cfg.ProviderURL != "" || c.cfg.Provider == "stripe" {
			if strings.Contains(b.String(), "in-process") {
				t.Errorf("banner for %+v says in-process:\n%s", c.cfg, b.String())
			}
		}
	}
}

// getenv is a server's environment in a test: env, and, unless env names
// it, OUTBOX_RELAY from the test's own environment, so that
// `OUTBOX_RELAY=poll go test ./cmd/paymentsapi` runs every server on the
// poller (the binaries the tests start inherit it too).
func getenv(env map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := env[k]; ok || k != "OUTBOX_RELAY" {
			return v
		}
		return os.Getenv(k)
	}
}

// `paymentsapi -h` lists every command beside the flags, so that a
// newcomer finds the operator's commands without reading the code.
func TestHelpListsTheCommands(t *testing.T) {
	var stderr strings.Builder
	err := run(context.Background(), []string{"-h"}, getenv(map[string]string{}), nil, io.Discard, &stderr)
	if !errors.Is(err, errUsage) {
		t.Fatalf("run -h: %v; want errUsage", err)
	}
	for _, command := range []string{"[serve]", "migrate", "reconcile", "outbox parked", "outbox replay", "orphans", "keys create", "audit"} {
		if !strings.Contains(stderr.String(), "paymentsapi "+command) {
			t.Errorf("-h does not list paymentsapi %s:\n%s", command, stderr.String())
		}
	}
	if !strings.Contains(stderr.String(), "-database-url") {
		t.Errorf("-h lists no flags:\n%s", stderr.String())
	}
}
