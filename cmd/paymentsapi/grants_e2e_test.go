package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/proctest"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

// permissionDenied matches what PostgreSQL says when a role lacks a right.
var permissionDenied = regexp.MustCompile(`permission denied|must be owner|must be superuser|42501`)

// The whole service runs as a role that has exactly the grants
// docs/operations.md lists, and no REPLICATION, with MIGRATE=false, on a
// database its owner migrated with `paymentsapi migrate`: payments, a
// refund, a manual capture, a payment the reconciler resolves, the relay
// publishing events, a webhook delivered, the event log, readiness,
// metrics and clean-up, without one permission error. The grants are run
// on a database of an older release, before the owner migrates it on, so
// that they are proven on the tables that existed and on those later
// migrations created.
func TestTheServiceRunsUnderTheDocumentedGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const grantedAt = 30
	ownerURL := pgtest.NewPoolAt(t, grantedAt).Config().ConnString()
	// No role attributes: without REPLICATION the relay chooses the
	// polling reader (OUTBOX_RELAY=auto), which needs only the documented
	// grants; the stream's REPLICATION is an option, not a need.
	appURL := pgtest.URLAsApplicationRole(t, ownerURL, "")
	if err := run(ctx, []string{"migrate"}, func(k string) string {
		return map[string]string{"DATABASE_URL": ownerURL, "LOG_LEVEL": "warn"}[k]
	}, nil, io.Discard, io.Discard); err != nil {
		t.Fatalf("paymentsapi migrate as the owner: %v", err)
	}
	if _, err := recPool(t, appURL).Exec(ctx, `CREATE TABLE outside_the_grants ()`); err == nil {
		t.Fatal("the application role may create a table: it has more than the documented grants")
	}

	var delivered atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()
	stdout, stderr := proctest.NewLineWatcher(), &testio.SyncBuffer{}
	published := &testio.SyncBuffer{}
	env := map[string]string{
		"DATABASE_URL": appURL, "MIGRATE": "false", "HTTP_ADDR": "127.0.0.1:0", "PROVIDER": "sim", "PROVIDER_SIM_IN_PROCESS": "true",
		"API_KEYS": recTenant + ":" + recSecret, "PROVIDER_TIMEOUT": "1s", "LEASE_DURATION": "2s",
		"RECONCILE_INTERVAL": "200ms", "CLEANUP_INTERVAL": "500ms",
		"WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_ALLOW_PRIVATE": "true", "SECRETS_KEY": e2eSecretsKey,
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, nil, func(k string) string { return env[k] }, nil, io.MultiWriter(stdout, published), stderr)
	}()
	base, _ := stdout.Await(t, proctest.ListeningRE, 60*time.Second)
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := call(t, "GET", base+path, "", "", ""); r.status != http.StatusOK {
			t.Fatalf("GET %s as the application role: %d %s", path, r.status, r.body)
		}
	}

	if r := call(t, "POST", base+"/webhook-endpoints", recSecret, "grants-hook", `{"url":"`+receiver.URL+`/hook"}`); r.status != http.StatusCreated {
		t.Fatalf("register a webhook endpoint: %d %s", r.status, r.body)
	}
	pay := grantsPost(t, base+"/payments", "grants-pay", http.StatusCreated,
		`{"accountId":"acc_grants","amount":"10.00","currency":"EUR","merchantReference":"grants-1","paymentMethod":"pm_card_visa"}`)
	grantsPost(t, base+"/payments/"+pay.PaymentID+"/refunds", "grants-refund", http.StatusCreated, `{"amount":"3.00"}`)
	manual := grantsPost(t, base+"/payments", "grants-manual", http.StatusCreated,
		`{"accountId":"acc_grants","amount":"8.00","currency":"EUR","merchantReference":"grants-2","paymentMethod":"pm_card_visa","captureMethod":"manual"}`)
	if captured := grantsPost(t, base+"/payments/"+manual.PaymentID+"/capture", "grants-capture", http.StatusOK, `{}`); captured.Status != "SUCCEEDED" {
		t.Errorf("captured payment: %+v", captured)
	}
	lost := grantsPost(t, base+"/payments", "grants-lost", http.StatusAccepted,
		`{"accountId":"acc_grants","amount":"5.00","currency":"EUR","merchantReference":"grants-3","paymentMethod":"pm_sim_timeout_after_success"}`)
	recWaitFor(t, 30*time.Second, "the reconciler's resolution of the lost answer", func(context.Context) (bool, error) {
		r := call(t, "GET", base+"/payments/"+lost.PaymentID, recSecret, "", "")
		return r.status == http.StatusOK && recDecodePayment(t, r.body).Status == "SUCCEEDED", nil
	})
	recWaitFor(t, 30*time.Second, "the relay's publication of the payments' events", func(context.Context) (bool, error) {
		out := published.String()
		return strings.Contains(out, pay.PaymentID) && strings.Contains(out, lost.PaymentID), nil
	})
	recWaitFor(t, 30*time.Second, "a webhook delivery", func(context.Context) (bool, error) { return delivered.Load() > 0, nil })
	for _, path := range []string{"/events", "/payments"} {
		if r := call(t, "GET", base+path, recSecret, "", ""); r.status != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, r.status, r.body)
		}
	}
	if r := call(t, "GET", base+"/metrics", "", "", ""); r.status != http.StatusOK || !strings.Contains(string(r.body), "paymentsapi_table_size_bytes") {
		t.Errorf("GET /metrics: %d", r.status)
	}
	time.Sleep(time.Second) // a clean-up pass or two (CLEANUP_INTERVAL)

	stopRun(t, stop, done)
	for line := range strings.Lines(stderr.String()) {
		if permissionDenied.MatchString(line) {
			t.Errorf("a permission error as the application role: %s", line)
		}
	}
}

// grantsPost sends a create (or capture) with key to url and checks that it
// answers want.
func grantsPost(t *testing.T, url, key string, want int, body string) recPaymentBody {
	t.Helper()
	r, err := recPostTo(url, key, body, nil)
	if err != nil || r.status != want {
		t.Fatalf("POST %s: %v %d %s, want %d", url, err, r.status, r.body, want)
	}
	return recDecodePayment(t, r.body)
}

// docker-compose.yml's database grants its application role what
// docs/operations.md lists, every statement of it, as the owner.
func TestComposeGrantsTheDocumentedGrants(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("../../dev/postgres-init/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	_, asOwner, found := strings.Cut(string(script), "SET ROLE paymentsapi_owner;")
	if !found {
		t.Fatal("dev/postgres-init/roles.sql does not grant as paymentsapi_owner")
	}
	for _, q := range pgtest.DocumentedGrants(t, "paymentsapi_app") {
		if !strings.Contains(asOwner, q+";") {
			t.Errorf("dev/postgres-init/roles.sql lacks, as the owner: %s", q)
		}
	}
}
