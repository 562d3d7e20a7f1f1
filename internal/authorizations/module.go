package authorizations

import (
	"fmt"
	"strconv"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/setting"
)

// CaptureModule is the capture_payment operation as the service registers
// it (internal/app). It acts through the payments' Actions port.
func CaptureModule() operation.Module { return module(capture, NewCaptures) }

// CancelModule is the cancel_payment operation, registered like
// CaptureModule. It keeps the authorizations' lifetime
// (AUTHORIZATION_TTL): with each payment's move to AUTHORIZED it sets when
// the authorization expires and schedules the void the service issues
// itself then (a hook the payments offer).
func CancelModule() operation.Module {
	m := module(cancel, NewCancels)
	m.Hooks = []operation.Hook{payments.WhenAuthorized((*Service).scheduleExpiry)}
	m.Settings = []setting.Setting{authorizationTTL()}
	return m
}

// SettingTTL names the setting of how long a manual payment's
// authorization lasts.
const SettingTTL = "AUTHORIZATION_TTL"

// DefaultAuthorizationTTL is AUTHORIZATION_TTL's default: seven days, as
// long as a card network holds an authorization for most cards.
const DefaultAuthorizationTTL = 7 * 24 * time.Hour

// authorizationTTL is the setting SettingTTL.
func authorizationTTL() setting.Setting {
	return setting.Duration(SettingTTL, strconv.Itoa(int(DefaultAuthorizationTTL/time.Hour))+"h",
		"how long a manual-capture payment's authorization lasts before the service voids it")
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
			ttl, err := setting.Value[time.Duration](env.Settings, authorizationTTL())
			if err != nil {
				return nil, err
			}
			c := env.Config
			return build(Deps{
				DB: env.DB, Engine: env.Engine, Provider: port, Clock: env.Clock, Log: env.Log, Metrics: env.Metrics,
			}, pay, Config{
				ProviderTimeout: c.ProviderTimeout, ProviderKeyWindow: c.ProviderKeyWindow,
				ProviderLookupLag: c.ProviderLookupLag, RefusalRecheck: c.RefusalRecheck, AbandonAfter: c.ReplayTTL,
				AuthorizationTTL: ttl,
			}), nil
		},
	}
}
