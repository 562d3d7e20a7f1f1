package outbound

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
)

// Policy says which webhook destinations are allowed. The zero value is the
// production policy: https only, on port 443 or 8443, public addresses
// only. Dev mode (`make run`) sets both Allow fields, so a receiver on
// localhost can be used.
type Policy struct {
	// AllowHTTP allows plain http URLs (WEBHOOK_ALLOW_HTTP).
	AllowHTTP bool
	// AllowPrivate allows hosts with loopback, private, link-local and
	// other non-public addresses (WEBHOOK_ALLOW_PRIVATE).
	AllowPrivate bool
	// AllowedPorts are the ports allowed besides 443 and 8443
	// (WEBHOOK_ALLOWED_PORTS) while neither Allow field is set; with
	// either, any port is.
	AllowedPorts []int
}

// defaultPorts are the ports a webhook URL may name under the production
// policy without AllowedPorts: HTTPS's, and its usual alternative.
var defaultPorts = [...]int{443, 8443}

// portAllowed reports whether the policy allows port (of an https URL;
// "" is 443).
func (p Policy) portAllowed(port string) bool {
	if p.AllowHTTP || p.AllowPrivate || port == "" {
		return true
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return false
	}
	return slices.Contains(defaultPorts[:], n) || slices.Contains(p.AllowedPorts, n)
}

// Resolver resolves a host name to its addresses. *net.Resolver satisfies
// it; tests pass a fake to control what a name resolves to and when. A nil
// Resolver means net.DefaultResolver.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

func resolverOrDefault(r Resolver) Resolver {
	if r == nil {
		return net.DefaultResolver
	}
	return r
}

// CheckURL checks a URL given at endpoint registration. It answers
// *InvalidURLError when the URL is malformed, *ForbiddenError when the policy
// refuses its scheme or any address its host resolves to, and *ResolveError
// when the host does not resolve. Every address must be public, not just
// one, because the client may connect to any of them. With AllowPrivate
// nothing is resolved: every address would be allowed anyway.
func (p Policy) CheckURL(ctx context.Context, rawURL string, resolver Resolver) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		// Not echoing rawURL: it may carry a password.
		return &InvalidURLError{Reason: fmt.Sprintf("does not parse: %v", unwrapURLError(err))}
	}
	if err := p.checkParsed(u); err != nil {
		return err
	}
	if p.AllowPrivate {
		return nil
	}
	host := u.Hostname()
	addrs, err := lookup(ctx, resolverOrDefault(resolver), "ip", host)
	if err != nil {
		return err
	}
	return p.checkAddrs(host, addrs)
}

// checkParsed checks what can be checked without resolving: the URL's form
// and its scheme. The client runs it again on every request.
func (p Policy) checkParsed(u *url.URL) error {
	if !u.IsAbs() {
		return &InvalidURLError{Reason: fmt.Sprintf("%q is not absolute (want https://host/path)", u.Redacted())}
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !p.AllowHTTP {
			return &ForbiddenError{Reason: fmt.Sprintf("scheme http is not allowed in %q, only https", u.Redacted())}
		}
	default:
		return &InvalidURLError{Reason: fmt.Sprintf("scheme %q is not https", u.Scheme)}
	}
	if u.Opaque != "" {
		return &InvalidURLError{Reason: fmt.Sprintf("%q has no //host", u.Redacted())}
	}
	// Credentials in a URL would be sent as Basic auth and shown back in
	// every listing; a receiver authenticates us by the signature instead.
	if u.User != nil {
		return &InvalidURLError{Reason: fmt.Sprintf("%q carries userinfo (user:password@), which is not allowed", u.Redacted())}
	}
	if u.Hostname() == "" {
		return &InvalidURLError{Reason: fmt.Sprintf("%q has no host", u.Redacted())}
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return &InvalidURLError{Reason: fmt.Sprintf("port %q is not in 1-65535", port)}
		}
	}
	// Any other port is more likely a service inside a network than a
	// merchant's receiver: the server opens only what its operator allowed.
	if !p.portAllowed(u.Port()) {
		return &ForbiddenError{Reason: fmt.Sprintf("port %s is not allowed, only 443 and 8443 (and the ports of WEBHOOK_ALLOWED_PORTS)", u.Port())}
	}
	return nil
}

// unwrapURLError drops the *url.Error wrapper, whose text repeats the URL.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// lookup returns the addresses of host: the host itself when it is an IP
// literal, else what the resolver answers (unmapped, since net.Resolver may
// answer IPv4 addresses in their IPv4-mapped IPv6 form).
func lookup(ctx context.Context, r Resolver, network, host string) ([]netip.Addr, error) {
	if addr, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{addr.Unmap()}, nil
	}
	addrs, err := r.LookupNetIP(ctx, network, host)
	if err != nil {
		return nil, &ResolveError{Host: host, Err: err}
	}
	if len(addrs) == 0 {
		return nil, &ResolveError{Host: host, Err: fmt.Errorf("no addresses")}
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	return addrs, nil
}

