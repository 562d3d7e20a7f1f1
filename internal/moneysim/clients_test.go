package moneysim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
)

// retryStyle is how a client spaces its retries with one key.
type retryStyle int

const (
	styleFast        retryStyle = iota // seconds
	styleSteady                        // a fixed interval, minutes
	styleBackoff                       // doubling, up to hours
	styleNearAbandon                   // a daily job: just before the key's abandon time, then a day later
)

func (s retryStyle) String() string {
	return [...]string{"fast", "steady", "backoff", "near-abandon"}[s]
}

// retrier is what every client shares: its key, and how it retries.
type retrier struct {
	// rng is the stream the client draws its choices from: the world's
	// main one for payments and their refunds, its manual-capture one for
	// the clients of captures and cancels (and the refunds of what they
	// captured).
	rng         *rand.Rand
	name        string // the resource's name for the current key
	key         string
	keys        int
	firstAt     time.Time // the current key's first request (its claim)
	attempts    int
	maxAttempts int
	style       retryStyle
	steady      time.Duration
	id          string // the resource of the current key, once known
	// inFlight, if set, runs once inside the provider call of the client's
	// next request (a rival's request while this one is at the provider).
	inFlight func()
}

func (w *world) newRetrier(name string, rng *rand.Rand) retrier {
	r := retrier{
		rng: rng, name: name, style: pick(rng, styleFast, styleFast, styleSteady, styleSteady, styleSteady, styleBackoff,
			styleNearAbandon, styleNearAbandon, styleNearAbandon, styleNearAbandon),
		steady: pick(rng, 2*time.Minute, 5*time.Minute, 20*time.Minute), maxAttempts: pick(rng, 2, 5, 12, 25, 40),
	}
	if r.style == styleNearAbandon {
		r.maxAttempts = min(r.maxAttempts, 4) // a daily job gives up within days
	}
	return r
}

// newKey starts over with a new idempotency key; the resource it creates
// is named base, base+"k2", ...
func (r *retrier) newKey(base string) {
	r.keys++
	r.key = fmt.Sprintf("%s-key-%d", base, r.keys)
	r.attempts, r.id, r.firstAt = 0, "", time.Time{}
	r.name = base
	if r.keys > 1 {
		r.name = fmt.Sprintf("%sk%d", base, r.keys)
	}
}

// delay is how long the client waits before its next attempt.
func (w *world) delay(r *retrier) time.Duration {
	switch r.style {
	case styleSteady:
		return time.Duration(float64(r.steady) * (0.8 + 0.4*r.rng.Float64()))
	case styleBackoff:
		d := min(time.Duration(1<<min(r.attempts, 20))*time.Second, 6*time.Hour)
		return d/2 + between(r.rng, 0, d/2)
	case styleNearAbandon:
		// A daily job: it runs again a little before the time of day of
		// the key's first request, so its first retry comes just before
		// the key's abandon time.
		first := r.firstAt
		if first.IsZero() { // a new key: its first request is the next
			first = w.clock.Now()
		}
		early := between(r.rng, time.Second, time.Minute)
		for day := time.Duration(1); day < 100; day++ {
			if d := first.Add(day*replayTTL - early).Sub(w.clock.Now()); d > 2*time.Minute {
				return d
			}
		}
	}
	return between(r.rng, time.Second, 30*time.Second)
}

// payClient pays one invoice: one key at a time, retried by its style; a
// new key when its payment was canceled or declined, if it is that kind.
type payClient struct {
	retrier
	n                int
	account, ref     string
	method           string
	amountMinor      int64
	againOnCancel    bool
	againOnDecline   bool
	refundsScheduled bool
	// manual: its payments are made with captureMethod manual; what
	// follows their authorization is planned once per key (plannedFor).
	manual     bool
	plannedFor string
	actions    int // action clients made, for their names
	// threeDS: its method asks the customer to authenticate (3-D Secure);
	// what the customer does is planned once per key (authFor). returnURL
	// is the command's (where the return route sends the customer on).
	threeDS   bool
	returnURL string
	authFor   string
}

