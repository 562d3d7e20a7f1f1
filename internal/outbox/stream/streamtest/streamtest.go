// Package streamtest gives a test a replication slot of its own on its
// database (pgtest), for the outbox's stream (package outbox/stream), and
// drops it when the test ends: a database with a slot cannot be dropped,
// and slots are shared by every database of the test server.
package streamtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
)

// Slot returns a fresh slot name for the database pool is on, to be
// created by whatever reads it, and dropped when t ends (once its reader,
// whose connection ends a moment after its Close, has let go of it). It
// skips t if the server cannot decode (wal_level below logical): pgtest's
// own cluster can.
func Slot(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	var level string
	if err := pool.QueryRow(context.Background(), `SHOW wal_level`).Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		t.Skipf("the test server runs with wal_level=%s; logical decoding needs wal_level=logical (pgtest's own cluster has it)", level)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	slot := "test_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			var active bool
			err := pool.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return // never created
			case err == nil && !active:
				if _, err = pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err == nil {
					return
				}
			}
			if err != nil || clock.Sleep(ctx, 20*time.Millisecond) != nil {
				t.Errorf("streamtest: drop slot %s: %v (ctx: %v)", slot, err, ctx.Err())
				return
			}
		}
	})
	return slot
}
