package httpapi_test

import (
	"os"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The secrets of the two tenants every test environment has.
const (
	secretA = servicetest.SecretA
	secretB = servicetest.SecretB
)

// env is the service started by servicetest, with the helpers of this
// package's tests as its methods.
type env struct{ *servicetest.Env }

// response is an HTTP answer, read whole.
type response = servicetest.Response

func newEnv(t testing.TB, opts ...servicetest.Option) *env {
	t.Helper()
	return &env{servicetest.New(t, opts...)}
}
