package moneysim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/authorizations"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/providerflow"
)

// This file is manual capture in the simulation: the clients of
// capture_payment and cancel_payment, what they plan once their payment is
// authorized, and the provider's news of a capture or a void.

// actionClient captures or cancels one authorized payment: one key at a
// time, retried by its style, like every client.
type actionClient struct {
	retrier
	pay       *payClient
	paymentID string
	kind      payments.Action
	base      string
	// amountMinor is a capture's amount; askFirst, if set, what a careless
	// client asks first (more than the authorization: refused 409
	// CAPTURE_EXCEEDS_CAPTURABLE), before it asks for amountMinor.
	amountMinor, askFirst int64
	expiresAt             time.Time // the payment's authorizationExpiresAt, as its 201 said
	newKeyOn503           bool      // a careless client: a refusal makes it start over with a new key
	started               bool
	// rivalAtProvider names the rival whose request is at the provider
	// while this client's runs (a capture racing a cancel): this one's
	// claim must be refused.
	rivalAtProvider string
	done            bool
}

func (ac *actionClient) what() string {
	if ac.kind == payments.ActionCapture {
		return "capture"
	}
	return "cancel"
}

// authorizedView is what a client reads in its payment's 201, or its
// action's answer: the payment (200), or a problem about it (402, 409:
// status is then the HTTP status, a number).
type authorizedView struct {
	PaymentID              string          `json:"paymentId"`
	Status                 json.RawMessage `json:"status"`
	CapturedAmount         string          `json:"capturedAmount"`
	AuthorizationExpiresAt *time.Time      `json:"authorizationExpiresAt"`
	Code                   string          `json:"code"`
	DeclineCode            string          `json:"declineCode"`
}

// status is the payment's status a 2xx body says.
func (v authorizedView) status() string {
	var s string
	_ = json.Unmarshal(v.Status, &s)
	return s
}

// planActions plans what follows a manual payment's 201 REQUIRES_CAPTURE:
// capture it all or in part, cancel it, both at once under two keys (a
// capture racing a cancel), or nothing (left to expire; some of those
// clients come back after the expiry and try to capture). Every choice is
// from the manual-capture stream.
func (w *world) planActions(c *payClient, reply idempotency.Reply) {
	var v authorizedView
	if err := json.Unmarshal(reply.Response.Body, &v); err != nil || v.status() != string(payments.StatusRequiresCapture) || v.AuthorizationExpiresAt == nil {
		w.fail("answer", c.name, "%s: a manual payment's 201 says %s", c.name, reply.Response.Body)
		return
	}
	rng, now, exp := w.mrng, w.clock.Now(), v.AuthorizationExpiresAt.UTC()
	partial := 100 * (1 + rng.Int64N(c.amountMinor/100-1))
	switch r := rng.Float64(); {
	case r < 0.3:
		w.newActionClient(c, payments.ActionCapture, c.amountMinor, exp, w.actionTime(now, exp))
	case r < 0.5:
		w.newActionClient(c, payments.ActionCapture, partial, exp, w.actionTime(now, exp))
	case r < 0.65:
		w.newActionClient(c, payments.ActionVoid, 0, exp, w.actionTime(now, exp))
	case r < 0.85:
		// A capture racing a cancel, under two keys, at the same moment;
		// mostly the second is sent while the first is at the provider.
		at := w.actionTime(now, exp)
		amount := pick(rng, c.amountMinor, partial)
		var first, second *actionClient
		if rng.Float64() < 0.5 {
			first = w.newActionClient(c, payments.ActionCapture, amount, exp, at)
			second = w.newActionClient(c, payments.ActionVoid, 0, exp, at)
		} else {
			first = w.newActionClient(c, payments.ActionVoid, 0, exp, at)
			second = w.newActionClient(c, payments.ActionCapture, amount, exp, at)
		}
		if rng.Float64() < 0.6 {
			first.inFlight = func() {
				second.rivalAtProvider = first.name
				w.tracef("client %s: sent while %s is at the provider", second.name, first.name)
				w.startAction(second)
				second.rivalAtProvider = ""
			}
		}
	default:
		w.tracef("client %s: leaves its authorization to expire at %s", c.name, w.at(exp))
		if rng.Float64() < 0.5 {
			// It comes back after the expiry: refused.
			w.newActionClient(c, payments.ActionCapture, c.amountMinor, exp, exp.Add(between(rng, 0, 3*time.Hour)))
		}
	}
}

