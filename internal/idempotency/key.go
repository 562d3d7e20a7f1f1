// Package idempotency remembers what the server did for each idempotency key,
// so that a retry is answered from memory: a replay of the stored response, a
// conflict while the original is in flight, a refusal when the same key
// carries a different command, or a takeover when the original died.
//
// A key is scoped to (tenant, operation, key). The row inserted first is the
// lock: its owner holds a lease and a fencing token, and every write the owner
// makes is conditioned on that token, so an owner whose lease was taken over
// cannot overwrite the new owner's work.
package idempotency

import (
	"errors"
	"strings"
)

// Header is the request header that carries the key.
const Header = "Idempotency-Key"

// MaxKeyLength is the longest key accepted.
const MaxKeyLength = 255

// Errors returned by ParseKey.
var (
	ErrKeyMissing = errors.New("the Idempotency-Key header is required")
	ErrKeyInvalid = errors.New("the Idempotency-Key header must be 1 to 255 printable ASCII characters")
)

// ParseKey validates the values of the Idempotency-Key header. Exactly one
// value is accepted; the structured-field string form `"abc"` (RFC 8941)
// means abc.
func ParseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", ErrKeyMissing
	case 1:
	default:
		return "", ErrKeyInvalid
	}
	v := strings.TrimSpace(values[0])
	if v == "" {
		return "", ErrKeyMissing
	}
	if strings.HasPrefix(v, `"`) {
		unq, ok := unquoteSFString(v)
		if !ok {
			return "", ErrKeyInvalid
		}
		v = unq
	}
	if len(v) == 0 || len(v) > MaxKeyLength {
		return "", ErrKeyInvalid
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "", ErrKeyInvalid
		}
	}
	return v, nil
}

// serviceKeyPrefix begins every ServiceKey: a character outside printable
// ASCII, which ParseKey refuses.
const serviceKeyPrefix = "service\u00b7"

// ServiceKey is the key, named name, of a command the service issues to
// itself (Engine.QueueScheduled): no client can send it, since ParseKey
// refuses its first bytes, so no client can take it first (and keep the
// service's own command from ever being scheduled).
func ServiceKey(name string) string { return serviceKeyPrefix + name }

// IsServiceKey reports whether key is a ServiceKey.
func IsServiceKey(key string) bool { return strings.HasPrefix(key, serviceKeyPrefix) }

// unquoteSFString decodes an RFC 8941 sf-string: DQUOTE *chr DQUOTE, where
// only \" and \\ are escapes.
func unquoteSFString(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	body := s[1 : len(s)-1]
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '\\':
			i++
			if i == len(body) || (body[i] != '"' && body[i] != '\\') {
				return "", false
			}
			b.WriteByte(body[i])
		case c == '"':
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
