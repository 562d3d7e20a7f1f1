package endpoints

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/audit"
	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
	"github.com/paymentsapi/paymentsapi/internal/refuse"
	"github.com/paymentsapi/paymentsapi/internal/secretbox"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// ErrNotFound: no such endpoint of the tenant (or it was deleted).
var ErrNotFound = errors.New("webhook endpoint not found")

// ErrTooMany: the tenant has MaxPerTenant endpoints already.
var ErrTooMany = errors.New("the tenant has the most webhook endpoints it may have")

// The audit log's actions on endpoints (package audit).
const (
	AuditCreated       = "webhook_endpoint.created"
	AuditSecretRotated = "webhook_endpoint.secret_rotated"
	AuditDeleted       = "webhook_endpoint.deleted"
)

// Options are where endpoints may point.
type Options struct {
	// Policy is the destination policy (WEBHOOK_ALLOW_HTTP,
	// WEBHOOK_ALLOW_PRIVATE); the delivery client enforces the same.
	Policy outbound.Policy
	// Resolver resolves a URL's host to check its addresses (nil: the
	// system's); tests pass their own.
	Resolver outbound.Resolver
	// Secrets seals and opens the endpoints' secrets (SECRETS_KEY); nil:
	// no endpoint can be created or rotated, nor a secret revealed
	// (ErrSecretsKeyMissing).
	Secrets *secretbox.Box
}

// resolveTimeout bounds the check of a URL's host at registration.
const resolveTimeout = 5 * time.Second

// CreateModule is create_webhook_endpoint as the service registers it
// (internal/app), with the destination policy of opts.
func CreateModule(opts Options) operation.Module {
	return operation.Module{
		Name:     OperationCreate,
		Resource: operation.Resource{Type: ResourceType, IDField: "endpointId"},
		New: func(env operation.Env) (operation.Instance, error) {
			names := map[string]bool{}
			for _, m := range env.Modules {
				for _, e := range m.Events {
					if e.Name != "" { // what the event log records, and so what is delivered
						names[e.Name] = true
					}
				}
			}
			return &Service{env: env, opts: opts, names: names}, nil
		},
	}
}

// RotateModule is rotate_webhook_secret as the service registers it, with
// the secrets of opts.
func RotateModule(opts Options) operation.Module {
	return operation.Module{
		Name:     OperationRotate,
		Resource: operation.Resource{Type: RotationType, IDField: "rotationId"},
		New: func(env operation.Env) (operation.Instance, error) {
			return &Rotations{env: env, secrets: opts.Secrets}, nil
		},
	}
}

// Service creates endpoints idempotently and reads and deletes them.
type Service struct {
	env   operation.Env
	opts  Options
	names map[string]bool // the event names an endpoint may subscribe to
}

// Name is the operation's name in every key's scope.
func (s *Service) Name() string { return OperationCreate }

