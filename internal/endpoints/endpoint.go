// Package endpoints holds a tenant's webhook endpoints: the URLs the service
// sends its events to (internal/delivery sends them). Two operations, each
// built as every operation is (internal/operation) and registered as its own
// module:
//   - create_webhook_endpoint (POST /webhook-endpoints, CreateModule), whose
//     first answer shows the endpoint's new secret; its routes also list,
//     read and delete endpoints (never showing a secret), and reveal an
//     endpoint's secret to its tenant (GET /webhook-endpoints/{endpointId}/secret);
//   - rotate_webhook_secret (POST /webhook-endpoints/{endpointId}/rotate-secret,
//     RotateModule), which gives the endpoint a new secret and keeps the old
//     one signing for up to MaxRotationOverlap (RotationOverlap unless the
//     request says less), so that a receiver can switch without missing a
//     message.
//
// Neither calls anything outside the database: a key's first request writes
// the endpoint (or the new secret) with its claim, and stores the answer at
// once. The URL is checked against the destination policy
// (outbound.Policy.CheckURL) before anything is written; the delivery
// client checks it again at every connection.
//
// Secrets. An endpoint's secrets are stored sealed (package secretbox,
// under SECRETS_KEY, bound to the endpoint's id): the database holds none
// in the clear. The answer a key stores for replay holds none either: the
// first answer of a create or a rotation shows the secret (the operations
// are idempotency.Disclosing), and its replays say "secret": null and
// "secretShownOnce": true. Without SECRETS_KEY no endpoint can be created
// or rotated, nor a secret revealed (ErrSecretsKeyMissing).
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

// RotationOverlap is how long a rotated-out secret keeps signing when the
// rotation does not say (previousSecretExpiresIn), and MaxRotationOverlap
// the longest it may say.
const (
	RotationOverlap    = 24 * time.Hour
	MaxRotationOverlap = 24 * time.Hour
)

// MaxPerTenant is how many endpoints a tenant may have (deleted ones do not
// count): each event is sent to every one, so the number bounds the work
// one event makes.
const MaxPerTenant = 16

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
	// Secret signs every message, opened from its sealed form (empty when
	// it was not opened: listings do not); SecretID names the resource that
	// set it (the endpoint at creation, then each rotation).
	Secret, SecretID string
	// sealed is Secret as stored, sealed under SECRETS_KEY.
	sealed         string
	CreatedAt      time.Time
	DisabledAt     *time.Time
	DisabledReason string
}

// NewID returns a new endpoint id.
func NewID() string { return ids.New("we_") }

// View is an endpoint as GET shows it: without its secret.
type View struct {
	EndpointID     string     `json:"endpointId"`
	URL            string     `json:"url"`
	EventTypes     []string   `json:"eventTypes"` // null: every type
	Description    string     `json:"description"`
	Status         Status     `json:"status"`
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

// SecretView is an endpoint in the answers of create_webhook_endpoint and
// rotate_webhook_secret: with its secret in the first answer, with
// "secret": null in the stored one that replays answer; SecretShownOnce
// says so in both.
type SecretView struct {
	EndpointID      string     `json:"endpointId"`
	URL             string     `json:"url"`
	EventTypes      []string   `json:"eventTypes"`
	Description     string     `json:"description"`
	Status          Status     `json:"status"`
	Secret          *string    `json:"secret"`
	SecretShownOnce bool       `json:"secretShownOnce"`
	CreatedAt       time.Time  `json:"createdAt"`
	DisabledAt      *time.Time `json:"disabledAt,omitempty"`
	DisabledReason  string     `json:"disabledReason,omitempty"`
}

// secretView is e with its secret shown (the first answer), or not.
func (e Endpoint) secretView(shown bool) SecretView {
	v := SecretView{
		EndpointID: e.ID, URL: e.URL, EventTypes: e.EventTypes, Description: e.Description, Status: e.Status,
		SecretShownOnce: true, CreatedAt: e.CreatedAt, DisabledAt: e.DisabledAt, DisabledReason: e.DisabledReason,
	}
	if shown {
		secret := e.Secret
		v.Secret = &secret
	}
	return v
}

// Outcome names a created endpoint in the engine's metrics and logs.
func (e Endpoint) Outcome() string { return "created" }
