package outbound

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Header names of a Standard Webhooks delivery.
const (
	HeaderID        = standardwebhooks.HeaderWebhookID
	HeaderTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderSignature = standardwebhooks.HeaderWebhookSignature
)

// secretPrefix marks a Standard Webhooks secret; what follows is the base64
// of the HMAC key's bytes.
const secretPrefix = "whsec_"

// secretBytes is the key length: 32 bytes (256 bits, SHA-256's output
// size), within the spec's 24 to 64.
const secretBytes = 32

// NewSecret returns a new endpoint secret, "whsec_" and the standard base64
// of 32 bytes from crypto/rand.
func NewSecret() (string, error) {
	key := make([]byte, secretBytes)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("outbound: new webhook secret: %w", err)
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// Sign returns the Standard Webhooks headers for one delivery attempt of
// body: webhook-id (msgID, the same on every attempt so receivers can
// deduplicate), webhook-timestamp (at in unix seconds, this attempt's time)
// and webhook-signature, one "v1,<base64>" per secret, space-separated: two
// secrets are live while an endpoint's secret is being rotated, and a
// receiver holding either one verifies. The signatures come from the
// Standard Webhooks library.
func Sign(msgID string, at time.Time, body []byte, secrets ...string) (http.Header, error) {
	if msgID == "" {
		return nil, errors.New("outbound: sign: empty message id")
	}
	// The id is a header value and part of the signed content: no
	// whitespace or control characters, which would break either.
	if i := strings.IndexFunc(msgID, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		return nil, fmt.Errorf("outbound: sign: message id %q has a space or control character", msgID)
	}
	if len(secrets) == 0 {
		return nil, errors.New("outbound: sign: no secret")
	}
	sigs := make([]string, 0, len(secrets))
	for i, secret := range secrets {
		wh, err := newWebhook(secret)
		if err != nil {
			return nil, fmt.Errorf("outbound: sign: secret %d: %w", i+1, err)
		}
		sig, err := wh.Sign(msgID, at, body)
		if err != nil {
			return nil, fmt.Errorf("outbound: sign: %w", err)
		}
		sigs = append(sigs, sig)
	}
	h := http.Header{}
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(HeaderSignature, strings.Join(sigs, " "))
	return h, nil
}

// Verify checks headers and body against secret with the Standard Webhooks
// library, as a receiver does: one of the signatures must match, and the
// timestamp must be within the library's 5 minutes of now (against replays).
// It serves the tests, the example receiver and `paymentsctl listen`.
func Verify(secret string, headers http.Header, body []byte) error {
	wh, err := newWebhook(secret)
	if err != nil {
		return fmt.Errorf("outbound: verify: %w", err)
	}
	if err := wh.Verify(body, headers); err != nil {
		return fmt.Errorf("outbound: verify: %w", err)
	}
	return nil
}

// newWebhook builds the library's signer, first refusing what it would
// take silently: a secret without the whsec_ prefix (it accepts one) or an
// empty key (HMAC with no key signs, but proves nothing).
func newWebhook(secret string) (*standardwebhooks.Webhook, error) {
	encoded, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return nil, errors.New(`secret does not start with "whsec_"`)
	}
	if encoded == "" {
		return nil, errors.New("secret has an empty key")
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("secret is not whsec_ and base64: %w", err)
	}
	return wh, nil
}
