package authorizations

import (
	"fmt"

	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// CaptureModule is the capture_payment operation as the service registers
// it (internal/app). It acts through the payments' Actions port.
func CaptureModule() operation.Module { return module(capture, NewCaptures) }

// CancelModule is the cancel_payment operation, registered like
// CaptureModule. It also schedules, with each payment's move to
// AUTHORIZED, the void the service issues itself at the authorization's
// expiry (a hook the payments offer).
func CancelModule() operation.Module {
	m := module(cancel, NewCancels)
	m.Hooks = []operation.Hook{payments.WhenAuthorized((*Service).scheduleExpiry)}
	return m
}

func module(k kind, build func(Deps, payments.Actions, Config) *Service) operation.Module {
	return operation.Module{
		Name:     k.operation,
		Resource: operation.Resource{Type: k.resource, IDField: k.idField, ProviderKey: ProviderKey},
		Uses:     []string{payments.OperationCreate},
		New: func(env operation.Env) (operation.Instance, error) {
			pay, err := operation.Lookup[payments.Actions](env, payments.OperationCreate)
			if err != nil {
				return nil, err
			}
			port, ok := env.Provider.(provider.Captures)
			if !ok {
				return nil, fmt.Errorf("%s: the provider %T does not capture (provider.Captures)", k.operation, env.Provider)
			}
			c := env.Config
			return build(Deps{
				DB: env.DB, Engine: env.Engine, Provider: port, Clock: env.Clock, Log: env.Log, Metrics: env.Metrics,
			}, pay, Config{
				ProviderTimeout: c.ProviderTimeout, ProviderKeyWindow: c.ProviderKeyWindow,
				ProviderLookupLag: c.ProviderLookupLag, RefusalRecheck: c.RefusalRecheck, AbandonAfter: c.ReplayTTL,
			}), nil
		},
	}
}
