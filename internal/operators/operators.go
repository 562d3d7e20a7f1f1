// Package operators authenticates the service's operators: the people
// named by OPERATOR_KEYS, who see every tenant's audit log. They are
// configured, not stored, so that the database's own users cannot make
// one.
package operators

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"
)

// Keys are the configured operators' secrets, by name.
type Keys struct {
	byName map[string][sha256.Size]byte
}

// Parse reads OPERATOR_KEYS: comma-separated name:secret pairs. A name is
// what the audit records (operator:<name>).
func Parse(s string) (Keys, error) {
	k := Keys{byName: map[string][sha256.Size]byte{}}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, secret, ok := strings.Cut(item, ":")
		name, secret = strings.TrimSpace(name), strings.TrimSpace(secret)
		if !ok || name == "" || secret == "" {
			return Keys{}, fmt.Errorf("OPERATOR_KEYS: %q is not a name:secret pair", redact(item))
		}
		if !validName(name) {
			return Keys{}, fmt.Errorf("OPERATOR_KEYS: the name %q may hold only letters, digits, '.', '-', '_' and '@'", name)
		}
		if _, dup := k.byName[name]; dup {
			return Keys{}, fmt.Errorf("OPERATOR_KEYS: operator %q appears twice", name)
		}
		k.byName[name] = sha256.Sum256([]byte(secret))
	}
	return k, nil
}

// redact keeps a malformed entry recognisable without printing a secret.
func redact(item string) string {
	if name, _, ok := strings.Cut(item, ":"); ok {
		return name + ":***"
	}
	return "***"
}

func validName(s string) bool {
	for _, c := range s {
		if !(c == '-' || c == '_' || c == '.' || c == '@' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return len(s) <= 64
}

// Len is how many operators are configured.
func (k Keys) Len() int { return len(k.byName) }

// Authenticate returns the name of the operator whose secret this is. Every
// configured secret is compared, in constant time, so that the answer's
// timing tells nothing of which one nearly matched.
func (k Keys) Authenticate(secret string) (string, bool) {
	sum := sha256.Sum256([]byte(secret))
	found := ""
	for name, want := range k.byName {
		if subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
			found = name
		}
	}
	return found, found != ""
}
