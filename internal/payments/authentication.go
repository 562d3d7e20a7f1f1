package payments

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/setting"
	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// This file is the end of a payment that waits for its customer to
// authenticate (3-D Secure, StateRequiresAction). The payment's create key
// stored its answer when the provider asked for the authentication (201
// REQUIRES_ACTION): the key's command was "ask the provider to charge",
// and the provider answered it. What the customer does next is a move of
// the payment, which reaches the service by three roads:
//   - the customer's browser, sent back by the provider to
//     GET /payments/{paymentId}/return (ReturnRoute);
//   - the provider's webhook (internal/webhooks), which resolves the key
//     of this operation now (idempotency.Reconciler.ResolveNow);
//   - the reconciler, which looks at that key on a schedule, and cancels
//     the payment once AUTHENTICATION_TIMEOUT has passed.
//
// Each road, whichever way it comes, twice or late, ends in settle: it
// asks the provider (never the query string or the webhook's body), and
// writes what the provider says as one guarded move out of
// StateRequiresAction, with its event, in one transaction and with no
// transaction open across the call. Of any number of roads that race,
// the first move commits; the others find the payment moved (the guard
// refuses their whole batch) and read what it became.

// OperationAuthenticate names the operation that settles a payment waiting
// for its customer: a key the service schedules itself for each such
// payment (idempotency.Engine.QueueScheduled), whose resource is the
// payment's authentication.
const OperationAuthenticate = "authenticate_payment"

// ResourceAuthentication is the resource type of an authentication's key:
// its id is the payment's.
const ResourceAuthentication = "payment_authentication"

// The decline codes of an authentication that did not end in a charge.
const (
	// DeclineAuthenticationFailed: the customer failed the authentication
	// (the provider's own code is kept when it gives one).
	DeclineAuthenticationFailed = "authentication_failed"
	// DeclineAuthenticationAbandoned: the customer never authenticated
	// within AUTHENTICATION_TIMEOUT; the provider canceled the charge.
	DeclineAuthenticationAbandoned = "authentication_abandoned"
)

// SettingAuthenticationTimeout names the setting of how long a payment
// waits for its customer to authenticate.
const SettingAuthenticationTimeout = "AUTHENTICATION_TIMEOUT"

// DefaultAuthenticationTimeout is AUTHENTICATION_TIMEOUT's default.
const DefaultAuthenticationTimeout = time.Hour

// authenticationTimeout is the setting SettingAuthenticationTimeout.
func authenticationTimeout() setting.Setting {
	return setting.Duration(SettingAuthenticationTimeout, "1h",
		"how long a payment waits for its customer to authenticate (3-D Secure) before the service cancels it (authentication_abandoned)")
}

// AuthenticationModule is the authenticate_payment operation as the
// service registers it (internal/app). It acts on the payments of the
// create_payment operation, in their package.
func AuthenticationModule() operation.Module {
	return operation.Module{
		Name: OperationAuthenticate,
		Resource: operation.Resource{
			Type: ResourceAuthentication, IDField: IDField, ProviderKey: ProviderKey, ProviderObject: provider.ObjectCharge,
		},
		Uses:     []string{OperationCreate},
		Settings: []setting.Setting{authenticationTimeout()},
		New: func(env operation.Env) (operation.Instance, error) {
			s, err := operation.Lookup[*Service](env, OperationCreate)
			if err != nil {
				return nil, err
			}
			voids, ok := env.Provider.(provider.Captures)
			if !ok {
				return nil, fmt.Errorf("%s: the provider %T cannot cancel a charge (provider.Captures)", OperationAuthenticate, env.Provider)
			}
			timeout, err := setting.Value[time.Duration](env.Settings, authenticationTimeout())
			if err != nil {
				return nil, err
			}
			return NewAuthentications(s, voids, timeout), nil
		},
	}
}

