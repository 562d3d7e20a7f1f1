package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/operators"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

const operatorSecret = "sk_operator_alice_0123456789abcdef"

// withOperators makes alice an operator (OPERATOR_KEYS), and lets
// webhook endpoints point at loopback over http.
func withOperators(t testing.TB) servicetest.Option {
	ops, err := operators.Parse("alice:" + operatorSecret)
	if err != nil {
		t.Fatal(err)
	}
	return servicetest.WithDeps(func(d *httpapi.Deps) { d.Operators = ops })
}

// auditEvents is GET /audit-events with secret and query.
func (e *env) auditEvents(secret, query string) (response, []map[string]any, string) {
	e.T.Helper()
	r := e.Get(secret, "/audit-events"+query)
	if r.Status != http.StatusOK {
		return r, nil, ""
	}
	var page struct {
		Items      []map[string]any `json:"items"`
		NextCursor string           `json:"nextCursor"`
	}
	if err := json.Unmarshal(r.Body, &page); err != nil {
		e.T.Fatal(err)
	}
	return r, page.Items, page.NextCursor
}

// An endpoint created, rotated and deleted by a tenant's key is in the
// audit log, each change naming the key and its request; only an operator
// reads it (a tenant's key is refused 403, no key 401), a page at a time.
func TestTheAuditLogHoldsEndpointChangesForOperatorsOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOperators(t))
	_, _, keyA := e.SecondKey()
	send := func(method, path, key, requestID, body string) response {
		t.Helper()
		h := map[string]string{"Authorization": "Bearer " + secretA, "X-Request-Id": requestID}
		if key != "" {
			h["Idempotency-Key"] = key
		}
		if body != "" {
			h["Content-Type"] = "application/json"
		}
		e.Clock.Advance(time.Second) // the log's order is its events' times
		return e.Do(method, path, []byte(body), h)
	}
	created := send("POST", "/webhook-endpoints", "k-ep", "req-ep-create", `{"url":"http://127.0.0.1:9/hook"}`)
	if created.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", created.Status, created.Body)
	}
	id := created.JSON(t)["endpointId"].(string)
	if r := send("POST", "/webhook-endpoints", "k-ep", "req-ep-retry", `{"url":"http://127.0.0.1:9/hook"}`); r.Status != http.StatusCreated {
		t.Fatalf("the create's retry: %d %s", r.Status, r.Body)
	}
	if r := send("POST", "/webhook-endpoints/"+id+"/rotate-secret", "k-rot", "req-ep-rotate", ""); r.Status != http.StatusOK {
		t.Fatalf("rotate: %d %s", r.Status, r.Body)
	}
	if r := send("DELETE", "/webhook-endpoints/"+id, "", "req-ep-delete", ""); r.Status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}

	if r, _, _ := e.auditEvents(secretA, ""); r.Status != http.StatusForbidden || r.JSON(t)["code"] != "OPERATORS_ONLY" {
		t.Errorf("a tenant's key: %d %s, want 403 OPERATORS_ONLY", r.Status, r.Body)
	}
	if r, _, _ := e.auditEvents("", ""); r.Status != http.StatusUnauthorized {
		t.Errorf("no key: %d %s, want 401", r.Status, r.Body)
	}
	if r, _, _ := e.auditEvents(operatorSecret, "?page=2"); r.Status != http.StatusBadRequest {
		t.Errorf("an unknown parameter: %d %s, want 400", r.Status, r.Body)
	}

	r, first, cursor := e.auditEvents(operatorSecret, "?limit=2")
	if r.Status != http.StatusOK || len(first) != 2 || cursor == "" {
		t.Fatalf("the first page: %d %s", r.Status, r.Body)
	}
	_, rest, last := e.auditEvents(operatorSecret, "?limit=2&cursor="+cursor)
	if len(rest) != 1 || last != "" {
		t.Fatalf("the second page: %v, cursor %q", rest, last)
	}
	var got []string
	for _, ev := range append(first, rest...) {
		got = append(got, fmt.Sprintf("%s %s %s %s %s", ev["action"], ev["actor"], ev["requestId"], ev["tenantId"], ev["targetId"]))
	}
	who := actor.API(keyA)
	want := []string{
		"webhook_endpoint.deleted " + who + " req-ep-delete tenant_a " + id,
		"webhook_endpoint.secret_rotated " + who + " req-ep-rotate tenant_a " + id,
		"webhook_endpoint.created " + who + " req-ep-create tenant_a " + id,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the audit log, newest first:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, only, _ := e.auditEvents(operatorSecret, "?action=webhook_endpoint.created&tenantId=tenant_a"); len(only) != 1 {
		t.Errorf("filtered by action and tenant: %v", only)
	}
}

