// Package typescript_test runs the TypeScript client's tests (node --test)
// in `make test`: against a real server on a real PostgreSQL, whose URLs it
// passes to them, after `npm ci` when the lockfile changed. Without node it
// skips, unless REQUIRE_NODE=1 (CI) makes that a failure.
package typescript_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// needNode returns the path of node, after installing the package's locked
// dependencies if node_modules does not hold them yet.
func needNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	npm, errNPM := exec.LookPath("npm")
	if err != nil || errNPM != nil {
		if os.Getenv("REQUIRE_NODE") == "1" {
			t.Fatal("node and npm are required (REQUIRE_NODE=1) but not found")
		}
		t.Skip("node or npm not found: the TypeScript client's tests are skipped")
	}
	// npm ci only when the lockfile differs from the one installed: it
	// takes seconds, and the tests run offline once it is done.
	lock, err := os.ReadFile("package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	stamp := filepath.Join("node_modules", ".paymentsapi-lock-sha256")
	if got, _ := os.ReadFile(stamp); string(got) != hex.EncodeToString(sum[:]) {
		run(t, 3*time.Minute, npm, "ci", "--no-audit", "--no-fund")
		if err := os.WriteFile(stamp, []byte(hex.EncodeToString(sum[:])), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return node
}

// run runs a command in this directory with env added, failing the test
// with its output when it fails.
func run(t *testing.T, timeout time.Duration, name string, args ...string) {
	t.Helper()
	runEnv(t, timeout, nil, name, args...)
}

func runEnv(t *testing.T, timeout time.Duration, env []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out.String())
	}
	t.Logf("%s %v:\n%s", name, args, out.String())
}

func TestTheTypeScriptClientPassesItsTestsAgainstARealServer(t *testing.T) {
	node := needNode(t)
	e := servicetest.New(t, servicetest.WithClock(clock.System{}))

	// A delivery signed by the service's own signer, for the client's
	// verifier: the secret of the endpoint and the one it rotates to.
	secret, second := mustSecret(t), mustSecret(t)
	body := `{"type":"payment.succeeded","timestamp":"2026-11-22T12:00:00Z","data":{"paymentId":"pay_1","amount":"10.00","currency":"EUR"}}`
	h, err := outbound.Sign("msg_2Lh9Sx5kQ1", time.Now(), []byte(body), secret, second)
	if err != nil {
		t.Fatal(err)
	}
	signed, _ := json.Marshal(map[string]any{
		"secret": secret, "secondSecret": second, "body": body,
		"headers": map[string]string{
			"webhook-id": h.Get(outbound.HeaderID), "webhook-timestamp": h.Get(outbound.HeaderTimestamp),
			"webhook-signature": h.Get(outbound.HeaderSignature),
		},
	})

	// The JSDoc types of the client hold against the generated ones.
	run(t, time.Minute, node, "node_modules/typescript/bin/tsc", "-p", ".")

	runEnv(t, 2*time.Minute, []string{
		"PAYMENTSAPI_URL=" + e.URL, "PAYMENTSAPI_SIM_URL=" + e.SimURL, "PAYMENTSAPI_KEY=" + servicetest.SecretA,
		"PAYMENTSAPI_SIGNED_WEBHOOK=" + string(signed),
	}, node, "--test", "--test-reporter=spec", "test/")
}

func mustSecret(t *testing.T) string {
	t.Helper()
	s, err := outbound.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
