// Package cursor is the one form of the listings' opaque cursors (GET
// /payments, GET /events): the position of the last item of a page, newest
// first, as its time and id.
package cursor

import (
	"encoding/base64"
	"errors"
	"strings"
	"time"
)

// ErrInvalid: the cursor was not produced by this API.
var ErrInvalid = errors.New("invalid cursor")

// Encode is the cursor after the item at (at, id).
func Encode(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + "|" + id))
}

// Decode reads a cursor made by Encode whose id validID accepts (the id
// goes to PostgreSQL: validID must refuse what it cannot hold), or
// returns ErrInvalid.
func Decode(s string, validID func(string) bool) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, "", ErrInvalid
	}
	ts, id, ok := strings.Cut(string(raw), "|")
	if !ok || !validID(id) {
		return time.Time{}, "", ErrInvalid
	}
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}, "", ErrInvalid
	}
	return at, id, nil
}
