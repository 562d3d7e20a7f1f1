package idempotency

import (
	"bytes"
	"time"
)

// Scope identifies a key: the same key under another tenant or operation is
// another key.
type Scope struct {
	Tenant    string
	Operation string
	Key       string
}

// Response is a final answer stored for replay, byte for byte.
type Response struct {
	Status  int               `json:"-"`
	Headers map[string]string `json:"headers"` // Content-Type, Location, ...
	Body    []byte            `json:"-"`
}

// Resource names what a key's first request created: any operation's
// resource, by its type (such as "order") and id.
type Resource struct {
	Type string
	ID   string
}

// Record is what the server remembers about a key.
type Record struct {
	ID             int64 // the row: every write addresses it by ID and FencingToken
	Scope          Scope
	Fingerprint    []byte
	Resource       Resource
	FencingToken   int64
	LeaseExpiresAt *time.Time // nil: nobody owns the key now
	Response       *Response  // nil until a final answer is stored
	CreatedAt      time.Time
	CompletedAt    *time.Time
	ManualReviewAt *time.Time // when the key was left for a person to resolve (nil: it is not)
}

// replay is the reply that replays r's stored answer.
func (r Record) replay() Reply {
	return Reply{Response: *r.Response, Replayed: true, Resource: r.Resource}
}

// Decision is how a request that found an existing record is answered.
type Decision int

// The decisions, in the order Decide considers them.
const (
	// DecideMismatch: the key was used for a different command. 422.
	DecideMismatch Decision = iota + 1
	// DecideExpired: the stored answer is older than the replay window. 409.
	DecideExpired
	// DecideReplay: answer with the stored response.
	DecideReplay
	// DecideInFlight: another request owns the key and its lease is live. 409.
	DecideInFlight
	// DecideTakeOver: no live owner and no final answer: take the key over
	// and resume the operation from its recorded state.
	DecideTakeOver
)

func (d Decision) String() string {
	switch d {
	case DecideMismatch:
		return "mismatch"
	case DecideExpired:
		return "expired"
	case DecideReplay:
		return "replay"
	case DecideInFlight:
		return "in_flight"
	case DecideTakeOver:
		return "take_over"
	}
	return "unknown"
}

// Decide answers a request carrying fingerprint for an existing record. A
// different command is refused whatever the record's state; a final answer is
// replayed only inside the replay window (ttl after completion).
func (r Record) Decide(fingerprint []byte, now time.Time, ttl time.Duration) Decision {
	switch {
	case !bytes.Equal(r.Fingerprint, fingerprint):
		return DecideMismatch
	case r.CompletedAt != nil && (!now.Before(r.CompletedAt.Add(ttl)) || r.Response == nil || r.Response.Body == nil):
		// Past the window, or already erased by a clean-up whose clock or
		// TTL differs from ours: never replay what is no longer whole.
		return DecideExpired
	case r.Response != nil:
		return DecideReplay
	case r.LeaseExpiresAt != nil && now.Before(*r.LeaseExpiresAt):
		return DecideInFlight
	default:
		return DecideTakeOver
	}
}
