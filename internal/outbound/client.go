package outbound

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// DefaultTimeout is the per-attempt timeout used when Client is given none
// (the contract's WEBHOOK_TIMEOUT default).
const DefaultTimeout = 10 * time.Second

// Client returns the HTTP client for webhook deliveries. It enforces p on
// every request and every connection:
//   - the scheme is checked again on each request (http only with AllowHTTP);
//   - the dialer resolves the host with resolver (nil: net.DefaultResolver),
//     refuses when any address is refused, and its ControlContext checks the
//     IP:port the socket actually connects to, so DNS rebinding between
//     registration and delivery cannot reach inside;
//   - redirects are not followed: the 3xx itself is returned, and the caller
//     counts it as a failed delivery (see Succeeded), since following it
//     would connect to a URL nobody checked;
//   - no proxy, not even from HTTP_PROXY/HTTPS_PROXY: a proxy would connect
//     for us, past the dial check;
//   - TLS certificates are verified (TLS 1.2 or newer);
//   - timeout bounds one whole attempt, from dial to the last byte of the
//     body read (zero or less means DefaultTimeout), and response headers
//     are capped at 64 KiB. Read bodies with ReadCapped.
func (p Policy) Client(timeout time.Duration, resolver Resolver) *http.Client {
	return p.client(timeout, resolver, nil)
}

// client is Client with the certificate roots to trust (nil: the system's),
// so tests can reach an httptest TLS server with verification still on.
func (p Policy) client(timeout time.Duration, resolver Resolver, rootCAs *x509.CertPool) *http.Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tr := &http.Transport{
		Proxy:                  nil, // not http.ProxyFromEnvironment: see above
		DialContext:            p.dialContext(p.dialer(timeout), resolverOrDefault(resolver)),
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: rootCAs},
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 64 << 10,
		// Not asking for gzip: a small compressed answer could inflate to
		// far more than it cost the endpoint to send, and we keep only its
		// first KiB anyway.
		DisableCompression:  true,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{
		Transport: &guardedTransport{policy: p, base: tr},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
		Timeout: timeout,
	}
}

// guardedTransport checks each request's URL before the transport sees it,
// so a caller cannot send plain http, or credentials, past the policy.
type guardedTransport struct {
	policy Policy
	base   *http.Transport
}

func (g *guardedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := g.policy.checkParsed(req.URL); err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper must close the body, even on error
		}
		return nil, err
	}
	return g.base.RoundTrip(req)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// transport's pool.
func (g *guardedTransport) CloseIdleConnections() { g.base.CloseIdleConnections() }

// dialer is the net.Dialer whose ControlContext checks, just before
// connect(2), the address the socket connects to: the last word, whatever
// resolved it.
func (p Policy) dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, ControlContext: p.control}
}

// control is the dialer's ControlContext; address is the resolved IP:port.
func (p Policy) control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &ForbiddenError{Reason: fmt.Sprintf("dial address %q is not an IP:port, so it cannot be checked", address)}
	}
	return p.CheckAddr(ap.Addr())
}

// dialContext resolves with r itself (so a test's fake resolver controls
// what is dialled, and so every address can be checked before any is
// tried), refuses when any address is refused, like CheckURL, then dials
// the addresses in turn by IP literal through d.
func (p Policy) dialContext(d *net.Dialer, r Resolver) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		host, portText, err := net.SplitHostPort(address)
		if err != nil {
			return nil, fmt.Errorf("outbound: dial %q: %w", address, err)
		}
		port, err := strconv.ParseUint(portText, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("outbound: dial %q: bad port: %w", address, err)
		}
		ipNetwork := "ip"
		switch network {
		case "tcp4":
			ipNetwork = "ip4"
		case "tcp6":
			ipNetwork = "ip6"
		}
		addrs, err := lookup(ctx, r, ipNetwork, host)
		if err != nil {
			return nil, err
		}
		if err := p.checkAddrs(host, addrs); err != nil {
			return nil, err
		}
		var errs []error
		for _, a := range addrs {
			conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
			if err == nil {
				return conn, nil
			}
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
		if len(errs) == 1 {
			return nil, errs[0]
		}
		return nil, errors.Join(errs...)
	}
}

// Succeeded reports whether a delivery's status code counts as delivered:
// 2xx only. A 3xx is a failure, since the client does not follow it.
func Succeeded(statusCode int) bool { return statusCode >= 200 && statusCode < 300 }

// ReadCapped reads at most limit bytes of resp's body and closes it, so an
// endpoint cannot make us hold a large or endless body; we only keep the
// beginning, for the delivery log. truncated says whether the body went on
// past limit (it is not an error). A read error, a timeout included, is
// returned with what was read before it.
func ReadCapped(resp *http.Response, limit int64) (body []byte, truncated bool, err error) {
	if resp == nil || resp.Body == nil {
		return nil, false, nil
	}
	defer func() {
		if cerr := resp.Body.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if limit < 0 {
		limit = 0
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if int64(len(body)) > limit {
		return body[:limit], true, err
	}
	return body, false, err
}
