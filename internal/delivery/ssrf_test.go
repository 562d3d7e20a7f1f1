package delivery_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
)

// The addresses no endpoint may reach without WEBHOOK_ALLOW_PRIVATE: the
// SSRF matrix.
func privateAddrs() []string {
	return []string{"127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.254", "192.168.0.1", "169.254.169.254",
		"::1", "fc00::1", "fd12:3456::1"}
}

// names resolves host names from a table.
func names(table map[string][]string) outbound.Resolver {
	return resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		var out []netip.Addr
		for _, a := range table[host] {
			out = append(out, netip.MustParseAddr(a))
		}
		if len(out) == 0 {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return out, nil
	})
}

// At registration, with the production policy, every URL whose host is or
// resolves to a non-public address is 400 WEBHOOK_URL_FORBIDDEN, and so is
// plain http; nothing is written. A public https URL is accepted.
func TestRegistrationRefusesNonPublicDestinations(t *testing.T) {
	t.Parallel()
	table := map[string][]string{
		"public.test": {"1.1.1.1"}, "localhost": {"127.0.0.1"}, "internal.test": {"10.0.0.5"},
		"metadata.test": {"169.254.169.254"}, "ula.test": {"fd00::1"}, "mixed.test": {"1.1.1.1", "192.168.1.1"},
	}
	e := newEnv(t, outbound.Policy{}, names(table))
	var refused []string
	for _, a := range privateAddrs() {
		host := a
		if strings.Contains(a, ":") {
			host = "[" + a + "]"
		}
		refused = append(refused, "https://"+host+"/hook", "https://"+host+":8443/hook")
	}
	refused = append(refused, "https://localhost/hook", "https://internal.test/hook", "https://metadata.test/latest/meta-data/",
		"https://ula.test/hook", "https://mixed.test/hook", "http://public.test/hook", "https://[::ffff:127.0.0.1]/hook")
	for i, u := range refused {
		r := e.do(tenantA, "POST", "/webhook-endpoints", "ssrf-"+string(rune('a'+i)), jsonBody(map[string]string{"url": u}))
		if r.status != http.StatusBadRequest || r.json(t)["code"] != "WEBHOOK_URL_FORBIDDEN" {
			t.Errorf("%s: %v, want 400 WEBHOOK_URL_FORBIDDEN", u, r)
		}
	}
	if r := e.do(tenantA, "POST", "/webhook-endpoints", "ssrf-nx", jsonBody(map[string]string{"url": "https://nx.test/"})); r.status != http.StatusBadRequest ||
		r.json(t)["code"] != "VALIDATION_FAILED" {
		t.Errorf("a host that does not resolve: %v", r)
	}
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_endpoints`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d endpoints written (%v)", n, err)
	}
	if r := e.do(tenantA, "POST", "/webhook-endpoints", "ssrf-ok", jsonBody(map[string]string{"url": "https://public.test/hook"})); r.status != http.StatusCreated {
		t.Errorf("a public https URL: %v", r)
	}
}

// At delivery, every connection is checked again: a name that resolved to
// a public address at registration and resolves to a non-public one now
// (DNS rebinding), or an endpoint whose URL names such an address, is
// refused before any connection; the attempt is booked as failed and the
// target sees nothing.
func TestDeliveryRefusesNonPublicDestinations(t *testing.T) {
	t.Parallel()
	var rebound atomic.Bool
	target := map[string]string{} // name -> the private address it rebinds to
	resolver := resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		a, ok := target[host]
		switch {
		case !ok:
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		case !rebound.Load():
			return []netip.Addr{netip.MustParseAddr("1.1.1.1")}, nil
		}
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	})
	for i, a := range privateAddrs() {
		target["r"+string(rune('a'+i))+".test"] = a
	}
	target["literal.test"] = "1.1.1.1"
	// http is allowed, so that the receiver (plain http) stands in for the
	// target; private addresses are not.
	e := newEnv(t, outbound.Policy{AllowHTTP: true}, resolver)
	u, err := url.Parse(e.recv.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var eps []endpoint
	for host := range target {
		eps = append(eps, e.register(tenantA, "http://"+host+":"+u.Port()+"/"+host))
	}
	// An endpoint whose URL names the loopback address itself, as one
	// registered while the policy allowed it would.
	if _, err := e.pool.Exec(context.Background(), `UPDATE webhook_endpoints SET url = $1 WHERE url LIKE '%literal.test%'`,
		"http://127.0.0.1:"+u.Port()+"/literal"); err != nil {
		t.Fatal(err)
	}
	rebound.Store(true)
	ev := e.record("tenant_a", succeeded)
	if n := e.runOnce(e.worker(delivery.Config{})); n != len(eps) {
		t.Fatalf("claimed %d, want %d", n, len(eps))
	}
	log := e.deliveries(tenantA, ev)
	if len(log) != len(eps) {
		t.Fatalf("attempts %v, want %d", log, len(eps))
	}
	for _, a := range log {
		msg, _ := a["error"].(string)
		if a["statusCode"] != nil || !strings.Contains(msg, "webhook destination forbidden") || a["nextAttemptAt"] == nil {
			t.Errorf("attempt %v, want refused before connecting, and retried", a)
		}
	}
	e.recv.mu.Lock()
	defer e.recv.mu.Unlock()
	if len(e.recv.got) != 0 {
		t.Errorf("the target got %d requests", len(e.recv.got))
	}
}

// A redirect is not followed, even to an address the policy allows: the
// attempt fails with the 3xx, and the redirect's target sees nothing.
func TestDeliveryDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	inside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer inside.Close()
	e := newEnv(t, devPolicy, nil)
	e.hook(tenantA, "/redirect")
	e.recv.answer("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inside.URL+"/admin", http.StatusTemporaryRedirect)
	})
	ev := e.record("tenant_a", succeeded)
	e.runOnce(e.worker(delivery.Config{}))
	a := e.lastAttempt(tenantA, ev)
	if a["statusCode"] != float64(http.StatusTemporaryRedirect) || a["nextAttemptAt"] == nil {
		t.Errorf("attempt %v, want a failed 307, retried", a)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the redirect's target got %d requests", n)
	}
}