func (w *world) newPayClient(n int) {
	c := &payClient{
		retrier: w.newRetrier(fmt.Sprintf("pay%d", n), w.rng), n: n,
		account: fmt.Sprintf("acc_%d", 1+w.rng.IntN(2)), ref: fmt.Sprintf("invoice-%d", n),
		amountMinor:   100 * int64(10+w.rng.IntN(90)),
		method:        pick(w.rng, methodOK, methodOK, methodOK, methodOK, methodOK, methodOK, methodDeclined, methodRefundDeclined),
		againOnCancel: w.rng.Float64() < 0.7, againOnDecline: w.rng.Float64() < 0.3,
	}
	// Manual capture: from the second stream, so that the first draws
	// what it drew before manual capture existed.
	manual := ""
	if c.manual = w.mrng.Float64() < w.knobs.PManual; c.manual {
		c.method = pick(w.mrng, methodOK, methodOK, methodOK, methodOK, sim.MethodCaptureDeclined, methodDeclined, methodRefundDeclined)
		manual = ", captureMethod manual"
	}
	// 3-D Secure: from the third stream, likewise.
	if w.arng.Float64() < w.knobs.PThreeDS {
		c.threeDS = true
		c.method = pick(w.arng, sim.MethodThreeDSecureRequired, sim.MethodThreeDSecureRequired, sim.MethodThreeDSecureRequired, sim.MethodThreeDSecureFail)
		if w.arng.Float64() < 0.5 {
			c.returnURL = "https://merchant.example/orders/" + c.ref
		}
	}
	c.newKey(fmt.Sprintf("pay%d", n))
	w.pays = append(w.pays, c)
	w.tracef("client %s: %s %s %s%s, retries %s up to %d", c.name, c.ref, money.Format(c.amountMinor, "EUR"), c.method, manual, c.style, c.maxAttempts)
	w.schedule(w.start.Add(between(w.rng, 0, 2*time.Hour)), true, "pay", func() { w.pay(c) })
}

func (c *payClient) command() payments.Command {
	cmd := payments.Command{AccountID: c.account, AmountMinor: c.amountMinor, Currency: "EUR",
		MerchantReference: c.ref, PaymentMethod: c.method, Channel: payments.ChannelWeb}
	if c.manual {
		cmd.CaptureMethod = payments.CaptureManual
	}
	cmd.ReturnURL = c.returnURL
	return cmd
}

