package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

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
			e := servicetest.New(t, withLogAndProxies(logs, c.proxies...))
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
	get := func(e *servicetest.Env, secret, forwardedFor string) servicetest.Response {
		return e.Do("GET", "/payments", nil, map[string]string{"Authorization": "Bearer " + secret, "X-Forwarded-For": forwardedFor})
	}
	behind := servicetest.New(t, withLogAndProxies(&logBuffer{}, "127.0.0.0/8"))
	for range 20 {
		get(behind, "sk_guess", "203.0.113.9")
	}
	if r := get(behind, secretA, "203.0.113.9"); r.Status != http.StatusTooManyRequests {
		t.Errorf("the client that failed 20 times: %d, want 429", r.Status)
	}
	if r := get(behind, secretA, "198.51.100.4"); r.Status != http.StatusOK {
		t.Errorf("another client behind the same proxy: %d %s, want 200", r.Status, r.Body)
	}

	direct := servicetest.New(t, withLogAndProxies(&logBuffer{}))
	for i := range 20 {
		get(direct, "sk_guess", fmt.Sprintf("203.0.113.%d", i))
	}
	if r := get(direct, secretA, "198.51.100.4"); r.Status != http.StatusTooManyRequests {
		t.Errorf("an untrusted peer naming another address: %d, want 429", r.Status)
	}
}