// Authentications is the authenticate_payment operation: it settles the
// payments of s that wait for their customer.
type Authentications struct {
	s       *Service
	voids   provider.Captures
	timeout time.Duration
}

var _ operation.Instance = (*Authentications)(nil)

// NewAuthentications returns the operation that settles s's payments that
// wait for their customer, canceling at the provider (voids) those still
// waiting after timeout (0: DefaultAuthenticationTimeout). It is s's from
// then on: s schedules its keys.
func NewAuthentications(s *Service, voids provider.Captures, timeout time.Duration) *Authentications {
	if timeout <= 0 {
		timeout = DefaultAuthenticationTimeout
	}
	a := &Authentications{s: s, voids: voids, timeout: timeout}
	s.auth = a
	return a
}

// Name is the operation's name in its keys' scope.
func (a *Authentications) Name() string { return OperationAuthenticate }

// Render is the answer an authentication's key stores: the payment as it
// ended. Nobody asks for it (no client holds the key); it closes the key.
func (a *Authentications) Render(res idempotency.Result) (idempotency.Response, error) {
	p, ok := res.(Payment)
	if !ok {
		return idempotency.Response{}, fmt.Errorf("payments: cannot render a %T", res)
	}
	return httpapi.ResourceResponse(http.StatusOK, p.View(), Location(p.ID), 0), nil
}

// Routes adds nothing under the API's authentication: the operation's one
// route is the customer's (PublicRoutes).
func (a *Authentications) Routes(chi.Router, operation.HTTP) {}

// Problem: the operation has no errors of its own.
func (a *Authentications) Problem(error) *problem.Problem { return nil }

