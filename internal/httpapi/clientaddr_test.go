package httpapi

import (
	"crypto/tls"
	"net/http"
	"net/netip"
	"testing"
)

// The client's address is the peer's, unless the peer is a trusted proxy:
// then the rightmost X-Forwarded-For address no trusted proxy holds.
func TestClientAddressBelievesOnlyTrustedProxies(t *testing.T) {
	trusted := clientAddresses{trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}}
	for _, c := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"an untrusted peer's header is ignored", "203.0.113.5:4000", []string{"198.51.100.1"}, "203.0.113.5"},
		{"no header from a trusted peer", "10.0.0.2:4000", nil, "10.0.0.2"},
		{"the client the proxy saw", "10.0.0.2:4000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"what the client wrote is left of it", "10.0.0.2:4000", []string{"6.6.6.6, 198.51.100.1"}, "198.51.100.1"},
		{"through a chain of trusted proxies", "10.0.0.2:4000", []string{"6.6.6.6, 198.51.100.1, 10.9.9.9", "10.1.1.1"}, "198.51.100.1"},
		{"every hop trusted: the leftmost", "10.0.0.2:4000", []string{"10.3.3.3, 10.4.4.4"}, "10.3.3.3"},
		{"garbage passed on: the last trusted hop", "10.0.0.2:4000", []string{"6.6.6.6, not-an-address"}, "10.0.0.2"},
		{"IPv6 with brackets and a port", "[fd00::1]:4000", []string{"[2001:db8::7]:5555"}, "2001:db8::7"},
		{"an IPv4-mapped peer", "[::ffff:10.0.0.2]:4000", []string{"198.51.100.1"}, "198.51.100.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: c.peer, Header: http.Header{}}
			for _, h := range c.xff {
				r.Header.Add("X-Forwarded-For", h)
			}
			if got := trusted.of(r); got != c.want {
				t.Errorf("client address %q, want %q", got, c.want)
			}
		})
	}
}

// A request came over https if its connection is TLS, or if a trusted
// proxy says so: a client's own X-Forwarded-Proto is never believed.
func TestHTTPSIsBelievedFromTrustedProxiesOnly(t *testing.T) {
	g := Gate{addrs: clientAddresses{trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}
	for _, c := range []struct {
		name, peer, proto string
		tls               bool
		want              bool
	}{
		{"plain http", "203.0.113.5:4000", "", false, false},
		{"TLS", "203.0.113.5:4000", "", true, true},
		{"a trusted proxy that says https", "10.0.0.2:4000", "https", false, true},
		{"a trusted proxy that says http", "10.0.0.2:4000", "http", false, false},
		{"an untrusted peer that says https", "203.0.113.5:4000", "https", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: c.peer, Header: http.Header{}}
			if c.proto != "" {
				r.Header.Set("X-Forwarded-Proto", c.proto)
			}
			if c.tls {
				r.TLS = &tls.ConnectionState{}
			}
			if got := g.HTTPS(r); got != c.want {
				t.Errorf("HTTPS: %v, want %v", got, c.want)
			}
		})
	}
}
