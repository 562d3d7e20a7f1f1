package httpapi

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// clientAddresses tells a request's client address: the connection's peer,
// or, where the peer is a trusted proxy (TRUSTED_PROXIES), the rightmost
// address of X-Forwarded-For that no trusted proxy holds. Everything left
// of it was written by whoever sent the request, so it is never believed:
// a client cannot pick its address, for the logs or for the throttle of
// failed authentication.
type clientAddresses struct {
	trusted []netip.Prefix
}

// of returns r's client address.
func (c clientAddresses) of(r *http.Request) string {
	peer := peerAddr(r)
	addr, err := netip.ParseAddr(peer)
	if err != nil || !c.isTrusted(addr) {
		return peer
	}
	hops := forwardedFor(r)
	for i := len(hops) - 1; i >= 0; i-- {
		hop, err := netip.ParseAddr(hops[i])
		if err != nil {
			// A trusted proxy passed on what is no address: the last hop
			// it vouched for is the client as far as can be told.
			return addr.String()
		}
		addr = hop.Unmap()
		if !c.isTrusted(addr) {
			return addr.String()
		}
	}
	// Every hop is a trusted proxy: the leftmost is the nearest to the
	// client that can be told.
	return addr.String()
}

// trustsPeer reports whether r's connection came from a trusted proxy.
func (c clientAddresses) trustsPeer(r *http.Request) bool {
	addr, err := netip.ParseAddr(peerAddr(r))
	return err == nil && c.isTrusted(addr)
}

func (c clientAddresses) isTrusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// peerAddr is the address the request's connection came from.
func peerAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// forwardedFor is every X-Forwarded-For header's list, in order, each hop
// trimmed (an address with a port or in brackets loses them).
func forwardedFor(r *http.Request) []string {
	var hops []string
	for _, h := range r.Header.Values("X-Forwarded-For") {
		for _, hop := range strings.Split(h, ",") {
			hop = strings.TrimSpace(hop)
			if host, _, err := net.SplitHostPort(hop); err == nil {
				hop = host
			}
			hops = append(hops, strings.Trim(hop, "[]"))
		}
	}
	return hops
}

type clientAddrKey struct{}

func withClientAddr(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, clientAddrKey{}, addr)
}

// clientAddr is the client address requestContext found for r.
func clientAddr(r *http.Request) string {
	if a, ok := r.Context().Value(clientAddrKey{}).(string); ok {
		return a
	}
	return peerAddr(r)
}
