package database_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paymentsapi/paymentsapi/internal/database"
)

// TestUnavailable: errors that mean "the database is away right now" (a
// 503) are told from the others (a 500). A connection the server cut in the
// middle of a statement reaches the service as a bare io.ErrUnexpectedEOF
// (as when PostgreSQL restarts under load).
func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("read payment: %w", io.ErrUnexpectedEOF), true},
		{&pgconn.PgError{Code: "57P01"}, true}, // admin shutdown
		{&pgconn.PgError{Code: "57P03"}, true}, // starting up
		{&pgconn.PgError{Code: "08006"}, true}, // connection failure
		// read-only transaction: a connection still on a demoted primary,
		// or one that reached a standby, after a failover
		{fmt.Errorf("claim: %w", &pgconn.PgError{Code: "25006"}), true},
		{&pgconn.PgError{Code: "23505"}, false},
		{errors.New("payment kept changing hands"), false},
		{nil, false},
	} {
		if got := database.Unavailable(tc.err); got != tc.want {
			t.Errorf("Unavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
