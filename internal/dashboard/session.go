package dashboard

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
)

// A session is a row of dashboard_sessions (migration 00046), found by a
// hash of a random token that only the browser's cookie holds. It keeps the
// secret its holder logged in with, sealed under a key derived from the
// token: the table alone opens no session and reveals no secret, and each
// request authenticates the secret again, as the API authenticates its
// requests, so that a revoked key's sessions end within the API's cache
// life (apikeys.MaxCacheTTL). A table rather than a signed cookie: logging
// out ends the session on every instance, and no signing key has to be
// shared between instances or kept across restarts.

// sessionTTL is how long a session lasts from its login.
const sessionTTL = 12 * time.Hour

// The cookies: the session's token, and the login form's token, which the
// form posts back (the form is not in a session yet, and its POST is
// checked all the same).
const (
	sessionCookie = "paymentsapi_dashboard"
	loginCookie   = "paymentsapi_dashboard_login"
)

// errNoSession: no cookie, or no live session for it.
var errNoSession = errors.New("no dashboard session")

// token is a session's random token; what the service keeps and checks is
// derived from it.
type token [32]byte

func newToken() (token, error) {
	var t token
	_, err := rand.Read(t[:])
	return t, err
}

// derive is the HMAC of purpose under the token: one value per use, none of
// which tells another.
func (t token) derive(purpose string) []byte {
	m := hmac.New(sha256.New, t[:])
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// id is how the table finds the session.
func (t token) id() []byte { return t.derive("session id") }

// csrf is the session's token for its forms: every POST carries it.
func (t token) csrf() string { return base64.RawURLEncoding.EncodeToString(t.derive("csrf")) }

func (t token) String() string { return base64.RawURLEncoding.EncodeToString(t[:]) }

func parseToken(s string) (token, bool) {
	var t token
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != len(t) {
		return t, false
	}
	copy(t[:], b)
	return t, true
}

// sameToken compares two tokens of a form in constant time.
func sameToken(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// aead is the cipher that seals the session's secret.
func (t token) aead() (cipher.AEAD, error) {
	block, err := aes.NewCipher(t.derive("seal"))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func (t token) seal(secret string) ([]byte, error) {
	a, err := t.aead()
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, a.NonceSize(), a.NonceSize()+len(secret)+a.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return a.Seal(nonce, nonce, []byte(secret), t.id()), nil
}

func (t token) open(sealed []byte) (string, error) {
	a, err := t.aead()
	if err != nil {
		return "", err
	}
	if len(sealed) < a.NonceSize() {
		return "", errNoSession
	}
	plain, err := a.Open(nil, sealed[:a.NonceSize()], sealed[a.NonceSize():], t.id())
	if err != nil {
		return "", errNoSession
	}
	return string(plain), nil
}

// sessions are the statements on dashboard_sessions.
type sessions struct {
	db    *pgxpool.Pool
	clock clock.Clock
}

// sweepBatch bounds the expired sessions a login deletes.
const sweepBatch = 100

// create stores a new session for secret and returns its token. It first
// deletes a few expired sessions: logins keep the table to the live ones.
func (s sessions) create(ctx context.Context, secret string) (token, error) {
	now := s.clock.Now()
	if _, err := s.db.Exec(ctx, `DELETE FROM dashboard_sessions WHERE token_hash IN
		(SELECT token_hash FROM dashboard_sessions WHERE expires_at <= $1 LIMIT $2)`, now, sweepBatch); err != nil {
		return token{}, fmt.Errorf("delete expired dashboard sessions: %w", err)
	}
	t, err := newToken()
	if err != nil {
		return token{}, err
	}
	sealed, err := t.seal(secret)
	if err != nil {
		return token{}, err
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO dashboard_sessions (token_hash, sealed_secret, created_at, expires_at)
		VALUES ($1, $2, $3, $4)`, t.id(), sealed, now, now.Add(sessionTTL)); err != nil {
		return token{}, fmt.Errorf("store a dashboard session: %w", err)
	}
	return t, nil
}

// open returns the secret of t's live session, or errNoSession.
func (s sessions) open(ctx context.Context, t token) (string, error) {
	var sealed []byte
	err := s.db.QueryRow(ctx, `SELECT sealed_secret FROM dashboard_sessions WHERE token_hash = $1 AND expires_at > $2`,
		t.id(), s.clock.Now()).Scan(&sealed)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", errNoSession
	}
	if err != nil {
		return "", fmt.Errorf("read a dashboard session: %w", err)
	}
	return t.open(sealed)
}

// end deletes t's session.
func (s sessions) end(ctx context.Context, t token) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM dashboard_sessions WHERE token_hash = $1`, t.id()); err != nil {
		return fmt.Errorf("end a dashboard session: %w", err)
	}
	return nil
}

// cookie is a dashboard cookie: for the dashboard's paths only, out of
// scripts' reach, never sent by another site's page, and Secure when the
// browser reached the service over https.
func cookie(name, value string, maxAge time.Duration, secure bool) *http.Cookie {
	c := &http.Cookie{Name: name, Value: value, Path: basePath, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: secure, MaxAge: int(maxAge.Seconds())}
	if maxAge < 0 {
		c.MaxAge = -1
	}
	return c
}

// tokenCookie reads the token of cookie name from r.
func tokenCookie(r *http.Request, name string) (token, bool) {
	c, err := r.Cookie(name)
	if err != nil {
		return token{}, false
	}
	return parseToken(c.Value)
}
