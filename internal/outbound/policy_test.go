package outbound

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// resolverFunc is a fake Resolver; tests decide what each name resolves to.
type resolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

// staticResolver answers from names; an unknown name is not found, as a
// real resolver would say, and nothing reaches the network.
func staticResolver(names map[string][]string) Resolver {
	return resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		list, ok := names[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		addrs := make([]netip.Addr, len(list))
		for i, s := range list {
			addrs[i] = netip.MustParseAddr(s)
		}
		return addrs, nil
	})
}

func TestIsPublic(t *testing.T) {
	t.Parallel()
	public := []string{
		"1.1.1.1", "8.8.8.8", "93.184.215.14", "172.15.255.255", "172.32.0.1",
		"100.63.255.255", "100.128.0.0", "169.253.255.255", "192.0.1.1", "198.17.255.255",
		"198.20.0.0", "223.255.255.255", "11.0.0.1",
		"2606:4700:4700::1111", "2a00:1450:4001::200e", "::ffff:1.1.1.1",
		"64:ff9b::101:101", "2002:101:101::1",
	}
	nonPublicAddrs := []string{
		// loopback, unspecified
		"127.0.0.1", "127.255.255.254", "0.0.0.0", "0.1.2.3", "::1", "::",
		// private
		"10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.255", "192.168.0.1", "192.168.255.255",
		// CGNAT, link-local (cloud metadata)
		"100.64.0.1", "100.127.255.255", "169.254.0.1", "169.254.169.254", "fe80::1", "fe80::1%eth0",
		// unique-local, multicast, broadcast, reserved
		"fc00::1", "fd12:3456:789a::1", "224.0.0.1", "239.255.255.250", "ff02::1",
		"255.255.255.255", "240.0.0.1",
		// IETF, documentation, benchmarking
		"192.0.0.8", "192.0.2.1", "198.18.0.1", "198.19.255.255", "198.51.100.7", "203.0.113.9",
		"2001:db8::1", "3fff::1", "2001:2::1", "2001::1",
		// IPv4 in IPv6: mapped, NAT64, 6to4, compatible
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a00:1",
		"64:ff9b::7f00:1", "64:ff9b:1::1", "2002:a00:1::1", "2002:7f00:1::", "::10.0.0.1",
		// outside global unicast
		"4000::1", "100::1",
	}
	for _, s := range public {
		if a := netip.MustParseAddr(s); !IsPublic(a) {
			t.Errorf("IsPublic(%s) = false (%s), want true", s, nonPublic(a))
		}
	}
	for _, s := range nonPublicAddrs {
		if a := netip.MustParseAddr(s); IsPublic(a) {
			t.Errorf("IsPublic(%s) = true, want false", s)
		}
	}
	if IsPublic(netip.Addr{}) {
		t.Error("IsPublic(zero Addr) = true")
	}
}

