package apikeys

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
)

// MinPepperLength is the shortest API_KEY_PEPPER accepted.
const MinPepperLength = 32

// Hasher turns a secret into its stored form: an HMAC-SHA256 under the
// pepper, or without one the plain SHA-256. The zero Hasher has no pepper.
type Hasher struct {
	pepper []byte
}

// NewHasher returns the Hasher of pepper; an empty pepper means the plain
// SHA-256, and a shorter one than MinPepperLength is refused.
func NewHasher(pepper string) (Hasher, error) {
	if pepper != "" && len(pepper) < MinPepperLength {
		return Hasher{}, errors.New("API_KEY_PEPPER must be at least 32 characters")
	}
	return Hasher{pepper: []byte(pepper)}, nil
}

// Peppered reports whether secrets are stored keyed.
func (h Hasher) Peppered() bool { return len(h.pepper) > 0 }

// Sum is the form a new key's secret is stored in.
func (h Hasher) Sum(secret string) []byte {
	if !h.Peppered() {
		return plain(secret)
	}
	m := hmac.New(sha256.New, h.pepper)
	m.Write([]byte(secret))
	return m.Sum(nil)
}

// forms are every form a stored secret may have: keys stored before the
// pepper was set (or copied from the release before it) hold the plain
// SHA-256, and keep working.
func (h Hasher) forms(secret string) [][]byte {
	if !h.Peppered() {
		return [][]byte{plain(secret)}
	}
	return [][]byte{h.Sum(secret), plain(secret)}
}

func plain(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}
