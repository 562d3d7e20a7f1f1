// Package query is the one rule of the API's query strings. Each route
// declares the parameters it takes (Declare); the HTTP adapter refuses a
// request that gives any other, or one of them twice (Check), before the
// route's handler runs, as the decoder refuses a body's unknown members; and
// the handler reads the parameters with a Reader, which gathers what is
// wrong with their values into the same VALIDATION_FAILED answer.
//
// A parameter that the service silently ignored would let a client believe
// it had filtered a listing when it had not, so nothing is ignored: an
// unknown name, a repeated one, a pair that is not URL-encoded, or a pair
// that net/url would drop (one holding a semicolon) is refused.
package query

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// Declare returns h as the handler of a route that takes the query
// parameters names. A route whose handler is not declared takes none: any
// parameter given to it is unknown.
func Declare(h http.HandlerFunc, names ...string) http.Handler {
	return declared{HandlerFunc: h, names: slices.Sorted(slices.Values(names))}
}

type declared struct {
	http.HandlerFunc
	names []string
}

// Names returns the query parameters the route handled by h takes: those
// Declare named, in order, or none when h was not declared.
func Names(h http.Handler) []string {
	if d, ok := h.(declared); ok {
		return d.names
	}
	return nil
}

// Messages of Check's refusals.
const (
	UnknownMessage  = "is not a parameter of this operation"
	RepeatedMessage = "is given more than once: give each parameter once (a list of values is comma-separated)"
	EncodingMessage = "is not URL-encoded UTF-8 text: escape each reserved character, such as %2B for +, and never send %00 or a semicolon"
)

// Check applies the rule of every route's query string (raw, as the
// request line has it) to a route that takes the parameters names
// (sorted): each pair names one of them, no name comes twice, and each pair
// is URL-encoded text PostgreSQL can hold, without a semicolon (net/url
// drops such a pair: its value would be ignored). It answers a
// *validate.Error naming each parameter that breaks the rule, in the order
// of the query string, or nil.
func Check(raw string, names []string) error {
	var (
		errs   validate.Collector
		seen   = map[string]bool{}
		failed = map[string]bool{} // each name is named once in the answer
	)
	fail := func(name, msg string) {
		if !failed[name] {
			failed[name] = true
			errs.Add(name, msg)
		}
	}
	for pair := range strings.SplitSeq(raw, "&") {
		if pair == "" {
			continue // "a=1&&b=2": net/url skips it too
		}
		rawName, rawValue, _ := strings.Cut(pair, "=")
		name, nameErr := url.QueryUnescape(rawName)
		value, valueErr := url.QueryUnescape(rawValue)
		switch {
		case nameErr != nil || !validate.StorableText(name):
			fail(printable(rawName), EncodingMessage)
		case valueErr != nil || !validate.StorableText(value) || strings.Contains(pair, ";"):
			fail(name, EncodingMessage)
		case !slices.Contains(names, name):
			fail(name, UnknownMessage+known(names))
		case seen[name]:
			fail(name, RepeatedMessage)
		}
		seen[name] = true
	}
	return errs.Err()
}

// known is the end of UnknownMessage: the parameters the route takes.
func known(names []string) string {
	if len(names) == 0 {
		return ": it takes no query parameters"
	}
	return " (" + strings.Join(names, ", ") + ")"
}

// printable is a name that could not be decoded, as the answer names it:
// its raw bytes, with those that are not UTF-8 text replaced.
func printable(raw string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(raw, "\x00", ""), "\uFFFD")
}
