package simclient

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// net/http resends a request carrying an Idempotency-Key when a reused
// connection fails; if the first copy was written, a refused dial for the
// resend proves nothing about money.
func TestTransportErrorAfterAConnection(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	if err := transportError(refused, false); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("refused before any connection: %v, want ErrUnavailable", err)
	}
	if err := transportError(refused, true); !errors.Is(err, provider.ErrUnknownOutcome) || errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("refused after a connection was used: %v, want only ErrUnknownOutcome", err)
	}
}
