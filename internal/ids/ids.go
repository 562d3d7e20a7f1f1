// Package ids generates the identifiers the service hands out.
package ids

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1" // UUIDv5 is defined with SHA-1; no security rests on it
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"
)

var lowerBase32 = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// New returns a random, unguessable id with the prefix of its resource
// type, such as "pay_5k3x...": 128 random bits, Crockford base32.
func New(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux (Go 1.24+ panics instead)
	return prefix + lowerBase32.EncodeToString(b[:])
}

// derivedKey keys the hash of Derive. It is no secret: it keeps the ids
// derived here apart from any other use of SHA-256 over the same parts, and
// it must never change, or a retry after a lost commit would derive another
// id (and so another provider key) than the original did.
const derivedKey = "paymentsapi derived resource id v1"

// Derive returns the id, with prefix and in New's format, that the given
// parts determine: the same parts give the same id, on any instance and
// against any database, and different parts give ids as unrelated as New's.
// An idempotent command's resource takes its id from its scope and command
// (tenant, operation, key, fingerprint), so that a retry that finds none of
// its key's records (a database failover lost the last commits) recreates
// the resource under the id it had, and the provider, which knows the
// resource by a key derived from that id, answers the original charge
// instead of making a second. Each part is length-prefixed, so no two lists
// of parts hash alike.
func Derive(prefix string, parts ...[]byte) string {
	h := hmac.New(sha256.New, []byte(derivedKey))
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return prefix + lowerBase32.EncodeToString(h.Sum(nil)[:16])
}

// NewEventID returns a UUIDv7 (RFC 9562) string: time-ordered, so outbox rows
// sort by creation, and random in its low 74 bits.
func NewEventID(now time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	ms := uint64(now.UnixMilli())
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(b[0:6], ts[2:8])
	return formatUUID(b, 7)
}

// NameBasedUUID returns the version 5 UUID (RFC 9562 5.5) of name in
// namespace: the same name gives the same UUID.
func NameBasedUUID(namespace [16]byte, name string) string {
	h := sha1.New()
	h.Write(namespace[:])
	h.Write([]byte(name))
	var b [16]byte
	copy(b[:], h.Sum(nil))
	return formatUUID(b, 5)
}

// formatUUID sets b's version and RFC 9562 variant, and writes it in the
// 8-4-4-4-12 form.
func formatUUID(b [16]byte, version byte) string {
	b[6] = b[6]&0x0f | version<<4
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}

// IsUUID reports whether s is a UUID in its text form (an event id), in
// either case.
func IsUUID(s string) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	_, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	return err == nil
}