// actionTime is when a client acts on its authorization: mostly soon,
// now and then just before the expiry, or just after it.
func (w *world) actionTime(now, exp time.Time) time.Time {
	rng := w.mrng
	left := exp.Sub(now)
	switch r := rng.Float64(); {
	case r < 0.65 || left <= 0:
		return now.Add(between(rng, 5*time.Second, min(max(left/2, 10*time.Second), 6*time.Hour)))
	case r < 0.85:
		return exp.Add(-between(rng, 0, min(15*time.Minute, left)))
	default:
		return exp.Add(between(rng, 0, 10*time.Minute))
	}
}

// newActionClient makes the client of one capture (amount) or cancel of
// c's payment, acting first at `at`.
func (w *world) newActionClient(c *payClient, kind payments.Action, amount int64, exp, at time.Time) *actionClient {
	rng := w.mrng
	c.actions++
	base := fmt.Sprintf("%s.%s%d", c.name, map[payments.Action]string{payments.ActionCapture: "cap", payments.ActionVoid: "cxl"}[kind], c.actions)
	ac := &actionClient{retrier: w.newRetrier(base, rng), pay: c, paymentID: c.id, kind: kind, base: base,
		amountMinor: amount, expiresAt: exp, newKeyOn503: rng.Float64() < 0.2}
	if kind == payments.ActionCapture && rng.Float64() < 0.15 {
		ac.askFirst = c.amountMinor + 100*(1+rng.Int64N(5))
	}
	ac.newKey(base)
	w.acts = append(w.acts, ac)
	what := "cancel"
	if kind == payments.ActionCapture {
		what = "capture " + money.Format(amount, "EUR")
		if ac.askFirst > 0 {
			what += fmt.Sprintf(" (asking %s first)", money.Format(ac.askFirst, "EUR"))
		}
	}
	expiry := "not authorized"
	if !exp.IsZero() {
		expiry = "expiry " + w.at(exp)
	}
	w.tracef("client %s: will %s of %s at %s (%s), retries %s up to %d", ac.name, what, c.name, w.at(at), expiry, ac.style, ac.maxAttempts)
	w.schedule(at, true, ac.what(), func() { w.startAction(ac) })
	return ac
}

// startAction is an action client's first request, unless it was sent
// already (from inside its rival's provider call).
func (w *world) startAction(ac *actionClient) {
	if ac.started {
		return
	}
	ac.started = true
	w.act(ac)
}

// sendAction is one request of an action: Create, the operation's entry
// point below HTTP. A kill at the provider (simKill) ends it as kill -9
// ends a process: nothing of the request runs after it, and its client
// sees the connection drop (idempotency.ErrCrashed, as the payments'
// failpoints).
func (w *world) sendAction(svc *authorizations.Service, key string, cmd authorizations.Command) (reply idempotency.Reply, err error) {
	defer func() {
		if v := recover(); v != nil {
			k, ok := v.(simKill)
			if !ok {
				panic(v)
			}
			reply, err = idempotency.Reply{}, fmt.Errorf("%w: simulated kill -9 %s", idempotency.ErrCrashed, k.point)
		}
	}()
	return svc.Create(w.ctx, tenant, key, cmd, 0)
}

