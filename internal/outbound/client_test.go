package outbound

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is a loopback server that counts the requests it sees.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func port(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

func wantForbidden(t *testing.T, what string, err error) {
	t.Helper()
	var forbidden *ForbiddenError
	if !errors.As(err, &forbidden) {
		t.Errorf("%s: error %v, want a *ForbiddenError", what, err)
	}
}

// Dev mode (AllowHTTP and AllowPrivate) reaches a loopback receiver.
func TestClientReachesLoopbackWhenAllowed(t *testing.T) {
	t.Parallel()
	var got []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c := Policy{AllowHTTP: true, AllowPrivate: true}.Client(5*time.Second, nil)
	resp, err := c.Post(srv.URL+"/hook", "application/json", strings.NewReader(`{"type":"payment.succeeded"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _, _ = ReadCapped(resp, 1<<10)
	if resp.StatusCode != http.StatusNoContent || !Succeeded(resp.StatusCode) || string(got) != `{"type":"payment.succeeded"}` {
		t.Fatalf("status %d, server got %q", resp.StatusCode, got)
	}
	// A name the resolver maps to loopback works too in dev mode.
	names := staticResolver(map[string][]string{"receiver.test": {"127.0.0.1"}})
	c = Policy{AllowHTTP: true, AllowPrivate: true}.Client(5*time.Second, names)
	resp, err = c.Get("http://receiver.test:" + port(t, srv) + "/")
	if err != nil {
		t.Fatal(err)
	}
	_, _, _ = ReadCapped(resp, 1<<10)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("via name: status %d", resp.StatusCode)
	}
}

// The SSRF matrix at connection time: the production policy (with http
// allowed, so a plain loopback server can stand in for the target) refuses
// before connecting, and the target sees nothing.
func TestClientRefusesNonPublicDestinations(t *testing.T) {
	t.Parallel()
	srv, hits := countingServer(t)
	p := port(t, srv)
	names := staticResolver(map[string][]string{
		"localhost":      {"127.0.0.1"},
		"internal.test":  {"127.0.0.1"},
		"private.test":   {"10.0.0.5"},
		"mixed.test":     {"1.1.1.1", "127.0.0.1"},
		"mixed-rev.test": {"127.0.0.1", "1.1.1.1"},
		"mapped.test":    {"::ffff:127.0.0.1"},
	})
	c := Policy{AllowHTTP: true}.Client(2*time.Second, names)
	for _, u := range []string{
		srv.URL + "/", // 127.0.0.1:port
		"http://localhost:" + p + "/",
		"http://internal.test:" + p + "/",
		"http://mixed.test:" + p + "/",
		"http://mixed-rev.test:" + p + "/",
		"http://mapped.test:" + p + "/",
		"http://[::ffff:127.0.0.1]:" + p + "/",
		"http://[::1]:" + p + "/",
		// These would hang until the timeout if dialled; they are refused
		// before any connection is attempted.
		"http://10.1.2.3/", "http://172.16.0.1/", "http://172.31.0.1/", "http://192.168.0.1/",
		"http://169.254.169.254/latest/meta-data/", "http://[fc00::1]/", "http://[fd00::1]/",
		"http://[fe80::1]/", "http://100.64.0.1/", "http://0.0.0.0:" + p + "/", "http://private.test/",
		"http://[64:ff9b::7f00:1]/",
	} {
		start := time.Now()
		resp, err := c.Get(u)
		if err == nil {
			_, _, _ = ReadCapped(resp, 0)
		}
		wantForbidden(t, u, err)
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: refused after %v, want before any connection", u, d)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("target saw %d requests", n)
	}
}

// A name that resolves to a public address when registered and to loopback
// when delivered to (DNS rebinding) is refused at dial time.
func TestClientRefusesDNSRebinding(t *testing.T) {
	t.Parallel()
	srv, hits := countingServer(t)
	var lookups atomic.Int64
	rebinding := resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		if host != "rebind.test" {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		if lookups.Add(1) == 1 {
			return []netip.Addr{netip.MustParseAddr("1.1.1.1")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	})
	p := Policy{AllowHTTP: true}
	target := "http://rebind.test:" + port(t, srv) + "/hook"
	if err := p.CheckURL(context.Background(), target, rebinding); err != nil {
		t.Fatalf("CheckURL at registration = %v, want nil (the name is public then)", err)
	}
	resp, err := p.Client(2*time.Second, rebinding).Post(target, "application/json", strings.NewReader("{}"))
	if err == nil {
		_, _, _ = ReadCapped(resp, 0)
	}
	wantForbidden(t, "rebinding", err)
	if err != nil && (!strings.Contains(err.Error(), `"rebind.test" resolves to an address that is not public`) ||
		strings.Contains(err.Error(), "127.0.0.1")) {
		t.Errorf("error %q does not say what was refused, or names what the host resolved to", err)
	}
	if lookups.Load() != 2 || hits.Load() != 0 {
		t.Fatalf("lookups %d (want 2), target saw %d requests (want 0)", lookups.Load(), hits.Load())
	}
}

// The dialer's ControlContext is the last check, on the address the socket
// connects to, whatever resolved it.
func TestDialControlChecksTheConnectedAddress(t *testing.T) {
	t.Parallel()
	strict := Policy{}
	for _, addr := range []string{
		"127.0.0.1:443", "10.0.0.1:443", "172.16.5.4:80", "192.168.1.1:443", "169.254.169.254:80",
		"[::1]:443", "[fc00::1]:443", "[::ffff:127.0.0.1]:443", "[fe80::1%eth0]:443", "not-an-address",
	} {
		wantForbidden(t, "control "+addr, strict.control(context.Background(), "tcp", addr, nil))
	}
	for _, addr := range []string{"1.1.1.1:443", "[2606:4700:4700::1111]:443"} {
		if err := strict.control(context.Background(), "tcp4", addr, nil); err != nil {
			t.Errorf("control %s = %v, want nil", addr, err)
		}
	}
	if err := (Policy{AllowPrivate: true}).control(context.Background(), "tcp", "127.0.0.1:80", nil); err != nil {
		t.Errorf("control with AllowPrivate = %v", err)
	}

	// And it is wired into the real dialer: dialling a loopback listener by
	// IP literal, past the resolver's check, is refused before connect.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	conn, err := strict.dialer(time.Second).DialContext(context.Background(), "tcp", ln.Addr().String())
	if err == nil {
		_ = conn.Close()
	}
	wantForbidden(t, "dialer", err)
	conn, err = Policy{AllowPrivate: true}.dialer(time.Second).DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dialer with AllowPrivate = %v", err)
	}
	_ = conn.Close()
}

// A redirect is returned, not followed: the server it points to sees no
// request, even when the policy would allow reaching it.
func TestClientDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	inside, insideHits := countingServer(t)
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusSeeOther} {
		redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, inside.URL+"/internal", code)
		}))
		c := Policy{AllowHTTP: true, AllowPrivate: true}.Client(5*time.Second, nil)
		resp, err := c.Post(redirector.URL, "application/json", strings.NewReader("{}"))
		redirector.Close()
		if err != nil {
			t.Fatalf("%d: %v", code, err)
		}
		_, _, _ = ReadCapped(resp, 1<<10)
		if resp.StatusCode != code || Succeeded(resp.StatusCode) {
			t.Errorf("status %d (succeeded %v), want %d, a failure", resp.StatusCode, Succeeded(resp.StatusCode), code)
		}
		if loc := resp.Header.Get("Location"); !strings.HasPrefix(loc, inside.URL) {
			t.Errorf("Location %q", loc)
		}
	}
	if n := insideHits.Load(); n != 0 {
		t.Fatalf("redirect target saw %d requests", n)
	}
}

// Plain http is refused at send time too without AllowHTTP, and so is a
// URL with credentials, before any connection.
func TestClientChecksEveryRequestURL(t *testing.T) {
	t.Parallel()
	srv, hits := countingServer(t)
	c := Policy{AllowPrivate: true}.Client(2*time.Second, nil)
	resp, err := c.Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err == nil {
		_, _, _ = ReadCapped(resp, 0)
	}
	wantForbidden(t, "http without AllowHTTP", err)

	c = Policy{AllowHTTP: true, AllowPrivate: true}.Client(2*time.Second, nil)
	u, _ := url.Parse(srv.URL)
	u.User = url.UserPassword("u", "p")
	resp, err = c.Get(u.String())
	if err == nil {
		_, _, _ = ReadCapped(resp, 0)
	}
	if !errors.As(err, new(*InvalidURLError)) {
		t.Errorf("userinfo: %v, want *InvalidURLError", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("server saw %d requests", n)
	}
}

// TLS certificates are verified: an untrusted one fails, a trusted one
// works through the guarded dialer, with the name checked against it.
func TestClientVerifiesTLS(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	p := Policy{AllowPrivate: true}

	_, err := p.Client(5*time.Second, nil).Get(srv.URL)
	var verr *tls.CertificateVerificationError
	if !errors.As(err, &verr) {
		t.Fatalf("untrusted certificate: %v, want *tls.CertificateVerificationError", err)
	}

	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	// httptest's certificate names example.com and 127.0.0.1.
	names := staticResolver(map[string][]string{"example.com": {"127.0.0.1"}, "wrong.test": {"127.0.0.1"}})
	c := p.client(5*time.Second, names, roots)
	resp, err := c.Get("https://example.com:" + port(t, srv) + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _, err := ReadCapped(resp, 1<<10)
	if err != nil || string(body) != "ok" {
		t.Fatalf("body %q, %v", body, err)
	}
	_, err = c.Get("https://wrong.test:" + port(t, srv) + "/")
	if !errors.As(err, &verr) {
		t.Fatalf("wrong name: %v, want *tls.CertificateVerificationError", err)
	}
	if hits.Load() != 1 {
		t.Fatalf("server saw %d requests, want 1", hits.Load())
	}
}

// No proxy is used, not even one from the environment.
func TestClientIgnoresProxyEnvironment(t *testing.T) {
	proxy, proxyHits := countingServer(t)
	target, targetHits := countingServer(t)
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("HTTPS_PROXY", proxy.URL)
	t.Setenv("NO_PROXY", "")
	c := Policy{AllowHTTP: true, AllowPrivate: true}.Client(5*time.Second,
		staticResolver(map[string][]string{"target.test": {"127.0.0.1"}}))
	if tr := c.Transport.(*guardedTransport).base; tr.Proxy != nil {
		t.Fatal("transport has a Proxy func")
	}
	resp, err := c.Get("http://target.test:" + port(t, target) + "/")
	if err != nil {
		t.Fatal(err)
	}
	_, _, _ = ReadCapped(resp, 1<<10)
	if proxyHits.Load() != 0 || targetHits.Load() != 1 {
		t.Fatalf("proxy saw %d, target %d", proxyHits.Load(), targetHits.Load())
	}
}

// One attempt is bounded by the timeout, however slow the endpoint.
func TestClientTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	start := time.Now()
	_, err := Policy{AllowHTTP: true, AllowPrivate: true}.Client(200*time.Millisecond, nil).Get(srv.URL)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("slow endpoint: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
	if c := (Policy{}).Client(0, nil); c.Timeout != DefaultTimeout {
		t.Fatalf("zero timeout gave %v, want %v", c.Timeout, DefaultTimeout)
	}
}

// closeRecorder is a body that records how much was read and whether it
// was closed.
type closeRecorder struct {
	r      io.Reader
	read   int
	closed bool
}

func (c *closeRecorder) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestReadCapped(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("x"), 100)
	for _, tc := range []struct {
		limit     int64
		want      int
		truncated bool
	}{{10, 10, true}, {99, 99, true}, {100, 100, false}, {1000, 100, false}, {0, 0, true}} {
		rc := &closeRecorder{r: bytes.NewReader(body)}
		got, truncated, err := ReadCapped(&http.Response{Body: rc}, tc.limit)
		if int64(rc.read) > tc.limit+1 {
			t.Errorf("limit %d: read %d bytes of the body", tc.limit, rc.read)
		}
		if err != nil || len(got) != tc.want || truncated != tc.truncated || !rc.closed {
			t.Errorf("limit %d: %d bytes, truncated %v, err %v, closed %v; want %d, %v",
				tc.limit, len(got), truncated, err, rc.closed, tc.want, tc.truncated)
		}
	}
	if got, truncated, err := ReadCapped(&http.Response{Body: http.NoBody}, 10); err != nil || len(got) != 0 || truncated {
		t.Errorf("empty body: %q %v %v", got, truncated, err)
	}
	if got, _, err := ReadCapped(nil, 10); got != nil || err != nil {
		t.Errorf("nil response: %q %v", got, err)
	}
}

// Over a real connection, an endless body is read only up to the cap.
func TestReadCappedEndlessBody(t *testing.T) {
	t.Parallel()
	var written atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		chunk := bytes.Repeat([]byte("y"), 32<<10)
		for {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil || written.Load() > 1<<30 {
				return
			}
		}
	}))
	defer srv.Close()
	resp, err := Policy{AllowHTTP: true, AllowPrivate: true}.Client(5*time.Second, nil).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, truncated, err := ReadCapped(resp, 64<<10)
	if err != nil || len(got) != 64<<10 || !truncated {
		t.Fatalf("%d bytes, truncated %v, err %v", len(got), truncated, err)
	}
	srv.Close() // waits for the handler, which stops when the client has gone
	if n := written.Load(); n > 64<<20 {
		t.Fatalf("the server got to write %d bytes: the body was not left after the cap", n)
	}
}
