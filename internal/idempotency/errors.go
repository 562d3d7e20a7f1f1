package idempotency

import (
	"errors"
	"time"
)

// The answers of the protocol that are not an operation's result. None is
// stored; the HTTP adapter answers each (internal/httpapi).
var (
	// ErrKeyReused: the key was used with a different command (422).
	ErrKeyReused = errors.New("this Idempotency-Key was already used with a different request")
)

// ErrCrashed marks an error that must end an owner's work as a crash
// would: nothing more is written, the key keeps its lease until it runs
// out. Failpoints in tests use it; any other error of an operation makes
// the engine let go of the key at once, so that a retry or the reconciler
// can take it over without waiting out the lease.
var ErrCrashed = errors.New("stopped as a crash would")

// KeyInUseError: the original request still owns the key (409). RetryAfter
// is the engine's one advice to clients on when to try again.
type KeyInUseError struct{ RetryAfter time.Duration }

func (e *KeyInUseError) Error() string {
	return "a request with this Idempotency-Key is still in progress; retry later"
}

// KeyExpiredError: the key's stored answer is past the replay window (409).
// Resource is what the key created, so the client can read it instead.
type KeyExpiredError struct{ Resource Resource }

func (e *KeyExpiredError) Error() string {
	return "the stored answer for this Idempotency-Key has expired; GET the " + e.Resource.Type + " instead"
}

// ResourceError is an error of the work on a key's resource (a refusal
// the client should retry, an operation's own error), naming the resource,
// so that an answer can tell the client which one it is about.
type ResourceError struct {
	Resource Resource
	Err      error
}

func (e *ResourceError) Error() string { return e.Err.Error() }
func (e *ResourceError) Unwrap() error { return e.Err }