// act is one attempt of an action client, and what it does with the
// answer.
func (w *world) act(ac *actionClient) {
	if ac.done {
		return
	}
	svc, op, resType := w.captures, authorizations.OperationCapture, authorizations.ResourceCapture
	cmd := authorizations.Command{PaymentID: ac.paymentID, AmountMinor: ac.amountMinor, Currency: "EUR"}
	if ac.kind == payments.ActionVoid {
		svc, op, resType = w.cancels, authorizations.OperationCancel, authorizations.ResourceCancellation
		cmd.AmountMinor = 0
	} else if ac.askFirst > 0 {
		cmd.AmountMinor = ac.askFirst
	}
	rival := ac.rivalAtProvider
	reply, err := w.request(&ac.retrier, op, resType, func() (idempotency.Reply, error) { return w.sendAction(svc, ac.key, cmd) })
	w.actor = "client"
	var (
		inUse   *idempotency.KeyInUseError
		expired *idempotency.KeyExpiredError
		exceeds *payments.ExceedsCapturableError
	)
	if rival != "" && !errors.Is(err, authorizations.ErrNotCapturable) && !errors.Is(err, authorizations.ErrNotCancelable) &&
		!errors.Is(err, authorizations.ErrAuthorizationExpired) {
		w.fail("race", ac.name, "%s sent while %s was at the provider got %d %s / %v, want 409 PAYMENT_NOT_CAPTURABLE or PAYMENT_NOT_CANCELABLE",
			ac.name, rival, reply.Response.Status, reply.Response.Body, err)
	}
	again := func(d time.Duration) { w.retry(&ac.retrier, d, func() { w.act(ac) }) }
	switch {
	case err == nil:
		st := reply.Response.Status
		w.tracef("client %s: %d replayed=%v", ac.name, st, reply.Replayed)
		switch st {
		case http.StatusOK, http.StatusPaymentRequired, http.StatusConflict:
			ac.done = true
			w.sawFinal(ac.id, ac.name, reply)
			key := ac.key
			w.maybeReplayLater(&ac.retrier, reply, func() (idempotency.Reply, error) { return w.sendAction(svc, key, cmd) })
			w.actionEnded(ac, reply)
		case http.StatusAccepted:
			again(between(ac.rng, 2*time.Second, 2*time.Minute))
		default:
			w.fail("answer", ac.name, "%s: unexpected answer %d %s", ac.name, st, reply.Response.Body)
		}
	case errors.Is(err, providerflow.ErrUnavailable):
		w.tracef("client %s: %v", ac.name, short(err))
		if ac.newKeyOn503 && ac.rng.Float64() < 0.5 {
			// The refused action keeps the payment until it is
			// abandoned: the new key is refused 409 meanwhile.
			ac.newKeyOn503 = false
			ac.newKey(ac.base)
			w.tracef("client %s: starts over with a new key", ac.name)
		}
		again(w.delay(&ac.retrier))
	case errors.Is(err, idempotency.ErrCrashed):
		w.tracef("client %s: %v", ac.name, short(err))
		again(w.delay(&ac.retrier))
	case errors.As(err, &inUse):
		w.tracef("client %s: 409 in use", ac.name)
		again(between(ac.rng, lease/2, 2*lease))
	case errors.As(err, &exceeds):
		if ac.askFirst == 0 || exceeds.CapturableMinor != ac.pay.amountMinor {
			w.fail("answer", ac.name, "%s: capture of %s refused as exceeding %s (the payment authorized %s)", ac.name,
				money.Format(cmd.AmountMinor, "EUR"), money.Format(exceeds.CapturableMinor, "EUR"), money.Format(ac.pay.amountMinor, "EUR"))
			return
		}
		// The key was never claimed: the same key, the right amount.
		w.tracef("client %s: 409 exceeds capturable (%s): asks for %s", ac.name, money.Format(exceeds.CapturableMinor, "EUR"), money.Format(ac.amountMinor, "EUR"))
		ac.askFirst = 0
		again(between(ac.rng, time.Second, time.Minute))
	case errors.Is(err, authorizations.ErrNotCapturable), errors.Is(err, authorizations.ErrNotCancelable):
		p, gerr := w.core.Payments.Get(w.ctx, tenant, ac.paymentID)
		if gerr != nil {
			w.t.Fatal(gerr)
		}
		switch {
		case !p.State.Final():
			// Another action holds it and may yet let it go, or it is in
			// flight: it may yet be authorized, or end.
			w.tracef("client %s: 409 not %sable (the payment is %s): tries again later", ac.name, strings.TrimSuffix(ac.what(), "e"), p.State)
			again(w.delay(&ac.retrier))
		default:
			w.tracef("client %s: 409 not %sable (the payment is %s): stops", ac.name, strings.TrimSuffix(ac.what(), "e"), p.State)
		}
	case errors.Is(err, authorizations.ErrAuthorizationExpired):
		if ac.kind != payments.ActionCapture || w.clock.Now().Before(ac.expiresAt) {
			w.fail("answer", ac.name, "%s: %s refused as expired at %s, before the expiry %s", ac.name, ac.what(), w.at(w.clock.Now()), w.at(ac.expiresAt))
		}
		w.tracef("client %s: 409 authorization expired: stops", ac.name)
	case errors.As(err, &expired):
		w.tracef("client %s: 409 key expired: stops", ac.name)
	default:
		w.fail("answer", ac.name, "%s: unexpected error %v", ac.name, err)
	}
}