// The SSRF matrix at registration, with the production policy.
func TestCheckURLRefusesNonPublicDestinations(t *testing.T) {
	t.Parallel()
	resolver := staticResolver(map[string][]string{
		"localhost":          {"127.0.0.1", "::1"},
		"internal.example":   {"10.0.0.5"},
		"metadata.example":   {"169.254.169.254"},
		"mixed.example":      {"1.1.1.1", "192.168.1.10"},
		"mixed6.example":     {"2606:4700:4700::1111", "fd00::1"},
		"mapped.example":     {"::ffff:127.0.0.1"},
		"public.example":     {"1.1.1.1"},
		"public6.example":    {"2606:4700:4700::1111"},
		"public-two.example": {"1.1.1.1", "2606:4700:4700::1111"},
	})
	for _, tc := range []struct {
		url    string
		want   string // in the reason
		hidden string // what a name resolved to: never in the reason
	}{
		{"https://127.0.0.1/hook", "127.0.0.1 is a loopback address", ""},
		{"https://127.1.2.3:8443/hook", "loopback", ""},
		{"https://10.1.2.3/", "10.1.2.3 is a private address", ""},
		{"https://172.16.0.1/", "private", ""},
		{"https://172.31.255.254/", "private", ""},
		{"https://192.168.1.1/", "private", ""},
		{"https://169.254.169.254/latest/meta-data/", "link-local", ""},
		{"https://100.64.0.1/", "CGNAT", ""},
		{"https://0.0.0.0/", "unspecified", ""},
		{"https://255.255.255.255/", "broadcast", ""},
		{"https://192.0.2.10/", "documentation", ""},
		{"https://[::1]/", "::1 is a loopback address", ""},
		{"https://[::1]:8443/hook", "loopback", ""},
		{"https://[fc00::1]/", "unique-local", ""},
		{"https://[fdab:cdef::1]/", "unique-local", ""},
		{"https://[fe80::1%25eth0]/", "link-local", ""},
		{"https://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1 is a loopback address", ""},
		{"https://[::ffff:10.0.0.1]/", "private", ""},
		{"https://[64:ff9b::a9fe:a9fe]/", "NAT64 of a link-local", ""},
		{"https://localhost/", `"localhost" resolves to an address that is not public`, "127.0.0.1"},
		{"https://internal.example/hook", `"internal.example" resolves to an address that is not public`, "10.0.0.5"},
		{"https://metadata.example/", `"metadata.example" resolves to an address that is not public`, "169.254"},
		{"https://mixed.example/", `"mixed.example" resolves to`, "192.168.1.10"},
		{"https://mixed6.example/", `"mixed6.example" resolves to`, "fd00"},
		{"https://mapped.example/", `"mapped.example" resolves to`, "127.0.0.1"},
		{"http://1.1.1.1/", "scheme http is not allowed", ""},
		{"http://public.example/", "scheme http is not allowed", ""},
	} {
		err := Policy{}.CheckURL(context.Background(), tc.url, resolver)
		var forbidden *ForbiddenError
		if !errors.As(err, &forbidden) {
			t.Errorf("CheckURL(%s) = %v, want *ForbiddenError", tc.url, err)
			continue
		}
		if !strings.Contains(forbidden.Reason, tc.want) {
			t.Errorf("CheckURL(%s) reason %q, want it to say %q", tc.url, forbidden.Reason, tc.want)
		}
		if tc.hidden != "" && (strings.Contains(err.Error(), tc.hidden) || strings.Contains(err.Error(), "private") ||
			strings.Contains(err.Error(), "loopback") || strings.Contains(err.Error(), "link-local")) {
			t.Errorf("CheckURL(%s) = %q: it names what the host resolved to", tc.url, err)
		}
		var invalid *InvalidURLError
		if errors.As(err, &invalid) {
			t.Errorf("CheckURL(%s) is also an *InvalidURLError", tc.url)
		}
	}

	for _, u := range []string{
		"https://1.1.1.1/", "https://1.1.1.1:8443/hooks?x=1", "https://public.example/hook",
		"https://public6.example/", "https://public-two.example/", "https://[2606:4700:4700::1111]/",
		"https://PUBLIC.example/", "HTTPS://1.1.1.1/",
	} {
		if err := (Policy{}).CheckURL(context.Background(), u, staticResolver(map[string][]string{
			"public.example": {"1.1.1.1"}, "PUBLIC.example": {"1.1.1.1"},
			"public6.example": {"2606:4700:4700::1111"}, "public-two.example": {"1.1.1.1", "2606:4700:4700::1111"},
		})); err != nil {
			t.Errorf("CheckURL(%s) = %v, want nil", u, err)
		}
	}
	if err := (Policy{AllowHTTP: true}).CheckURL(context.Background(), "http://public.example:8080/", resolver); err != nil {
		t.Errorf("CheckURL(http) with AllowHTTP = %v, want nil", err)
	}
	if err := (Policy{AllowHTTP: true}).CheckURL(context.Background(), "http://10.0.0.1/", resolver); !errors.As(err, new(*ForbiddenError)) {
		t.Errorf("CheckURL(http://10.0.0.1) with AllowHTTP only = %v, want *ForbiddenError", err)
	}
}

func TestCheckURLRefusesMalformedURLs(t *testing.T) {
	t.Parallel()
	resolver := staticResolver(map[string][]string{"public.example": {"1.1.1.1"}})
	for _, u := range []string{
		"", "not a url", "/relative/path", "public.example/hook", "//public.example/hook",
		"ftp://public.example/", "ws://public.example/", "file:///etc/passwd", "https:public.example",
		"https:///path", "https://:443/", "https://user:pw@public.example/", "https://user@public.example/",
		"https://public.example:0/", "https://public.example:65536/", "https://public.example:port/",
		"https://[::1/", "https://public.example/%zz",
	} {
		for _, p := range []Policy{{}, {AllowHTTP: true, AllowPrivate: true}} {
			err := p.CheckURL(context.Background(), u, resolver)
			var invalid *InvalidURLError
			if !errors.As(err, &invalid) {
				t.Errorf("%+v.CheckURL(%q) = %v, want *InvalidURLError", p, u, err)
			}
		}
	}
	// Userinfo is refused without echoing the password.
	err := Policy{}.CheckURL(context.Background(), "https://user:s3cret@public.example/", resolver)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("userinfo error %v shows the password", err)
	}
}