// Resume settles the payment of a key the caller owns: the reconciler's
// look, or a webhook's (an owner that may only look: it never cancels).
func (a *Authentications) Resume(ctx context.Context, own *idempotency.Owner) (idempotency.Result, error) {
	p, err := a.settle(ctx, own, own.Tenant, own.Resource.ID)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// authenticationScope is the scope of payment paymentID's authentication
// key.
func authenticationScope(tenant, paymentID string) idempotency.Scope {
	return idempotency.Scope{Tenant: tenant, Operation: OperationAuthenticate,
		Key: idempotency.ServiceKey("authentication:" + paymentID)}
}

// schedule queues, with p's move to StateRequiresAction, the key the
// reconciler looks at for p: first after lookEvery, and at the latest when
// the customer's time runs out.
func (a *Authentications) schedule(b *pgx.Batch, p Payment, now time.Time) {
	fp := sha256.Sum256([]byte(OperationAuthenticate + "\x00" + p.ID))
	a.s.d.Engine.QueueScheduled(b, idempotency.Request{
		Scope:       authenticationScope(p.TenantID, p.ID),
		Fingerprint: fp[:],
		Resource:    idempotency.Resource{Type: ResourceAuthentication, ID: p.ID},
	}, now.Add(a.lookEvery()))
}

// lookEvery is how often the reconciler asks the provider about a payment
// whose customer has not come back: a sixth of the timeout, between a
// second and ten minutes, so that a lost return and a lost webhook cost
// that much delay at most.
func (a *Authentications) lookEvery() time.Duration {
	return min(max(a.timeout/6, time.Second), 10*time.Minute)
}

// deadline is when p's customer's time to authenticate runs out: the
// timeout after p's move to StateRequiresAction (its last move).
func (a *Authentications) deadline(p Payment) time.Time { return p.UpdatedAt.Add(a.timeout) }

// abandonMargin is how long before the deadline an authorization found is
// settled only by the reconciler, through the abandonment's cancellation:
// an instance whose clock runs ahead (by less than this) may have sent
// that cancellation already.
const abandonMargin = time.Minute

// settle is the one way a payment waiting for its customer learns its
// outcome, whichever road brings it. own is the owner of the payment's
// authentication key (the reconciler's, or a webhook's that may only
// look), or nil for the customer's return. It asks the provider, outside
// any transaction, and writes the outcome as one guarded move; past the
// deadline an owner that may act cancels the charge at the provider first
// (a late approval the provider took wins: the payment is never canceled
// while charged). It returns the payment as it now stands.
func (a *Authentications) settle(ctx context.Context, own *idempotency.Owner, tenant, id string) (Payment, error) {
	for range 2 {
		p, err := getPayment(ctx, a.s.d.DB, tenant, id)
		if err != nil {
			return Payment{}, err
		}
		if p.State != StateRequiresAction {
			// Another road settled it (or it never waited): the key, if
			// this road holds it, is done.
			return p, a.finish(ctx, own, p)
		}
		c, err := a.lookup(ctx, p)
		if err != nil {
			return p, a.wait(ctx, own, p, err)
		}
		to, code := a.outcome(p, c)
		now, acts := a.s.d.Clock.Now(), own != nil && !own.LookupOnly
		// An authorization found at the deadline, or just before it, may
		// have the abandonment's cancellation on its way to the provider
		// (sent, its answer lost): the lookup saw the approval, the
		// cancellation would then void it. Only sending the cancellation
		// again (its key is the same) tells which is the last word, so the
		// roads that may not cancel leave it to the reconciler.
		late := to == StateAuthorized && !now.Before(a.deadline(p).Add(-abandonMargin))
		if late && !acts {
			return p, a.release(ctx, own, idempotency.LookSoon())
		}
		if late || to == "" && acts && !now.Before(a.deadline(p)) {
			if c, err = a.abandon(ctx, p); err != nil {
				return p, a.wait(ctx, own, p, err)
			}
			to, code = a.outcome(p, c)
		}
		if to == "" {
			return p, a.wait(ctx, own, p, nil)
		}
		settled, err := a.apply(ctx, own, p, to, c, code)
		if statemachine.IsStaleWrite(err) {
			continue // another road moved it first: read what it became
		}
		return settled, err
	}
	return Payment{}, fmt.Errorf("payment %s: its authentication's outcome was refused twice", id)
}

// lookup asks the provider how p's charge stands, bounded by the provider
// timeout.
func (a *Authentications) lookup(ctx context.Context, p Payment) (provider.Charge, error) {
	ctx, cancel := context.WithTimeout(ctx, a.s.cfg.ProviderTimeout)
	defer cancel()
	c, err := a.s.d.Provider.Lookup(ctx, provider.ChargeLookup{
		IdempotencyKey: ProviderKey(p.ID), NotBefore: p.CreatedAt.Add(-clockSkewMargin),
	})
	if err == nil && c.ID == "" {
		err = fmt.Errorf("%w: the provider answered a charge without an id", provider.ErrUnknownOutcome)
	}
	return c, err
}

// abandonKey is the provider's idempotency key of the cancellation of
// payment id's charge when its customer never authenticated: its own, not
// the charge's (a provider may keep one key space for every request).
func abandonKey(id string) string { return "paymentsapi:abandon:" + id }

// abandon cancels p's charge at the provider and returns the charge as it
// then stands: canceled, or, if the customer authenticated first, as the
// authentication left it (a lookup says, since a refused cancellation
// tells only that it was refused).
func (a *Authentications) abandon(ctx context.Context, p Payment) (provider.Charge, error) {
	vctx, cancel := context.WithTimeout(ctx, a.s.cfg.ProviderTimeout)
	c, err := a.voids.Void(vctx, provider.VoidRequest{
		IdempotencyKey: abandonKey(p.ID), ChargeID: p.ProviderReference, Reason: "abandoned", PaymentID: p.ID,
	})
	cancel()
	switch {
	case err != nil:
		return provider.Charge{}, err
	case c.Status == provider.StatusCanceled:
		return c, nil
	}
	return a.lookup(ctx, p)
}

// outcome is the state p moves to for the provider's charge c, and its
// decline code; "" while the customer has not decided (or the provider
// says something p cannot become).
func (a *Authentications) outcome(p Payment, c provider.Charge) (State, string) {
	manual := p.Command.CaptureMethod == CaptureManual
	switch c.Status {
	case provider.StatusSucceeded, provider.StatusAuthorized:
		if c.AmountMinor != p.Command.AmountMinor {
			a.s.d.Log.Error("the provider reports another amount than the payment's: left for a person",
				"payment_id", p.ID, "amount_minor", p.Command.AmountMinor, "provider_amount_minor", c.AmountMinor)
			return "", ""
		}
		switch {
		case manual && c.Status == provider.StatusAuthorized:
			return StateAuthorized, ""
		case !manual && c.Status == provider.StatusSucceeded:
			return StateCompleted, ""
		}
	case provider.StatusDeclined:
		if c.DeclineCode == "" {
			return StateDeclined, DeclineAuthenticationFailed
		}
		return StateDeclined, c.DeclineCode
	case provider.StatusCanceled:
		return StateCanceled, DeclineAuthenticationAbandoned
	}
	return "", ""
}

// apply writes p's move to `to` in one transaction: the key's answer first
// (an owner's: every writer locks the key row before the resource's), the
// guarded move, what an authorization schedules, and the event. The
// customer's return holds no key: its batch is the move alone, which the
// guard makes the one that commits.
func (a *Authentications) apply(ctx context.Context, own *idempotency.Owner, p Payment, to State, c provider.Charge, code string) (Payment, error) {
	s := a.s
	now := s.d.Clock.Now()
	from := p.State
	p.State, p.UpdatedAt, p.DeclineCode = to, now, code
	if c.ID != "" {
		p.ProviderReference = c.ID
	}
	hooked := &pgx.Batch{}
	var eventType, reason string
	switch to {
	case StateCompleted:
		eventType, reason = EventSucceeded, "customer authenticated; provider confirmed"
	case StateAuthorized:
		eventType, reason = EventAuthorized, "customer authenticated; provider authorized"
		var err error
		if p, err = s.authorize(ctx, hooked, p, now); err != nil {
			return Payment{}, err
		}
	case StateDeclined:
		eventType, reason = EventDeclined, "customer authentication failed: "+code
	case StateCanceled:
		eventType, reason = EventCanceled, "customer never authenticated: provider canceled the charge"
	}
	b := &pgx.Batch{}
	if own != nil {
		if err := own.QueueFinish(b, p); err != nil {
			return Payment{}, err
		}
	}
	if err := machine.QueueMove(ctx, b, statemachine.Move[State]{ID: p.ID, From: from, To: to, Reason: reason, At: now,
		Set: statemachine.NonEmpty(
			statemachine.Column{Name: "provider_reference", Value: p.ProviderReference},
			statemachine.Column{Name: "decline_code", Value: code})}); err != nil {
		return Payment{}, err
	}
	b.QueuedQueries = append(b.QueuedQueries, hooked.QueuedQueries...)
	if err := queueEvent(ctx, b, eventType, p, now); err != nil {
		return Payment{}, err
	}
	if err := a.commit(ctx, own, b); err != nil {
		return Payment{}, err
	}
	s.d.Log.InfoContext(ctx, "payment's authentication settled", "payment_id", p.ID, "tenant", p.TenantID, "to", to,
		"decline_code", code, "by", actor.From(ctx).Actor)
	return p, nil
}

// commit commits b: through the owner, fenced, or, for the customer's
// return, as one implicit transaction of its own.
func (a *Authentications) commit(ctx context.Context, own *idempotency.Owner, b *pgx.Batch) error {
	if own != nil {
		return own.Commit(ctx, b)
	}
	return a.s.d.DB.SendBatch(ctx, b).Close()
}

// finish closes the key own holds on a payment that no longer waits.
func (a *Authentications) finish(ctx context.Context, own *idempotency.Owner, p Payment) error {
	if own == nil {
		return nil
	}
	b := &pgx.Batch{}
	if err := own.QueueFinish(b, p); err != nil {
		return err
	}
	return own.Commit(ctx, b)
}

// wait leaves p waiting for its customer: the key own holds (if any) is
// looked at again after lookEvery, and at the latest at the deadline; a
// provider that could not say (cause) is asked again by the reconciler's
// backoff, and cause is returned.
func (a *Authentications) wait(ctx context.Context, own *idempotency.Owner, p Payment, cause error) error {
	if own == nil {
		return cause
	}
	look := idempotency.LookSoon()
	if cause == nil {
		next := a.s.d.Clock.Now().Add(a.lookEvery())
		if dl := a.deadline(p); dl.After(a.s.d.Clock.Now()) && dl.Before(next) {
			next = dl
		}
		look = idempotency.LookAt(next)
	}
	if err := a.release(ctx, own, look); err != nil {
		return err
	}
	if cause != nil {
		return fmt.Errorf("payment %s waits for its customer: the provider could not say: %w", p.ID, cause)
	}
	return nil
}

// CustomerReturn is the actor of a move made by the customer's return from
// an authentication (GET /payments/{paymentId}/return).
const CustomerReturn = "customer-return"

// ReturnPath is the path of payment id's return route, under PUBLIC_URL.
func ReturnPath(id string) string { return Location(id) + "/return" }

// returnRoute is the URL the provider sends payment id's customer back to.
func (s *Service) returnRoute(id string) string { return s.cfg.PublicURL + ReturnPath(id) }

// PublicRoutes adds GET /payments/{paymentId}/return, which customers'
// browsers reach without an API key: the provider sends them there once
// they authenticated (or failed). The payment is settled as the provider
// says (never as the query string says), and the customer is sent on to
// the command's returnUrl with the payment's id (303); a payment without
// one answers a short page with its status.
func (a *Authentications) PublicRoutes(r chi.Router) {
	r.Get("/payments/{paymentId}/return", func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "paymentId")
		ctx := actor.WithActor(r.Context(), CustomerReturn)
		logging.Add(ctx, "payment_id", id)
		p, err := getPaymentByID(ctx, a.s.d.DB, id)
		if errors.Is(err, ErrNotFound) {
			problem.New(http.StatusNotFound, problem.NotFound, "No such payment.").Write(w)
			return
		}
		if err != nil {
			a.s.d.Log.ErrorContext(ctx, "customer return: read the payment", "error", err)
			problem.New(http.StatusInternalServerError, problem.Internal, "An unexpected error occurred.").Write(w)
			return
		}
		if p.State == StateRequiresAction {
			settled, err := a.settle(ctx, nil, p.TenantID, p.ID)
			if err != nil {
				// The customer is sent on all the same: the webhook and
				// the reconciler settle it, and the merchant reads it.
				a.s.d.Log.WarnContext(ctx, "customer return: the payment is not settled yet", "error", err)
			} else {
				p = settled
			}
		}
		w.Header().Set("Cache-Control", "no-store")
		if p.Command.ReturnURL == "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = fmt.Fprintf(w, "Payment %s is %s.\n", p.ID, p.State.Status())
			return
		}
		http.Redirect(w, r, withPaymentID(p.Command.ReturnURL, p.ID), http.StatusSeeOther)
	})
}

// withPaymentID is u with the query parameter paymentId=id added.
func withPaymentID(u, id string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return u // validated when the payment was made
	}
	q := parsed.Query()
	q.Set(IDField, id)
	parsed.RawQuery = q.Encode()
	return parsed.String()
}

// release hands the key own holds (if any) back, to be looked at again
// as look says.
func (a *Authentications) release(ctx context.Context, own *idempotency.Owner, look idempotency.Look) error {
	if own == nil {
		return nil
	}
	b := &pgx.Batch{}
	own.QueueRelease(b, look)
	return own.Commit(ctx, b)
}