// actionEnded is what a client does with its action's final answer: a
// captured payment may be refunded; after a declined capture the client
// cancels, captures again under a new key, or lets the authorization
// expire; after a cancel it may pay the invoice again.
func (w *world) actionEnded(ac *actionClient, reply idempotency.Reply) {
	var v authorizedView
	if err := json.Unmarshal(reply.Response.Body, &v); err != nil || v.PaymentID != ac.paymentID {
		w.fail("answer", ac.name, "%s: final answer about another payment: %s", ac.name, reply.Response.Body)
		return
	}
	st, rng, c := reply.Response.Status, w.mrng, ac.pay
	switch {
	case st == http.StatusOK && ac.kind == payments.ActionCapture:
		if v.status() != string(payments.StatusSucceeded) || v.CapturedAmount != money.Format(ac.amountMinor, "EUR") {
			w.fail("answer", ac.name, "%s: captured %s, told %s", ac.name, money.Format(ac.amountMinor, "EUR"), reply.Response.Body)
		}
		if c.id == ac.paymentID && !c.refundsScheduled {
			c.refundsScheduled = true
			w.planRefunds(c, ac.amountMinor, c.amountMinor, rng)
		}
	case st == http.StatusOK:
		if v.status() != string(payments.StatusCanceled) {
			w.fail("answer", ac.name, "%s: canceled, told %s", ac.name, reply.Response.Body)
		}
		if c.id == ac.paymentID && c.againOnCancel && rng.Float64() < 0.5 {
			c.againOnCancel = false
			c.newKey(fmt.Sprintf("pay%d", c.n))
			w.tracef("client %s: pays the same invoice again with a new key", c.name)
			w.schedule(w.clock.Now().Add(between(rng, time.Second, time.Hour)), true, "pay", func() { w.pay(c) })
		}
	case st == http.StatusPaymentRequired && ac.kind == payments.ActionCapture && v.Code == string(authorizations.CodeCaptureDeclined):
		if c.id != ac.paymentID {
			return
		}
		switch r := rng.Float64(); {
		case r < 0.35:
			w.newActionClient(c, payments.ActionVoid, 0, ac.expiresAt, w.actionTime(w.clock.Now(), ac.expiresAt))
		case r < 0.55:
			w.newActionClient(c, payments.ActionCapture, ac.amountMinor, ac.expiresAt, w.actionTime(w.clock.Now(), ac.expiresAt))
		default:
			w.tracef("client %s: leaves the authorization to expire", ac.name)
		}
	case st == http.StatusConflict:
		// A void the provider refused, or an action abandoned unsent.
	default:
		w.fail("answer", ac.name, "%s: final answer %d %s", ac.name, st, reply.Response.Body)
	}
}

// chargeMoved is the provider's news of a new capture or void: a webhook
// about its payment (Stripe's payment_intent.succeeded or .canceled names
// the payment, not the action), early or late. The payment's key answered
// at its authorization, so there is nothing to resolve.
func (w *world) chargeMoved(o *object, rng *rand.Rand) {
	if rng.Float64() >= w.knobs.PWebhook {
		return
	}
	d := between(rng, 0, 15*time.Second)
	if rng.Float64() < 0.3 {
		d = between(rng, time.Hour, 30*time.Hour)
	}
	res := idempotency.Resource{Type: payments.ResourceType, ID: o.OurID}
	w.schedule(o.ProcessedAt.Add(d), false, "webhook "+o.ID, func() { w.webhook(res, o.ID) })
}

// actionName is the run's name of an action the simulation did not name
// when its client created it: the void the service scheduled for a
// payment's expiry (pay3.exp); "" for anything else.
func (w *world) actionName(id string) string {
	if !strings.HasPrefix(id, "cxl_") {
		return ""
	}
	var paymentID, reason string
	err := w.pool.QueryRow(w.ctx, `SELECT payment_id, reason FROM payment_actions WHERE id = $1`, id).Scan(&paymentID, &reason)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && reason != authorizations.ReasonExpired) {
		return ""
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return w.name(paymentID) + ".exp"
}

// expiryOf is the authorizationExpiresAt of payment id (nil before it is
// authorized).
func (w *world) expiryOf(paymentID string) *time.Time {
	var at *time.Time
	if err := w.pool.QueryRow(w.ctx, `SELECT authorization_expires_at FROM payments WHERE id = $1`, paymentID).Scan(&at); err != nil {
		w.t.Fatal(err)
	}
	return at
}
