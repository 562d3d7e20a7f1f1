package payments_test

import (
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// A payment keeps the contract every operation keeps (servicetest.Contract).
func TestPaymentsKeepTheOperationContract(t *testing.T) {
	t.Parallel()
	servicetest.Contract(t, servicetest.Operation{
		Path: func(*servicetest.Env, string) string { return "/payments" },
		Body: func(method string) string { return servicetest.Body("paymentMethod", `"`+method+`"`) },
		OtherBody: func(method string) string {
			return servicetest.Body("paymentMethod", `"`+method+`"`, "amount", `"11.00"`)
		},
		Method: sim.MethodVisa, SlowMethod: sim.MethodSlow, LostMethod: sim.MethodTimeoutAfterSuccess,
	})
}
