package authorizations

import (
	"fmt"

	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// CaptureModule is the capture_payment operation as the service registers
// it (internal/app): after the payments, whose Actions port it acts
// through.
func CaptureModule() operation.Module { return module(capture, NewCaptures) }

// CancelModule is the cancel_payment operation, registered like
// CaptureModule.
func CancelModule() operation.Module { return module(cancel, NewCancels) }

func module(k kind, build func(Deps, payments.Actions, Config) *Service) operation.Module {
	return operation.Module{
		Name:     k.operation,
		Resource: operation.Resource{Type: k.resource, IDField: k.idField, ProviderKey: ProviderKey},
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
			s := build(Deps{
				DB: env.DB, Engine: env.Engine, Provider: port, Clock: env.Clock, Log: env.Log, Metrics: env.Metrics,
			}, pay, Config{
				ProviderTimeout: c.ProviderTimeout, ProviderKeyWindow: c.ProviderKeyWindow,
				ProviderLookupLag: c.ProviderLookupLag, RefusalRecheck: c.RefusalRecheck, AbandonAfter: c.ReplayTTL,
			})
			if k.action == payments.ActionVoid {
				// The service voids what nobody captured in time.
				pay.WhenAuthorized(s.scheduleExpiry)
			}
			return s, nil
		},
	}
}
