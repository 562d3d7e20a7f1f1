package httpapi_test

import (
	"os"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// The tests start the service with servicetest.New, on pgtest's databases.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The secrets of the two tenants every test environment has.
const (
	secretA = servicetest.SecretA
	secretB = servicetest.SecretB
)