// An endpoint's deletion and its audit record commit together: when the
// record cannot be written, the endpoint is not deleted either.
func TestAnEndpointIsNotDeletedWithoutItsAuditRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := map[string]string{"Authorization": "Bearer " + secretA, "Content-Type": "application/json", "Idempotency-Key": "k-ep"}
	created := e.Do("POST", "/webhook-endpoints", []byte(`{"url":"http://127.0.0.1:9/hook"}`), h)
	if created.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", created.Status, created.Body)
	}
	id := created.JSON(t)["endpointId"].(string)
	// The audit log refuses the deletion's record, as a full disk or a
	// lost connection between the two writes would.
	if _, err := e.Pool.Exec(context.Background(), `
		CREATE FUNCTION refuse_deletion_records() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF NEW.action = 'webhook_endpoint.deleted' THEN RAISE EXCEPTION 'no room for this record'; END IF;
		    RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_deletion_records BEFORE INSERT ON audit_events
		FOR EACH ROW EXECUTE FUNCTION refuse_deletion_records()`); err != nil {
		t.Fatal(err)
	}
	auth := map[string]string{"Authorization": "Bearer " + secretA}
	if r := e.Do("DELETE", "/webhook-endpoints/"+id, nil, auth); r.Status < 500 {
		t.Fatalf("a delete whose record cannot be written: %d %s, want a server error", r.Status, r.Body)
	}
	if r := e.Do("GET", "/webhook-endpoints/"+id, nil, auth); r.Status != http.StatusOK {
		t.Errorf("the endpoint after the failed delete: %d %s, want it still there", r.Status, r.Body)
	}
}

// logBuffer collects the JSON log lines of a server, safe for its
// goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// requests returns the request log lines ("http request").
func (b *logBuffer) requests(t testing.TB) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
		if m["msg"] == "http request" {
			out = append(out, m)
		}
	}
	return out
}

// withLogAndProxies logs the HTTP API into logs, and trusts proxies.
func withLogAndProxies(logs *logBuffer, proxies ...string) servicetest.Option {
	var trusted []netip.Prefix
	for _, p := range proxies {
		trusted = append(trusted, netip.MustParsePrefix(p))
	}
	return servicetest.WithDeps(func(d *httpapi.Deps) {
		d.Log = logging.New(logs, "info")
		d.TrustedProxies = trusted
	})
}

// A request's log line names its client's address, its user agent and
// the id of its key, never its secret. X-Forwarded-For is believed only
// from a trusted proxy, and then its rightmost address that no trusted
// proxy holds is the client.
func TestRequestLogsNameTheClientAndTheKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		proxies []string
		want    string
	}{
		{"no trusted proxy", nil, "127.0.0.1"},
		{"the peer is a trusted proxy", []string{"127.0.0.0/8", "10.0.0.0/8"}, "198.51.100.7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			logs := &logBuffer{}
			e := newEnv(t, withLogAndProxies(logs, c.proxies...))
			_, _, keyA := e.SecondKey()
			r := e.Do("GET", "/payments", nil, map[string]string{
				"Authorization": "Bearer " + secretA, "User-Agent": "audit-test/1.0",
				// A client's own claim, the client a proxy saw, then a
				// trusted proxy of the chain.
				"X-Forwarded-For": "203.0.113.66, 198.51.100.7, 10.1.2.3",
			})
			if r.Status != http.StatusOK {
				t.Fatalf("list: %d %s", r.Status, r.Body)
			}
			lines := logs.requests(t)
			if len(lines) != 1 {
				t.Fatalf("%d request log lines, want 1", len(lines))
			}
			l := lines[0]
			if l["client_addr"] != c.want || l["user_agent"] != "audit-test/1.0" || l["key_id"] != keyA || l["tenant"] != "tenant_a" {
				t.Errorf("the request's log line: %v; want client_addr %s, its user agent, key_id %s", l, c.want, keyA)
			}
			if strings.Contains(fmt.Sprint(l), secretA) {
				t.Errorf("the log line holds the secret: %v", l)
			}
		})
	}
}

// The throttle of failed authentication counts the client a trusted proxy
// names: one client's failures behind the proxy do not refuse another's.
// From an untrusted peer, X-Forwarded-For changes nothing: a client cannot
// escape the throttle by naming another address.
func TestTheThrottleCountsTheClientATrustedProxyNames(t *testing.T) {
	t.Parallel()
	get := func(e *env, secret, forwardedFor string) response {
		return e.Do("GET", "/payments", nil, map[string]string{"Authorization": "Bearer " + secret, "X-Forwarded-For": forwardedFor})
	}
	behind := newEnv(t, withLogAndProxies(&logBuffer{}, "127.0.0.0/8"))
	for range 20 {
		get(behind, "sk_guess", "203.0.113.9")
	}
	if r := get(behind, secretA, "203.0.113.9"); r.Status != http.StatusTooManyRequests {
		t.Errorf("the client that failed 20 times: %d, want 429", r.Status)
	}
	if r := get(behind, secretA, "198.51.100.4"); r.Status != http.StatusOK {
		t.Errorf("another client behind the same proxy: %d %s, want 200", r.Status, r.Body)
	}

	direct := newEnv(t, withLogAndProxies(&logBuffer{}))
	for i := range 20 {
		get(direct, "sk_guess", fmt.Sprintf("203.0.113.%d", i))
	}
	if r := get(direct, secretA, "198.51.100.4"); r.Status != http.StatusTooManyRequests {
		t.Errorf("an untrusted peer naming another address: %d, want 429", r.Status)
	}
}
