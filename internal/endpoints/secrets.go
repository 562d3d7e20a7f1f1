package endpoints

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/secretbox"
)

// This file holds how an endpoint's secrets are sealed and opened.

// ErrSecretsKeyMissing: the server has no SECRETS_KEY, so it can neither
// seal a new secret nor open a stored one. The API answers it 503
// SECRETS_KEY_MISSING.
var ErrSecretsKeyMissing = errors.New("SECRETS_KEY is not set: webhook secrets can be neither stored nor read")

// seal seals secret, endpoint id's, with box: bound to the endpoint, so
// that it opens in that endpoint's row only.
func seal(box *secretbox.Box, id, secret string) (string, error) {
	if box == nil {
		return "", ErrSecretsKeyMissing
	}
	return box.Seal(secret, id)
}

// OpenSecret opens sealed, a secret of endpoint id as stored.
func OpenSecret(box *secretbox.Box, id, sealed string) (string, error) {
	if box == nil {
		return "", ErrSecretsKeyMissing
	}
	secret, err := box.Open(sealed, id)
	if err != nil {
		return "", fmt.Errorf("open the secret of webhook endpoint %s: %w", id, err)
	}
	return secret, nil
}

// open sets e.Secret from its sealed form.
func (e *Endpoint) open(box *secretbox.Box) error {
	secret, err := OpenSecret(box, e.ID, e.sealed)
	if err != nil {
		return err
	}
	e.Secret = secret
	return nil
}

// opened is the endpoint read reads, its secret opened.
func opened(box *secretbox.Box, read func() (Endpoint, error)) (Endpoint, error) {
	e, err := read()
	if err != nil {
		return Endpoint{}, err
	}
	if err := e.open(box); err != nil {
		return Endpoint{}, err
	}
	return e, nil
}

// Secrets returns the secrets that sign endpoint id's messages at now: its
// secret, then the one a rotation replaced while that one still signs.
func Secrets(ctx context.Context, db *pgxpool.Pool, box *secretbox.Box, id string, now time.Time) ([]string, error) {
	var (
		sealed, previousSealed string
		expires                *time.Time
	)
	err := db.QueryRow(ctx, `SELECT COALESCE(secret_sealed, ''), COALESCE(previous_secret_sealed, ''),
		previous_secret_expires_at FROM webhook_endpoints WHERE id = $1`, id).Scan(&sealed, &previousSealed, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read the secrets of webhook endpoint %s: %w", id, err)
	}
	if sealed == "" {
		return nil, fmt.Errorf("webhook endpoint %s has no secret", id)
	}
	current, err := OpenSecret(box, id, sealed)
	if err != nil {
		return nil, err
	}
	out := []string{current}
	if expires != nil && expires.After(now) && previousSealed != "" {
		previous, err := OpenSecret(box, id, previousSealed)
		if err != nil {
			return nil, err
		}
		out = append(out, previous)
	}
	return out, nil
}

// Resealing is what Reseal did.
type Resealing struct {
	// Resealed counts the endpoints whose secrets it sealed again under
	// the current key.
	Resealed int
	// Unreadable names the endpoints holding a secret sealed under a key
	// the box does not hold: they stay as they are, and whatever key
	// sealed them must stay in SECRETS_KEY_OTHERS until they are rotated.
	Unreadable []string
	// Changed names the endpoints whose secrets changed between the read
	// and the write (a rotation meanwhile): run it again for them.
	Changed []string
}

// Reseal seals again, under box's current key, every stored endpoint
// secret sealed under another key box holds: the step of a SECRETS_KEY
// rotation after which the old key can be dropped. Deleted endpoints are
// included, so that no value is left that only the old key opens. Each
// endpoint is written only if its sealed values are still what was read.
func Reseal(ctx context.Context, db *pgxpool.Pool, box *secretbox.Box) (Resealing, error) {
	var r Resealing
	if box == nil {
		return r, ErrSecretsKeyMissing
	}
	rows, err := db.Query(ctx, `SELECT id, COALESCE(secret_sealed, ''), COALESCE(previous_secret_sealed, '')
		FROM webhook_endpoints WHERE secret_sealed IS NOT NULL OR previous_secret_sealed IS NOT NULL ORDER BY id`)
	if err != nil {
		return r, fmt.Errorf("read sealed webhook secrets: %w", err)
	}
	type stored struct{ id, secret, previous string }
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (stored, error) {
		var s stored
		return s, row.Scan(&s.id, &s.secret, &s.previous)
	})
	if err != nil {
		return r, fmt.Errorf("read sealed webhook secrets: %w", err)
	}
	for _, s := range found {
		secret, moved, err := resealOne(box, s.id, s.secret)
		if err != nil {
			if errors.Is(err, secretbox.ErrUnknownKey) {
				r.Unreadable = append(r.Unreadable, s.id)
				continue
			}
			return r, fmt.Errorf("reseal the secret of webhook endpoint %s: %w", s.id, err)
		}
		previous, movedPrevious, err := resealOne(box, s.id, s.previous)
		if err != nil {
			if errors.Is(err, secretbox.ErrUnknownKey) {
				r.Unreadable = append(r.Unreadable, s.id)
				continue
			}
			return r, fmt.Errorf("reseal the previous secret of webhook endpoint %s: %w", s.id, err)
		}
		if !moved && !movedPrevious {
			continue
		}
		tag, err := db.Exec(ctx, `
			UPDATE webhook_endpoints SET secret_sealed = NULLIF($2, ''), previous_secret_sealed = NULLIF($3, '')
			WHERE id = $1 AND COALESCE(secret_sealed, '') = $4 AND COALESCE(previous_secret_sealed, '') = $5`,
			s.id, secret, previous, s.secret, s.previous)
		if err != nil {
			return r, fmt.Errorf("reseal the secrets of webhook endpoint %s: %w", s.id, err)
		}
		if tag.RowsAffected() == 0 {
			r.Changed = append(r.Changed, s.id)
			continue
		}
		r.Resealed++
	}
	return r, nil
}

// resealOne is box.Reseal of endpoint id's sealed value, where an empty
// value stays empty.
func resealOne(box *secretbox.Box, id, sealed string) (string, bool, error) {
	if sealed == "" {
		return "", false, nil
	}
	return box.Reseal(sealed, id)
}
