package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/proctest"
)

// startServer runs the server in-process on env until the test ends, and
// returns its base URL and what it logged.
func startServer(t *testing.T, env map[string]string) (string, *proctest.LineWatcher) {
	t.Helper()
	stdout, stderr := proctest.NewLineWatcher(), proctest.NewLineWatcher()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-http-addr", "127.0.0.1:0"}, func(k string) string { return env[k] }, nil, stdout, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	base, _ := stdout.Await(t, proctest.ListeningRE, 90*time.Second)
	return base, stderr
}

// An operator creates several keys for a tenant, lists them without their
// secrets, and revokes one: every instance refuses it within 10 s, and an
// instance started later with an old API_KEYS naming it refuses it too.
func TestKeysAreCreatedListedAndRevokedForGood(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := map[string]string{
		"DATABASE_URL": pgtest.NewURL(t), "PROVIDER": "sim", "PROVIDER_SIM_IN_PROCESS": "true",
		"API_KEY_PEPPER": "a-pepper-of-at-least-thirty-two-characters", "API_KEYS": "demo:sk_bootstrap_of_more_than_24_chars",
		"LOG_LEVEL": "warn",
	}
	keys := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"keys"}, args...), func(k string) string { return env[k] }, nil, &out, &errOut)
		return out.String(), err
	}
	base, _ := startServer(t, env)
	status := func(secret string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/payments/pay_none", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}

	var created []struct{ ID, Tenant, Secret string }
	for _, args := range [][]string{{"create", "demo"}, {"create", "demo", "-test"}} {
		out, err := keys(args...)
		var k struct{ ID, Tenant, Secret string }
		if err != nil || json.Unmarshal([]byte(out), &k) != nil || k.Tenant != "demo" || k.ID == "" {
			t.Fatalf("keys %v: %q %v", args, out, err)
		}
		created = append(created, k)
	}
	if !strings.HasPrefix(created[0].Secret, "sk_live_") || !strings.HasPrefix(created[1].Secret, "sk_test_") {
		t.Errorf("secrets %q and %q: want sk_live_ and sk_test_", created[0].Secret, created[1].Secret)
	}
	list, err := keys("list", "demo")
	if err != nil || strings.Count(list, "\n") != 3 || strings.Contains(list, created[0].Secret) || strings.Contains(list, "sk_") {
		t.Errorf("keys list demo: %q %v; want 3 keys and no secret", list, err)
	}
	for _, k := range created {
		if s := status(k.Secret); s != http.StatusNotFound {
			t.Fatalf("a created key: %d, want it accepted (404 for an unknown payment)", s)
		}
	}

	if _, err := keys("revoke", created[0].ID); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for status(created[0].Secret) != http.StatusUnauthorized {
		if time.Since(revoked) > 11*time.Second {
			t.Fatalf("the revoked key is still accepted %s after its revocation", time.Since(revoked))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if s := status(created[1].Secret); s != http.StatusNotFound {
		t.Errorf("the tenant's other key after the revocation: %d", s)
	}
	if _, err := keys("revoke", "key_unknown"); err == nil || !strings.Contains(err.Error(), "key_unknown") {
		t.Errorf("keys revoke of an unknown id: %v", err)
	}

	// Another instance, with an old configuration naming the revoked
	// secret, and one too short to be safe.
	old := map[string]string{}
	for k, v := range env {
		old[k] = v
	}
	old["API_KEYS"] = "demo:" + created[0].Secret + ",acme:sk_short"
	base, logged := startServer(t, old)
	if s := status(created[0].Secret); s != http.StatusUnauthorized {
		t.Errorf("the revoked key on an instance started with it in API_KEYS: %d, want 401", s)
	}
	line, _ := logged.Await(t, regexp.MustCompile(`.*short secret.*`), 10*time.Second)
	if !strings.Contains(line, `"tenant":"acme"`) || strings.Contains(line, "sk_short") {
		t.Errorf("the short secret's warning: %s", line)
	}
}

// In dev mode the pepper is generated once and kept in the data
// directory: the demo database's keys keep working after a restart.
func TestTheDevPepperIsKeptInTheDataDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, err := devPepper(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := devPepper(dir)
	if err != nil || again != first || len(first) < apikeys.MinPepperLength {
		t.Errorf("pepper %q then %q (%v): want one of at least 32 characters, kept", first, again, err)
	}
	info, err := os.Stat(filepath.Join(dir, "api_key_pepper"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("pepper file: %v %v, want mode 0600", info, err)
	}
}