func TestCheckURLNameThatDoesNotResolve(t *testing.T) {
	t.Parallel()
	err := Policy{}.CheckURL(context.Background(), "https://nx.example/", staticResolver(nil))
	var re *ResolveError
	var dnsErr *net.DNSError
	if !errors.As(err, &re) || re.Host != "nx.example" || !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("CheckURL(nx) = %v, want *ResolveError wrapping a not-found *net.DNSError", err)
	}
	empty := resolverFunc(func(context.Context, string, string) ([]netip.Addr, error) { return nil, nil })
	if err := (Policy{}).CheckURL(context.Background(), "https://empty.example/", empty); !errors.As(err, &re) {
		t.Fatalf("CheckURL(no addresses) = %v, want *ResolveError", err)
	}
}

func TestCheckURLPassesContextToResolver(t *testing.T) {
	t.Parallel()
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "v")
	var got any
	r := resolverFunc(func(ctx context.Context, network, _ string) ([]netip.Addr, error) {
		got = ctx.Value(key{})
		if network != "ip" {
			t.Errorf("network %q, want ip", network)
		}
		return []netip.Addr{netip.MustParseAddr("1.1.1.1")}, nil
	})
	if err := (Policy{}).CheckURL(ctx, "https://public.example/", r); err != nil || got != "v" {
		t.Fatalf("CheckURL = %v, resolver saw ctx value %v", err, got)
	}
}

// With AllowPrivate (dev mode) any address is allowed, and nothing is
// resolved: there would be nothing to refuse.
func TestCheckURLAllowPrivate(t *testing.T) {
	t.Parallel()
	noDNS := resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		t.Errorf("resolved %q with AllowPrivate", host)
		return nil, errors.New("unexpected")
	})
	p := Policy{AllowHTTP: true, AllowPrivate: true}
	for _, u := range []string{
		"http://127.0.0.1:8080/hook", "https://10.0.0.1/", "https://[::1]/", "http://localhost:3000/",
		"https://169.254.169.254/", "https://internal.example/",
	} {
		if err := p.CheckURL(context.Background(), u, noDNS); err != nil {
			t.Errorf("CheckURL(%s) with AllowPrivate = %v, want nil", u, err)
		}
	}
	if err := (Policy{AllowPrivate: true}).CheckURL(context.Background(), "http://127.0.0.1/", noDNS); !errors.As(err, new(*ForbiddenError)) {
		t.Errorf("http with AllowPrivate only = %v, want *ForbiddenError", err)
	}
}

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	err := Policy{}.CheckAddr(netip.MustParseAddr("169.254.169.254"))
	var forbidden *ForbiddenError
	if !errors.As(err, &forbidden) || strings.Contains(err.Error(), "169.254") || strings.Contains(err.Error(), "link-local") {
		t.Errorf("CheckAddr(metadata) = %v", err)
	}
	if err := (Policy{}).CheckAddr(netip.MustParseAddr("1.1.1.1")); err != nil {
		t.Errorf("CheckAddr(1.1.1.1) = %v", err)
	}
	if err := (Policy{AllowPrivate: true}).CheckAddr(netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Errorf("CheckAddr(127.0.0.1) with AllowPrivate = %v", err)
	}
}

// Under the production policy an https URL may name port 443 (or none) or
// 8443, or a port the operator allowed; with plain http or private
// addresses allowed, any port. The client checks the same on every
// request.
func TestCheckURLAllowsOnlyTheWebhookPorts(t *testing.T) {
	t.Parallel()
	resolver := staticResolver(map[string][]string{"public.example": {"1.1.1.1"}})
	for _, tc := range []struct {
		policy Policy
		url    string
		ok     bool
	}{
		{Policy{}, "https://public.example/hook", true},
		{Policy{}, "https://public.example:443/hook", true},
		{Policy{}, "https://public.example:8443/hook", true},
		{Policy{}, "https://public.example:8080/hook", false},
		{Policy{}, "https://public.example:22/hook", false},
		{Policy{}, "https://1.1.1.1:6379/", false},
		{Policy{AllowedPorts: []int{9443}}, "https://public.example:9443/hook", true},
		{Policy{AllowedPorts: []int{9443}}, "https://public.example:9444/hook", false},
		{Policy{AllowHTTP: true}, "https://public.example:8080/hook", true},
		{Policy{AllowPrivate: true}, "https://public.example:5432/hook", true},
	} {
		err := tc.policy.CheckURL(context.Background(), tc.url, resolver)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%+v: CheckURL(%s) = %v, want nil", tc.policy, tc.url, err)
		case !tc.ok && (!errors.As(err, new(*ForbiddenError)) || !strings.Contains(err.Error(), "port")):
			t.Errorf("%+v: CheckURL(%s) = %v, want a *ForbiddenError naming the port", tc.policy, tc.url, err)
		}
	}
	_, err := Policy{}.Client(time.Second, resolver).Post("https://public.example:8080/hook", "application/json", strings.NewReader("{}"))
	if !errors.As(err, new(*ForbiddenError)) {
		t.Errorf("the client sent to port 8080: %v", err)
	}
}
