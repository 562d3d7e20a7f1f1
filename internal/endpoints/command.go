package endpoints

import (
	"crypto/sha256"
	"encoding/json"
	"slices"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// Limits of an endpoint's fields.
const (
	maxURLBytes         = 2048
	maxDescriptionBytes = 256
)

// CreateRequest is the JSON body of POST /webhook-endpoints.
type CreateRequest struct {
	URL        string   `json:"url"`
	EventTypes []string `json:"eventTypes"` // omitted or null: every type
	// Description is a note of the merchant's.
	Description string `json:"description"`
}

// Command is a validated, normalised create command. Its URL's destination
// is checked separately (Service.Prepare), since that needs the resolver.
type Command struct {
	URL         string
	EventTypes  []string // sorted, without repeats; nil: every type
	Description string
}

// validate checks r against the event names an endpoint may subscribe to.
func (r CreateRequest) validate(known map[string]bool) (Command, error) {
	var errs validate.Collector
	switch {
	case r.URL == "":
		errs.Add("url", "is required")
	case len(r.URL) > maxURLBytes || !validate.StorableText(r.URL):
		errs.Add("url", "must be a URL of at most 2048 bytes")
	}
	cmd := Command{URL: r.URL, Description: r.Description}
	if r.EventTypes != nil {
		if len(r.EventTypes) == 0 {
			errs.Add("eventTypes", "must name at least one event type, or be left out for every type")
		}
		for _, t := range r.EventTypes {
			if !known[t] {
				errs.Add("eventTypes", "must be event types such as payment.succeeded; "+quote(t)+" is none")
				break
			}
		}
		cmd.EventTypes = slices.Compact(slices.Sorted(slices.Values(r.EventTypes)))
	}
	if len(r.Description) > maxDescriptionBytes || !validate.StorableText(r.Description) {
		errs.Add("description", "must be text of at most 256 bytes")
	}
	if err := errs.Err(); err != nil {
		return Command{}, err
	}
	return cmd, nil
}

// quote shows a value a client sent in a message, bounded and printable.
func quote(s string) string {
	if len(s) > 64 || !validate.StorableText(s) {
		return "a value"
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// Fingerprint is the one definition of "the same create command". The
// secret is not part of it: the service draws it.
func (c Command) Fingerprint() []byte {
	canonical, _ := json.Marshal([]any{OperationCreate, c.URL, c.EventTypes, c.Description})
	sum := sha256.Sum256(canonical)
	return sum[:]
}

// RotateRequest is the JSON body of POST
// /webhook-endpoints/{endpointId}/rotate-secret; every field is optional.
type RotateRequest struct {
	// PreviousSecretExpiresIn is how long the secret being replaced keeps
	// signing, a Go duration from "0s" to "24h" (default RotationOverlap).
	PreviousSecretExpiresIn *string `json:"previousSecretExpiresIn"`
}

// overlap validates r: how long the replaced secret keeps signing.
func (r RotateRequest) overlap() (time.Duration, error) {
	if r.PreviousSecretExpiresIn == nil {
		return RotationOverlap, nil
	}
	var errs validate.Collector
	d, err := time.ParseDuration(*r.PreviousSecretExpiresIn)
	if err != nil || d < 0 || d > MaxRotationOverlap {
		errs.Add("previousSecretExpiresIn", `must be a duration from "0s" to "24h", such as "1h30m"`)
		return 0, errs.Err()
	}
	return d, nil
}

// rotateFingerprint is the one definition of "the same rotation": of the
// same endpoint, keeping the replaced secret for the same time. The default
// overlap's is the fingerprint of a rotation before the overlap could be
// chosen, so that a key the previous release stored is the same command.
func rotateFingerprint(endpointID string, overlap time.Duration) []byte {
	parts := []any{OperationRotate, endpointID}
	if overlap != RotationOverlap {
		parts = append(parts, overlap.Seconds())
	}
	canonical, _ := json.Marshal(parts)
	sum := sha256.Sum256(canonical)
	return sum[:]
}