// checkAddrs refuses when any of host's addresses is refused. It names
// the host, and the kind of address only when the host is the address
// itself: what a name resolves to, inside the server's network, is none
// of the client's business, and naming it would let a client map that
// network through the error messages.
func (p Policy) checkAddrs(host string, addrs []netip.Addr) error {
	if p.AllowPrivate {
		return nil
	}
	_, literalErr := netip.ParseAddr(host)
	for _, a := range addrs {
		kind := nonPublic(a)
		switch {
		case kind == "":
		case literalErr == nil:
			return &ForbiddenError{Reason: fmt.Sprintf("%s is %s address", host, kind)}
		default:
			return &ForbiddenError{Reason: fmt.Sprintf("%q resolves to an address that is not public", host)}
		}
	}
	return nil
}

// CheckAddr answers *ForbiddenError when the policy refuses connecting to
// addr, without naming it (it is what a name resolved to); nil when addr
// is allowed.
func (p Policy) CheckAddr(addr netip.Addr) error {
	if p.AllowPrivate {
		return nil
	}
	if kind := nonPublic(addr); kind != "" {
		return &ForbiddenError{Reason: "the address connected to is not public"}
	}
	return nil
}

// IsPublic reports whether addr may be a real endpoint on the public
// internet. Loopback, unspecified, private, shared (CGNAT), link-local,
// unique-local, multicast, broadcast, reserved, documentation and
// benchmarking addresses are not, nor IPv4-mapped, NAT64 or 6to4 IPv6
// addresses embedding one of them.
func IsPublic(addr netip.Addr) bool { return nonPublic(addr) == "" }

type namedPrefix struct {
	prefix netip.Prefix
	kind   string
}

func prefixes(kind string, cidrs ...string) []namedPrefix {
	out := make([]namedPrefix, len(cidrs))
	for i, c := range cidrs {
		out[i] = namedPrefix{netip.MustParsePrefix(c), kind}
	}
	return out
}

// nonPublic answers the kind of range addr is in, "" when it is public.
// IPv4 is denied by list (RFC 6890 and successors); IPv6 is allowed by list:
// only global unicast 2000::/3 can be public, less its special ranges, so
// whatever new non-public range appears outside it is refused already.
// The tables are built per call, not kept in package variables, so there is
// no package-level state; the cost is nothing next to a DNS lookup.
func nonPublic(addr netip.Addr) string {
	if !addr.IsValid() {
		return "an invalid"
	}
	addr = addr.WithZone("").Unmap()
	if addr.Is4() {
		return nonPublic4(addr)
	}
	switch {
	case netip.MustParsePrefix("64:ff9b::/96").Contains(addr):
		// NAT64 (RFC 6052): the gateway connects to the embedded IPv4.
		b := addr.As16()
		if kind := nonPublic4(netip.AddrFrom4([4]byte(b[12:]))); kind != "" {
			return "a NAT64 of " + kind
		}
		return ""
	case netip.MustParsePrefix("2002::/16").Contains(addr):
		// 6to4 (RFC 3056): a relay connects to the embedded IPv4.
		b := addr.As16()
		if kind := nonPublic4(netip.AddrFrom4([4]byte(b[2:6]))); kind != "" {
			return "a 6to4 of " + kind
		}
		return ""
	}
	deny := [][]namedPrefix{
		prefixes("a loopback", "::1/128"),
		prefixes("an unspecified", "::/128"),
		prefixes("a unique-local", "fc00::/7"),
		prefixes("a link-local", "fe80::/10"),
		prefixes("a multicast", "ff00::/8"),
		prefixes("a NAT64 local-use", "64:ff9b:1::/48"),
		// 2001::/23 holds Teredo, benchmarking (2001:2::/48) and ORCHID.
		prefixes("an IETF protocol assignment", "2001::/23"),
		prefixes("a documentation", "2001:db8::/32", "3fff::/20"),
	}
	for _, list := range deny {
		for _, np := range list {
			if np.prefix.Contains(addr) {
				return np.kind
			}
		}
	}
	if !netip.MustParsePrefix("2000::/3").Contains(addr) {
		return "a non-global-unicast"
	}
	return ""
}

// nonPublic4 answers the kind of IPv4 range a is in, "" when it is public.
func nonPublic4(a netip.Addr) string {
	deny := [][]namedPrefix{
		prefixes("an unspecified", "0.0.0.0/8"),
		prefixes("a loopback", "127.0.0.0/8"),
		prefixes("a private", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
		prefixes("a shared (CGNAT)", "100.64.0.0/10"),
		// Includes 169.254.169.254, the cloud metadata service.
		prefixes("a link-local", "169.254.0.0/16"),
		prefixes("an IETF protocol assignment", "192.0.0.0/24"),
		prefixes("a documentation", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"),
		prefixes("a benchmarking", "198.18.0.0/15"),
		prefixes("a deprecated 6to4 relay", "192.88.99.0/24"),
		prefixes("a multicast", "224.0.0.0/4"),
		prefixes("a broadcast", "255.255.255.255/32"),
		prefixes("a reserved", "240.0.0.0/4"),
	}
	for _, list := range deny {
		for _, np := range list {
			if np.prefix.Contains(a) {
				return np.kind
			}
		}
	}
	return ""
}