// resourceOfKey returns the resource id of the tenant's key of operation,
// or "" if there is none.
func (w *world) resourceOfKey(operation, key string) string {
	rec, err := idempotency.Load(w.ctx, w.pool, idempotency.Scope{Tenant: tenant, Operation: operation, Key: key})
	if errors.Is(err, idempotency.ErrNotFound) {
		return ""
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return rec.Resource.ID
}

// request runs send as the client's attempt: it names the resource its
// claim creates, and while faults are on it may send a duplicate (and a
// webhook) while the attempt is in flight at the provider.
func (w *world) request(r *retrier, operation, resType string, send func() (idempotency.Reply, error)) (idempotency.Reply, error) {
	w.actor = "client"
	if r.firstAt.IsZero() {
		r.firstAt = w.clock.Now()
	}
	r.attempts++
	if r.id == "" {
		w.pendingName = r.name
	}
	var mid []func()
	if w.faults && r.rng.Float64() < w.knobs.PDuplicate {
		mid = append(mid, func() { w.duplicate(r, operation, resType, send) })
	}
	if r.inFlight != nil {
		mid = append(mid, r.inFlight)
		r.inFlight = nil
	}
	if len(mid) > 0 {
		w.prov.mu.Lock()
		w.prov.midFlight = func() {
			for _, f := range mid {
				f()
			}
		}
		w.prov.mu.Unlock()
	}
	w.tracef("client %s: request with %s (attempt %d)", r.name, r.key, r.attempts)
	reply, err := send()
	w.prov.mu.Lock()
	w.prov.midFlight = nil
	w.prov.mu.Unlock()
	w.actor = "client"
	if r.id == "" {
		if r.id = w.resourceOfKey(operation, r.key); r.id != "" {
			if _, named := w.names[r.id]; !named {
				// (A rival's request inside this one's provider call
				// may have used the pending name up.)
				w.names[r.id] = r.name
			}
		}
	}
	w.pendingName = ""
	return reply, err
}

// duplicate is the same request again while its original is in flight (at
// the provider), and a webhook for the resource then: the one must be
// told 409 IDEMPOTENCY_KEY_IN_USE, the other find the key in flight.
func (w *world) duplicate(r *retrier, operation, resType string, send func() (idempotency.Reply, error)) {
	w.actor = "duplicate"
	id := w.resourceOfKey(operation, r.key)
	_, err := send()
	var inUse *idempotency.KeyInUseError
	if !errors.As(err, &inUse) {
		w.fail("duplicate", r.name, "%s: a duplicate sent while the original was at the provider got %v, want 409 IDEMPOTENCY_KEY_IN_USE", r.name, err)
	}
	// A key left for a person says so first, even while a client's retry
	// holds it.
	outcome, err := w.core.Reconciler.ResolveNow(w.ctx, idempotency.Resource{Type: resType, ID: id})
	if (outcome != idempotency.OutcomeInFlight && outcome != idempotency.OutcomeManualReview) || err != nil {
		w.fail("duplicate", r.name, "%s: a webhook while the original was at the provider resolved it: %q %v, want in_flight", r.name, outcome, err)
	}
	w.tracef("duplicate of %s: 409 in use; webhook: %s", r.name, outcome)
	w.actor = "client"
}

func (w *world) pay(c *payClient) {
	cmd := c.command()
	reply, err := w.request(&c.retrier, payments.OperationCreate, payments.ResourceType, func() (idempotency.Reply, error) {
		return w.core.Payments.Create(w.ctx, tenant, c.key, cmd, 0)
	})
	var (
		inUse   *idempotency.KeyInUseError
		expired *idempotency.KeyExpiredError
		dup     *payments.DuplicateReferenceError
	)
	switch {
	case err == nil:
		st := reply.Response.Status
		w.tracef("client %s: %d replayed=%v", c.name, st, reply.Replayed)
		switch st {
		case http.StatusCreated, http.StatusPaymentRequired, http.StatusConflict:
			w.sawFinal(c.id, c.name, reply)
			key := c.key
			w.maybeReplayLater(&c.retrier, reply, func() (idempotency.Reply, error) {
				return w.core.Payments.Create(w.ctx, tenant, key, cmd, 0)
			})
			switch {
			case st == http.StatusCreated && c.threeDS && bodyStatus(reply) == string(payments.StatusRequiresAction):
				if c.authFor != c.key {
					c.authFor = c.key
					w.planCustomer(c, reply)
				}
			case st == http.StatusCreated && c.manual:
				if c.plannedFor != c.key {
					c.plannedFor = c.key
					w.planActions(c, reply)
				}
			case st == http.StatusCreated && !c.refundsScheduled:
				c.refundsScheduled = true
				w.planRefunds(c, c.amountMinor, 0, w.rng)
			case st == http.StatusConflict && c.againOnCancel, st == http.StatusPaymentRequired && c.againOnDecline:
				c.againOnCancel, c.againOnDecline = false, false
				if st == http.StatusPaymentRequired {
					c.method = methodOK
				}
				c.newKey(fmt.Sprintf("pay%d", c.n))
				w.tracef("client %s: pays the same invoice again with a new key", c.name)
				w.schedule(w.clock.Now().Add(between(c.rng, time.Second, time.Hour)), true, "pay", func() { w.pay(c) })
			}
		case http.StatusAccepted:
			w.retry(&c.retrier, between(c.rng, 2*time.Second, 2*time.Minute), func() { w.pay(c) })
		default:
			w.fail("answer", c.name, "%s: unexpected answer %d %s", c.name, st, reply.Response.Body)
		}
	case errors.Is(err, payments.ErrProviderUnavailable), errors.Is(err, idempotency.ErrCrashed),
		errors.Is(err, payments.ErrReferenceContended):
		w.tracef("client %s: %v", c.name, short(err))
		if c.manual && c.id != "" && errors.Is(err, payments.ErrProviderUnavailable) && w.mrng.Float64() < 0.2 {
			// It cancels the payment, which moved no money, rather than
			// retry it (cancel_payment of a payment never authorized).
			w.tracef("client %s: cancels the payment instead of retrying", c.name)
			w.newActionClient(c, payments.ActionVoid, 0, time.Time{}, w.clock.Now().Add(between(w.mrng, time.Second, 10*time.Minute)))
			return
		}
		w.retry(&c.retrier, w.delay(&c.retrier), func() { w.pay(c) })
	case errors.As(err, &inUse):
		w.tracef("client %s: 409 in use", c.name)
		w.retry(&c.retrier, between(c.rng, lease/2, 2*lease), func() { w.pay(c) })
	case errors.As(err, &dup):
		w.tracef("client %s: 409 duplicate merchant reference (held by %s): stops", c.name, w.name(dup.PaymentID))
	case errors.As(err, &expired):
		w.tracef("client %s: 409 key expired: stops", c.name)
	default:
		w.fail("answer", c.name, "%s: unexpected error %v", c.name, err)
	}
}

// bodyStatus is the status a 2xx body says.
func bodyStatus(reply idempotency.Reply) string {
	var v authorizedView
	_ = json.Unmarshal(reply.Response.Body, &v)
	return v.status()
}

func short(err error) string {
	s := err.Error()
	if len(s) > 90 {
		s = s[:90] + "..."
	}
	return s
}

// retry schedules the client's next attempt after d, unless it gives up.
func (w *world) retry(r *retrier, d time.Duration, fn func()) {
	if r.attempts >= r.maxAttempts {
		w.tracef("client %s: gives up after %d attempts", r.name, r.attempts)
		return
	}
	w.schedule(w.clock.Now().Add(d), true, "retry "+r.name, fn)
}

// sawFinal records a final answer a client got: the stored answer must
// stay what it said (checked at the end).
func (w *world) sawFinal(id, name string, reply idempotency.Reply) {
	if _, ok := w.saw[id]; ok || id == "" {
		return
	}
	w.saw[id] = seen{status: reply.Response.Status, body: bytes.Clone(reply.Response.Body), who: name}
}

// maybeReplayLater sends the same request again much later: it must be
// answered by the same bytes, or (past the replay window) as expired.
func (w *world) maybeReplayLater(r *retrier, first idempotency.Reply, send func() (idempotency.Reply, error)) {
	if !w.faults || r.rng.Float64() >= 0.25 {
		return
	}
	name, id := r.name, r.id
	w.schedule(w.clock.Now().Add(between(r.rng, time.Minute, 30*time.Hour)), true, "replay "+name, func() {
		w.actor = "client"
		reply, err := send()
		var expired *idempotency.KeyExpiredError
		switch {
		case err == nil && reply.Response.Status == first.Response.Status && bytes.Equal(reply.Response.Body, first.Response.Body):
			w.tracef("client %s: replay %d, same bytes", name, reply.Response.Status)
		case errors.As(err, &expired) && expired.Resource.ID == id:
			w.tracef("client %s: replay: 409 key expired", name)
		default:
			w.fail("replay", name, "%s: the same request later got %d %s / %v, not the stored %d %s",
				name, reply.Response.Status, reply.Response.Body, err, first.Response.Status, first.Response.Body)
		}
	})
}

// refundClient refunds part or all of a payment its client saw succeed.
type refundClient struct {
	retrier
	pay         *payClient
	paymentID   string
	base        string
	amountMinor int64
	newKeyOn503 bool // a careless client: a refusal makes it start over with a new key
}

// planRefunds plans the refunds of c's payment, which captured captured:
// all of it or half, each; or, for a payment that captured less than it
// authorized (over), now and then the authorized amount, which must be
// refused. Its choices come from rng.
func (w *world) planRefunds(c *payClient, captured, over int64, rng *rand.Rand) {
	if rng.Float64() >= w.knobs.PRefund {
		return
	}
	n := 1 + rng.IntN(2)
	for i := 1; i <= n; i++ {
		amount := captured
		if rng.Float64() < 0.6 {
			amount = captured / 2
		}
		if over > captured && rng.Float64() < 0.25 {
			amount = over
		}
		base := fmt.Sprintf("ref%d.%d", c.n, i)
		rc := &refundClient{retrier: w.newRetrier(base, rng), pay: c, paymentID: c.id, base: base, amountMinor: amount,
			newKeyOn503: rng.Float64() < 0.3}
		rc.newKey(base)
		w.refs = append(w.refs, rc)
		w.tracef("client %s: will refund %s of %s, retries %s up to %d", rc.name, money.Format(amount, "EUR"), c.name, rc.style, rc.maxAttempts)
		w.schedule(w.clock.Now().Add(between(rng, 10*time.Second, 30*time.Hour)), true, "refund", func() { w.refund(rc) })
	}
}

func (w *world) refund(rc *refundClient) {
	w.actor = "client"
	cmd, err := w.core.Refunds.Prepare(w.ctx, tenant, rc.paymentID, refunds.CreateRequest{Amount: money.Amount(money.Format(rc.amountMinor, "EUR"))})
	if err != nil {
		w.fail("answer", rc.name, "%s: prepare: %v", rc.name, err)
		return
	}
	reply, err := w.request(&rc.retrier, refunds.OperationCreate, refunds.ResourceType, func() (idempotency.Reply, error) {
		return w.core.Refunds.Create(w.ctx, tenant, rc.key, cmd, 0)
	})
	var (
		inUse   *idempotency.KeyInUseError
		exceeds *refunds.ExceedsRefundableError
	)
	switch {
	case err == nil:
		st := reply.Response.Status
		w.tracef("client %s: %d replayed=%v", rc.name, st, reply.Replayed)
		switch st {
		case http.StatusCreated, http.StatusPaymentRequired:
			w.sawFinal(rc.id, rc.name, reply)
			key := rc.key
			w.maybeReplayLater(&rc.retrier, reply, func() (idempotency.Reply, error) {
				return w.core.Refunds.Create(w.ctx, tenant, key, cmd, 0)
			})
		case http.StatusAccepted:
			w.retry(&rc.retrier, between(rc.rng, 2*time.Second, 2*time.Minute), func() { w.refund(rc) })
		default:
			w.fail("answer", rc.name, "%s: unexpected answer %d %s", rc.name, st, reply.Response.Body)
		}
	case errors.Is(err, refunds.ErrProviderUnavailable):
		w.tracef("client %s: %v", rc.name, short(err))
		if rc.newKeyOn503 && rc.rng.Float64() < 0.5 {
			rc.newKeyOn503 = false
			rc.newKey(rc.base)
			w.tracef("client %s: starts over with a new key", rc.name)
		}
		w.retry(&rc.retrier, w.delay(&rc.retrier), func() { w.refund(rc) })
	case errors.Is(err, idempotency.ErrCrashed):
		w.retry(&rc.retrier, w.delay(&rc.retrier), func() { w.refund(rc) })
	case errors.As(err, &inUse):
		w.tracef("client %s: 409 in use", rc.name)
		w.retry(&rc.retrier, between(rc.rng, lease/2, 2*lease), func() { w.refund(rc) })
	case errors.As(err, &exceeds):
		w.tracef("client %s: 409 exceeds refundable (%s left): stops", rc.name, money.Format(exceeds.RefundableMinor, "EUR"))
	case errors.Is(err, refunds.ErrNotRefundable):
		w.tracef("client %s: 409 not refundable: stops", rc.name)
	default:
		w.fail("answer", rc.name, "%s: unexpected error %v", rc.name, err)
	}
}
