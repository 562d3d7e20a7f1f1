// Package secretbox seals the secrets the service must keep readable (the
// signing secrets of merchants' webhook endpoints) with AES-256-GCM under
// the server's SECRETS_KEY, so that a copy of the database, a backup or a
// replica, holds none of them in the clear.
//
// A sealed value is text: "v1:" and the key's id, ":", and the unpadded
// base64url of a random 12-byte nonce followed by the ciphertext and its
// tag. The key id names which key sealed it, so that a Box holding a new
// key and the old ones (New's older keys) opens what either sealed while
// everything is sealed again under the new one: a key can be rotated
// without a moment when stored secrets cannot be read. Each value is bound
// to what it belongs to (Seal's context, e.g. the endpoint's id), so that
// a sealed value copied into another row does not open there.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeyBytes is the length of a key: AES-256.
const KeyBytes = 32

// version is the prefix of every value this package seals.
const version = "v1"

// ErrNotSealed: a value is not one this package sealed (no "v1:" prefix, or
// a malformed one).
var ErrNotSealed = errors.New("secretbox: not a sealed value")

// ErrUnknownKey: a value was sealed under a key the Box does not hold.
var ErrUnknownKey = errors.New("secretbox: sealed under a key this server does not hold (SECRETS_KEY)")

// ParseKey reads a key as SECRETS_KEY gives it: the standard or URL-safe
// base64 (padded or not) of exactly 32 bytes.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != KeyBytes {
				return nil, fmt.Errorf("the key is %d bytes, want %d (openssl rand -base64 32 makes one)", len(b), KeyBytes)
			}
			return b, nil
		}
	}
	return nil, errors.New("the key is not base64 (openssl rand -base64 32 makes one)")
}

// NewKey returns a new random key, encoded as ParseKey reads it.
func NewKey() (string, error) {
	b := make([]byte, KeyBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("secretbox: new key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// Box seals under one key and opens under it or any older one it holds.
type Box struct {
	current string                 // the id of the key Seal uses
	keys    map[string]cipher.AEAD // by id
}

// New returns the Box that seals under current and opens what current or
// any of older sealed. Each key is KeyBytes long.
func New(current []byte, older ...[]byte) (*Box, error) {
	b := &Box{keys: map[string]cipher.AEAD{}}
	for i, key := range append([][]byte{current}, older...) {
		if len(key) != KeyBytes {
			return nil, fmt.Errorf("secretbox: key %d is %d bytes, want %d", i+1, len(key), KeyBytes)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("secretbox: %w", err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("secretbox: %w", err)
		}
		id := keyID(key)
		if i == 0 {
			b.current = id
		}
		if _, dup := b.keys[id]; !dup {
			b.keys[id] = aead
		}
	}
	return b, nil
}

// keyID names a key without revealing it: the first 4 bytes of a hash of
// it, in hex.
func keyID(key []byte) string {
	sum := sha256.Sum256(append([]byte("paymentsapi secretbox key id\x00"), key...))
	return hex.EncodeToString(sum[:4])
}

// Seal seals plaintext, bound to context (what it belongs to: Open needs
// the same context).
func (b *Box) Seal(plaintext, context string) (string, error) {
	aead := b.keys[b.current]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("secretbox: nonce: %w", err)
	}
	sealed := aead.Seal(nonce, nonce, []byte(plaintext), b.additional(b.current, context))
	return version + ":" + b.current + ":" + base64.RawURLEncoding.EncodeToString(sealed), nil
}

// Open returns what Seal sealed under context. It fails with ErrNotSealed
// for a value Seal did not make, ErrUnknownKey for one sealed under a key
// the Box does not hold, and an error for a value altered since, or
// opened under another context.
func (b *Box) Open(sealed, context string) (string, error) {
	id, ok := keyOf(sealed)
	if !ok {
		return "", ErrNotSealed
	}
	payload := sealed[len(version)+1+len(id)+1:]
	aead, ok := b.keys[id]
	if !ok {
		return "", ErrUnknownKey
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || len(raw) < aead.NonceSize()+aead.Overhead() {
		return "", ErrNotSealed
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], b.additional(id, context))
	if err != nil {
		return "", errors.New("secretbox: the sealed value does not open: altered, or not this one's")
	}
	return string(plain), nil
}

// additional is the authenticated data of a value: its format, its key and
// its context, so that none of them can be swapped.
func (b *Box) additional(id, context string) []byte {
	return []byte(version + ":" + id + ":" + context)
}

// Sealed reports whether s has the form of a sealed value (without opening
// it).
func Sealed(s string) bool { return strings.HasPrefix(s, version+":") }

// Reseal returns sealed sealed again under the Box's current key, and
// whether that changed anything: a value already under the current key is
// returned as it is. It fails as Open does, for a value under a key the Box
// does not hold among them.
func (b *Box) Reseal(sealed, context string) (string, bool, error) {
	if id, ok := keyOf(sealed); ok && id == b.current {
		return sealed, false, nil
	}
	plain, err := b.Open(sealed, context)
	if err != nil {
		return "", false, err
	}
	again, err := b.Seal(plain, context)
	return again, err == nil, err
}

// keyOf is the id of the key sealed was sealed under, read from its prefix.
func keyOf(sealed string) (string, bool) {
	v, rest, ok := strings.Cut(sealed, ":")
	if !ok || v != version {
		return "", false
	}
	id, _, ok := strings.Cut(rest, ":")
	return id, ok
}

// FromKey is New of the keys encoded as ParseKey reads them (SECRETS_KEY,
// then SECRETS_KEY_OTHERS): it seals under current and opens under any.
func FromKey(current string, others ...string) (*Box, error) {
	key, err := ParseKey(current)
	if err != nil {
		return nil, err
	}
	older := make([][]byte, 0, len(others))
	for i, o := range others {
		k, err := ParseKey(o)
		if err != nil {
			return nil, fmt.Errorf("other key %d: %w", i+1, err)
		}
		older = append(older, k)
	}
	return New(key, older...)
}
