// Package outbound holds what sending a webhook to a merchant's URL safely
// needs: a destination policy, an HTTP client that enforces it on every
// connection, and Standard Webhooks signatures (standardwebhooks.com).
//
// A merchant's URL is input from the internet that makes this service open
// connections, so it is the classic server-side request forgery (SSRF)
// surface. The policy is therefore checked twice:
//   - at registration, by Policy.CheckURL, which resolves the host and
//     refuses the URL when any of its addresses is not public;
//   - at every connection, by the Client's dialer, which resolves again and
//     checks the very address it connects to (net.Dialer.ControlContext sees
//     the socket's IP:port), so a name that answers a public address at
//     registration and a private one later (DNS rebinding) cannot reach
//     inside. Redirects are never followed, so a 3xx cannot lead there
//     either.
//
// Signing and verifying use the Standard Webhooks Go library
// (github.com/standard-webhooks/standard-webhooks/libraries/go), not a
// hand-written HMAC, so what we send is what every receiver's library checks.
package outbound

import "fmt"

// ForbiddenError says that a well-formed URL names a destination the policy
// refuses: plain http without AllowHTTP, a port it does not allow, or a
// host with a non-public address without AllowPrivate. The API answers it
// 400 WEBHOOK_URL_FORBIDDEN; a delivery that gets it failed.
type ForbiddenError struct {
	// Reason says what was refused, e.g.
	// `"internal.example" resolves to an address that is not public`:
	// never what a name resolved to.
	Reason string
}

func (e *ForbiddenError) Error() string { return "webhook destination forbidden: " + e.Reason }

// InvalidURLError says that a URL is not usable as a webhook endpoint at all
// (not absolute, no host, userinfo, a bad port, a scheme other than http or
// https). The API answers it 400 VALIDATION_FAILED.
type InvalidURLError struct {
	// Reason says what is wrong with the URL.
	Reason string
}

func (e *InvalidURLError) Error() string { return "invalid webhook URL: " + e.Reason }

// ResolveError says that a host could not be resolved, so its addresses
// could not be checked; such a URL is not accepted. Err is the resolver's
// error: a *net.DNSError tells a name that does not exist (IsNotFound, a
// client error) from a resolver that failed (IsTemporary, worth a retry).
type ResolveError struct {
	Host string
	Err  error
}

func (e *ResolveError) Error() string {
	return fmt.Sprintf("webhook host %q could not be resolved: %v", e.Host, e.Err)
}

func (e *ResolveError) Unwrap() error { return e.Err }
