// Package endpoints holds a tenant's webhook endpoints: the URLs the service
// sends its events to (internal/delivery sends them). Two operations, each
// built as every operation is (internal/operation) and registered as its own
// module:
//   - create_webhook_endpoint (POST /webhook-endpoints, CreateModule), whose
//     answer, and its replays within the replay window, are the only place
//     the endpoint's secret is shown; its routes also list, read and delete
//     endpoints (never showing a secret);
//   - rotate_webhook_secret (POST /webhook-endpoints/{endpointId}/rotate-secret,
//     RotateModule), which gives the endpoint a new secret and keeps the old
//     one signing for RotationOverlap, so that a receiver can switch without
//     missing a message.
//
// Neither calls anything outside the database: a key's first request writes
// the endpoint (or the new secret) with its claim, and stores the answer at
// once. The URL is checked against the destination policy
// (outbound.Policy.CheckURL) before anything is written; the delivery
// client checks it again at every connection.
package endpoints

import (
	"time"

	"github.com/paymentsapi/paymentsapi/internal/ids"
)

// The operations' names (their keys' scopes) and the resource types their
// keys create.
const (
	OperationCreate = "create_webhook_endpoint"
	OperationRotate = "rotate_webhook_secret"
	ResourceType    = "webhook_endpoint"
	RotationType    = "webhook_secret_rotation"
)

// RotationOverlap is how long a rotated-out secret keeps signing.
const RotationOverlap = 24 * time.Hour

// Status is whether an endpoint is sent messages.
type Status string

// The statuses of an endpoint. A disabled one (by a 410 Gone, or after five
// days without a success) is sent nothing more.
const (
	StatusEnabled  Status = "enabled"
	StatusDisabled Status = "disabled"
)

// Endpoint is a webhook endpoint as stored.
type Endpoint struct {
	ID          string
	TenantID    string
	URL         string
	EventTypes  []string // nil: every type
	Description string
	Status      Status
	// Secret signs every message; SecretID names the resource that set it
	// (the endpoint at creation, then each rotation).
	Secret, SecretID string
	CreatedAt        time.Time
	DisabledAt       *time.Time
	DisabledReason   string
}

// NewID returns a new endpoint id.
func NewID() string { return ids.New("we_") }

// View is an endpoint in answers. Secret is set only in the answers of
// create_webhook_endpoint and rotate_webhook_secret.
type View struct {
	EndpointID     string     `json:"endpointId"`
	URL            string     `json:"url"`
	EventTypes     []string   `json:"eventTypes"` // null: every type
	Description    string     `json:"description"`
	Status         Status     `json:"status"`
	Secret         string     `json:"secret,omitempty"`
	CreatedAt      time.Time  `json:"createdAt"`
	DisabledAt     *time.Time `json:"disabledAt,omitempty"`
	DisabledReason string     `json:"disabledReason,omitempty"`
}

// View is e as GET shows it: without its secret.
func (e Endpoint) View() View {
	return View{
		EndpointID: e.ID, URL: e.URL, EventTypes: e.EventTypes, Description: e.Description, Status: e.Status,
		CreatedAt: e.CreatedAt, DisabledAt: e.DisabledAt, DisabledReason: e.DisabledReason,
	}
}

// Outcome names a created endpoint in the engine's metrics and logs.
func (e Endpoint) Outcome() string { return "created" }
