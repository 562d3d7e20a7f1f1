package idempotency

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	ttl := 24 * time.Hour
	fp, other := []byte{1}, []byte{2}
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	done := &Response{Status: 201, Body: []byte(`{}`)}
	cases := []struct {
		name string
		rec  Record
		fp   []byte
		want Decision
	}{
		{"different command in flight", Record{Fingerprint: fp, LeaseExpiresAt: at(time.Minute)}, other, DecideMismatch},
		{"different command after completion", Record{Fingerprint: fp, Response: done, CompletedAt: at(-time.Hour)}, other, DecideMismatch},
		{"different command after expiry", Record{Fingerprint: fp, CompletedAt: at(-48 * time.Hour)}, other, DecideMismatch},
		{"finished", Record{Fingerprint: fp, Response: done, CompletedAt: at(-time.Hour)}, fp, DecideReplay},
		{"finished, erased early by another clock", Record{Fingerprint: fp, Response: &Response{Status: 201}, CompletedAt: at(-time.Hour)}, fp, DecideExpired},
		{"finished, window ends now", Record{Fingerprint: fp, Response: done, CompletedAt: at(-ttl)}, fp, DecideExpired},
		{"finished, body erased", Record{Fingerprint: fp, CompletedAt: at(-48 * time.Hour)}, fp, DecideExpired},
		{"in flight", Record{Fingerprint: fp, LeaseExpiresAt: at(time.Second)}, fp, DecideInFlight},
		{"lease ran out", Record{Fingerprint: fp, LeaseExpiresAt: at(0)}, fp, DecideTakeOver},
		{"lease released", Record{Fingerprint: fp}, fp, DecideTakeOver},
	}
	for _, c := range cases {
		if got := c.rec.Decide(c.fp, now, ttl); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