// Prepare validates req, and checks its URL against the destination policy:
// a *validate.Error for a malformed request or URL (or a host that does not
// resolve), an *outbound.ForbiddenError for a destination the policy
// refuses.
func (s *Service) Prepare(ctx context.Context, req CreateRequest) (Command, error) {
	cmd, err := req.validate(s.names)
	if err != nil {
		return Command{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	err = s.opts.Policy.CheckURL(ctx, cmd.URL, s.opts.Resolver)
	var (
		invalid    *outbound.InvalidURLError
		unresolved *outbound.ResolveError
		errs       validate.Collector
	)
	switch {
	case errors.As(err, &invalid):
		errs.Add("url", invalid.Reason)
	case errors.As(err, &unresolved):
		errs.Add("url", "its host could not be resolved, so its addresses could not be checked")
	case err != nil:
		return Command{}, err
	}
	if err := errs.Err(); err != nil {
		return Command{}, err
	}
	return cmd, nil
}

// Create runs cmd (from Prepare) under the tenant's key: the first request
// claims the key and writes the endpoint, with a new secret, sealed, in one
// transaction; retries are answered by the engine. ErrSecretsKeyMissing
// without SECRETS_KEY, ErrTooMany when the tenant has MaxPerTenant
// endpoints.
func (s *Service) Create(ctx context.Context, tenant, key string, cmd Command, wait time.Duration) (idempotency.Reply, error) {
	secret, err := outbound.NewSecret()
	if err != nil {
		return idempotency.Reply{}, err
	}
	id := NewID()
	sealed, err := seal(s.opts.Secrets, id, secret)
	if err != nil {
		return idempotency.Reply{}, err
	}
	e := Endpoint{
		ID: id, TenantID: tenant, URL: cmd.URL, EventTypes: cmd.EventTypes, Description: cmd.Description,
		Status: StatusEnabled, Secret: secret, SecretID: id, sealed: sealed, CreatedAt: s.env.Clock.Now(),
	}
	reply, err := s.env.Engine.Do(ctx, s, idempotency.Request{
		Scope:       idempotency.Scope{Tenant: tenant, Operation: OperationCreate, Key: key},
		Fingerprint: cmd.Fingerprint(),
		Resource:    idempotency.Resource{Type: ResourceType, ID: e.ID},
		Create: func(b *claim.Batch) {
			queueInsert(b, e)
			b.Queue(audit.Claimed(ctx, e.CreatedAt, audit.Change{Action: AuditCreated, TenantID: tenant, TargetID: e.ID}))
		},
		Created: e,
		Wait:    wait,
	})
	if _, ok := refuse.Is(err, refuseTooMany); ok {
		return idempotency.Reply{}, ErrTooMany
	}
	return reply, err
}

// Resume stores the answer of a key whose endpoint its claim wrote: the
// endpoint as written (the first request) or as read back, its secret
// opened (a takeover, whose answer is the first its client gets).
func (s *Service) Resume(ctx context.Context, own *idempotency.Owner) (idempotency.Result, error) {
	e, ok := own.Created.(Endpoint)
	if !ok {
		var err error
		e, err = opened(s.opts.Secrets, func() (Endpoint, error) {
			return get(ctx, s.env.DB, own.Tenant, own.Resource.ID)
		})
		if err != nil {
			return nil, err
		}
	}
	return finish(ctx, own, e)
}

// finish stores r, rendered, as the final answer of own's key.
func finish(ctx context.Context, own *idempotency.Owner, r idempotency.Result) (idempotency.Result, error) {
	b := &pgx.Batch{}
	if err := own.QueueFinish(b, r); err != nil {
		return nil, err
	}
	if err := own.Commit(ctx, b); err != nil {
		return nil, err
	}
	return r, nil
}

// Get returns the tenant's endpoint id, or ErrNotFound.
func (s *Service) Get(ctx context.Context, tenant, id string) (Endpoint, error) {
	return get(ctx, s.env.DB, tenant, id)
}

// List returns the tenant's endpoints, newest first.
func (s *Service) List(ctx context.Context, tenant string) ([]Endpoint, error) {
	return list(ctx, s.env.DB, tenant)
}

// Reveal returns the secret of the tenant's endpoint id: the one that signs
// its messages now. ErrNotFound for another tenant's, ErrSecretsKeyMissing
// without SECRETS_KEY.
func (s *Service) Reveal(ctx context.Context, tenant, id string) (string, error) {
	if s.opts.Secrets == nil {
		return "", ErrSecretsKeyMissing
	}
	e, err := opened(s.opts.Secrets, func() (Endpoint, error) { return get(ctx, s.env.DB, tenant, id) })
	if err != nil {
		return "", err
	}
	return e.Secret, nil
}

// Delete deletes the tenant's endpoint id: nothing more is sent to it. The
// deletion and its audit record commit together: no deletion goes
// unrecorded, and no record names one that did not happen.
func (s *Service) Delete(ctx context.Context, tenant, id string) error {
	now := s.env.Clock.Now()
	return pgx.BeginFunc(ctx, s.env.DB, func(tx pgx.Tx) error {
		if err := remove(ctx, tx, tenant, id, now); err != nil {
			return err
		}
		return audit.Record(ctx, tx, now, audit.Change{Action: AuditDeleted, TenantID: tenant, TargetID: id})
	})
}

// Rotation is what a rotate_webhook_secret key did: the endpoint, with the
// secret the rotation set.
type Rotation struct {
	ID       string
	Endpoint Endpoint
}

// Outcome names a rotation in the engine's metrics and logs.
func (Rotation) Outcome() string { return "rotated" }

// Rotations rotates endpoints' secrets idempotently.
type Rotations struct {
	env     operation.Env
	secrets *secretbox.Box
}

// Name is the operation's name in every key's scope.
func (r *Rotations) Name() string { return OperationRotate }

// Rotate gives the tenant's endpoint a new secret under key; the current one
// signs too for overlap (0: not at all, from now on). ErrSecretsKeyMissing
// without SECRETS_KEY.
func (r *Rotations) Rotate(ctx context.Context, tenant, key, endpointID string, overlap time.Duration, wait time.Duration) (idempotency.Reply, error) {
	if r.secrets == nil {
		return idempotency.Reply{}, ErrSecretsKeyMissing
	}
	secret, err := outbound.NewSecret()
	if err != nil {
		return idempotency.Reply{}, err
	}
	sealed, err := seal(r.secrets, endpointID, secret)
	if err != nil {
		return idempotency.Reply{}, err
	}
	id := ids.New("wsr_")
	expires := r.env.Clock.Now().Add(overlap)
	reply, err := r.env.Engine.Do(ctx, r, idempotency.Request{
		Scope:       idempotency.Scope{Tenant: tenant, Operation: OperationRotate, Key: key},
		Fingerprint: rotateFingerprint(endpointID, overlap),
		Resource:    idempotency.Resource{Type: RotationType, ID: id},
		Create: func(b *claim.Batch) {
			queueRotate(b, tenant, endpointID, id, sealed, expires)
			b.Queue(audit.Claimed(ctx, r.env.Clock.Now(), audit.Change{Action: AuditSecretRotated, TenantID: tenant, TargetID: endpointID}))
		},
		Wait: wait,
	})
	if _, ok := refuse.Is(err, refuseNotFound); ok {
		return idempotency.Reply{}, ErrNotFound
	}
	return reply, err
}

// Resume stores the answer of a key whose rotation its claim wrote: the
// endpoint with the secret the rotation set, read back by the rotation's id
// (a takeover finds it too, while it signs). A rotation whose secret no
// longer signs (rotated out twice, or the endpoint deleted) before its key
// was answered fails with ErrNotFound.
func (r *Rotations) Resume(ctx context.Context, own *idempotency.Owner) (idempotency.Result, error) {
	e, err := opened(r.secrets, func() (Endpoint, error) {
		return getBySecret(ctx, r.env.DB, own.Tenant, own.Resource.ID, r.env.Clock.Now())
	})
	if err != nil {
		return nil, err
	}
	return finish(ctx, own, Rotation{ID: own.Resource.ID, Endpoint: e})
}
