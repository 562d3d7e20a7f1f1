package moneysim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
)

// This file is customer authentication (3-D Secure) in the simulation: the
// customer at the provider's challenge, the three roads that carry what
// the customer did to the service (the customer's return, the provider's
// webhook, the reconciler's look), the merchant reading its payment, and
// the invariants of a payment that waited for its customer.

// challengeBase is where the simulated provider's challenge pages are.
const challengeBase = "https://provider.sim/challenge/"

func challengeURL(chargeID string) string { return challengeBase + chargeID }

func isThreeDS(method string) bool {
	return method == sim.MethodThreeDSecureRequired || method == sim.MethodThreeDSecureFail
}

// abandonProviderKey is the provider key of the cancellation of payment
// id's charge when its customer never authenticated (payments' abandonKey).
func abandonProviderKey(id string) string { return "paymentsapi:abandon:" + id }

// planCustomer plans what follows a payment's 201 REQUIRES_ACTION: what
// its customer chooses at the challenge (approve, fail, or nothing) and
// when (soon, just before the customer's time runs out, after it, while
// the abandonment's cancellation is on its way, or between a road's look
// and what that road does next); whether the customer's browser comes
// back to the return route (once, twice, late, never; now and then with
// a query string that lies); and when the merchant reads the payment.
// Every choice is from the 3-D Secure stream.
func (w *world) planCustomer(c *payClient, reply idempotency.Reply) {
	rng := w.arng
	var v struct {
		PaymentID  string `json:"paymentId"`
		NextAction *struct {
			Type string `json:"type"`
			URL  string `json:"url"`
		} `json:"nextAction"`
	}
	if err := json.Unmarshal(reply.Response.Body, &v); err != nil || v.NextAction == nil || v.NextAction.Type != payments.NextActionRedirect {
		w.fail("answer", c.name, "%s: a 201 REQUIRES_ACTION without a redirect: %s", c.name, reply.Response.Body)
		return
	}
	chargeID := strings.TrimPrefix(v.NextAction.URL, challengeBase)
	w.prov.mu.Lock()
	ch := w.prov.byID[chargeID]
	ours := ch != nil && ch.OurID == c.id
	w.prov.mu.Unlock()
	if !ours || v.PaymentID != c.id {
		w.fail("next-action", c.name, "%s: its 201 sends the customer to %s, not its charge's challenge", c.name, v.NextAction.URL)
		return
	}
	p, err := w.core.Payments.Get(w.ctx, tenant, c.id)
	if err != nil {
		w.t.Fatal(err)
	}
	id, key, cmd, name := c.id, c.key, c.command(), c.name
	now := w.clock.Now()
	deadline := p.UpdatedAt.Add(w.knobs.AuthenticationTimeout)
	approve := rng.Float64() < 0.75
	choose := func() { w.customerChooses(name, chargeID, approve) }
	verb := map[bool]string{true: "approve", false: "fail"}[approve]
	var at time.Time // when the customer chooses, if at a time of its own
	switch r := rng.Float64(); {
	case r < 0.4:
		at = now.Add(between(rng, 5*time.Second, 10*time.Minute))
	case r < 0.55: // just before the time runs out
		at = deadline.Add(-between(rng, 0, 5*time.Minute))
	case r < 0.7: // after it: the abandonment may have begun, or be done
		at = deadline.Add(between(rng, 0, 30*time.Minute))
	case r < 0.8:
		w.tracef("customer of %s: will %s while the abandonment's cancellation is on its way", name, verb)
		w.prov.mu.Lock()
		w.prov.beforeAbandon[id] = choose
		w.prov.mu.Unlock()
	case r < 0.88:
		arm := now.Add(between(rng, 5*time.Second, max(deadline.Sub(now), 0)+5*time.Minute))
		w.tracef("customer of %s: will %s just after a look at its charge from %s", name, verb, w.at(arm))
		w.schedule(arm, true, "customer "+name, func() {
			w.prov.addAfterLookup(payments.ProviderKey(id), &lookHook{f: choose})
		})
	default:
		w.tracef("customer of %s: never authenticates", name)
	}
	back := deadline.Add(between(rng, 0, time.Hour)) // when the browser comes back, if it chose at no time of its own
	if !at.IsZero() {
		if at.Before(now) {
			at = now
		}
		w.tracef("customer of %s: will %s at %s (its time runs out at %s)", name, verb, w.at(at), w.at(deadline))
		w.schedule(at, true, "customer "+name, choose)
		back = at
	}
	if rng.Float64() < 0.75 { // else the browser never comes back
		n := 1
		if rng.Float64() < 0.2 {
			n = 2 // a reload
		}
		for range n {
			d := between(rng, 0, 5*time.Second)
			if rng.Float64() < 0.2 {
				d = between(rng, 10*time.Minute, 3*time.Hour)
			}
			forged, race := rng.Float64() < 0.15, rng.Float64() < 0.3
			w.schedule(back.Add(d), true, "return "+name, func() { w.customerReturns(name, id, chargeID, forged, race) })
		}
	}
	if rng.Float64() < 0.1 {
		// Someone who never saw the challenge comes to the return route
		// with a query string that says the payment succeeded.
		w.schedule(now.Add(between(rng, time.Second, max(deadline.Sub(now), time.Second))), true, "return "+name, func() {
			w.customerReturns(name, id, chargeID, true, false)
		})
	}
	w.schedule(back.Add(between(rng, time.Second, 30*time.Minute)), true, "read "+name, func() { w.readPayment(c, id, key, cmd, 1) })
}

// customerChooses is the customer's choice at the challenge page of
// charge chargeID: it changes the charge only while the charge waits
// (once, and never after the abandonment canceled it), and the provider
// announces the change.
func (w *world) customerChooses(name, chargeID string, approve bool) {
	actor := w.actor
	w.actor = "customer"
	defer func() { w.actor = actor }()
	p := w.prov
	p.mu.Lock()
	ch := p.byID[chargeID]
	if ch.Status != provider.StatusRequiresAction {
		p.mu.Unlock()
		w.tracef("customer of %s: chooses on %s's challenge (approve %v): changes nothing, the charge is %s", name, chargeID, approve, ch.Status)
		return
	}
	switch {
	case !approve || ch.Method == sim.MethodThreeDSecureFail:
		ch.Status, ch.DeclineCode = provider.StatusDeclined, payments.DeclineAuthenticationFailed
	case ch.Manual:
		ch.Status, ch.Authenticated = provider.StatusAuthorized, true
	default:
		ch.Status, ch.AmountCapturedMinor, ch.Authenticated = provider.StatusSucceeded, ch.AmountMinor, true
	}
	ch.DecidedAt = w.clock.Now()
	o := *ch
	p.mu.Unlock()
	w.tracef("customer of %s: chooses on %s's challenge (approve %v): the charge is %s", name, chargeID, approve, o.Status)
	w.choiceAnnounced(&o)
}

// choiceAnnounced is the provider's webhook of a customer's choice:
// delivered (or lost), duplicated, early, or late, like every webhook.
func (w *world) choiceAnnounced(o *object) {
	rng := w.arng
	if rng.Float64() >= w.knobs.PWebhook {
		return
	}
	n := 1
	if rng.Float64() < 0.3 {
		n += 1 + rng.IntN(2)
	}
	res := idempotency.Resource{Type: payments.ResourceType, ID: o.OurID}
	for range n {
		var d time.Duration
		switch r := rng.Float64(); {
		case r < 0.4:
			d = between(rng, 0, 15*time.Second)
		case r < 0.75:
			d = w.knobs.LookupLag + between(rng, 0, 2*time.Minute)
		default:
			d = between(rng, time.Hour, 30*time.Hour)
		}
		w.schedule(o.DecidedAt.Add(d), false, "webhook "+o.ID, func() { w.webhook(res, o.ID) })
	}
}

// lookHook is what runs once after a lookup of a charge (afterLookup).
type lookHook struct{ f func() }

func (p *simProvider) addAfterLookup(key string, h *lookHook) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.afterLookup[key] = append(p.afterLookup[key], h)
}

// removeAfterLookup takes h off the key's hooks if it has not run.
func (p *simProvider) removeAfterLookup(key string, h *lookHook) {
	p.mu.Lock()
	defer p.mu.Unlock()
	hs := p.afterLookup[key]
	for i, x := range hs {
		if x == h {
			p.afterLookup[key] = append(hs[:i:i], hs[i+1:]...)
			return
		}
	}
}

// customerReturns is the customer's browser at GET /payments/{id}/return,
// with the query string the provider adds (redirect_status: what the
// charge is now, or, forged, "succeeded" whatever it is). With race, a
// rival road (the provider's webhook, or the browser's reload) arrives
// while the return's look at the charge is at the provider.
func (w *world) customerReturns(name, id, chargeID string, forged, race bool) {
	w.actor = "customer"
	w.prov.mu.Lock()
	status := map[provider.Status]string{provider.StatusSucceeded: "succeeded", provider.StatusAuthorized: "succeeded",
		provider.StatusDeclined: "failed", provider.StatusCanceled: "canceled"}[w.prov.byID[chargeID].Status]
	w.prov.mu.Unlock()
	if status == "" {
		status = "requires_action"
	}
	if forged {
		status = "succeeded"
	}
	key := payments.ProviderKey(id)
	var rival *lookHook
	if race {
		webhook := w.arng.Float64() < 0.6
		rival = &lookHook{f: func() {
			if webhook {
				w.tracef("return of %s: the provider's webhook arrives while the return's look is at the provider", name)
				w.webhook(idempotency.Resource{Type: payments.ResourceType, ID: id}, chargeID)
			} else {
				w.tracef("return of %s: the browser reloads while the return's look is at the provider", name)
				w.customerReturns(name, id, chargeID, forged, false)
			}
			w.actor = "customer"
		}}
		w.prov.addAfterLookup(key, rival)
	}
	q := url.Values{"payment_intent": {chargeID}, "redirect_status": {status}}
	req := httptest.NewRequestWithContext(w.ctx, http.MethodGet, payments.ReturnPath(id)+"?"+q.Encode(), nil)
	rec := httptest.NewRecorder()
	w.returns.ServeHTTP(rec, req)
	if rival != nil {
		w.prov.removeAfterLookup(key, rival) // (a return that found the payment settled looks at nothing)
	}
	p, err := w.core.Payments.Get(w.ctx, tenant, id)
	if err != nil {
		w.t.Fatal(err)
	}
	w.actor = "customer"
	switch {
	case rec.Code == http.StatusSeeOther && p.Command.ReturnURL != "" && strings.HasPrefix(rec.Header().Get("Location"), p.Command.ReturnURL):
	case rec.Code == http.StatusOK && p.Command.ReturnURL == "" && strings.HasPrefix(rec.Body.String(), "Payment "+id+" is "):
	default:
		w.fail("return", name, "%s: the customer's return got %d %q %s", name, rec.Code, rec.Header().Get("Location"), rec.Body.String())
	}
	w.tracef("return of %s (redirect_status=%s%s): %d; the payment is %s", name, status, map[bool]string{true: ", forged"}[forged], rec.Code, p.State)
}

// readPayment is the merchant reading its payment after its customer's
// challenge (GET /payments/{id}), until it is settled: then it refunds
// what succeeded, plans the capture or cancel of what was authorized, pays
// again after a decline or a cancellation (if it is that kind), and now and
// then sends its create request again, which must replay the 201
// REQUIRES_ACTION it got first.
func (w *world) readPayment(c *payClient, id, key string, cmd payments.Command, n int) {
	w.actor = "client"
	p, err := w.core.Payments.Get(w.ctx, tenant, id)
	if err != nil {
		w.t.Fatal(err)
	}
	w.tracef("client %s: reads its payment: %s", w.name(id), p.State)
	settled := true
	switch p.State {
	case payments.StateCompleted:
		if !c.refundsScheduled && c.id == id {
			c.refundsScheduled = true
			w.planRefunds(c, c.amountMinor, 0, w.arng)
		}
	case payments.StateAuthorized:
		if c.plannedFor != key && c.id == id {
			c.plannedFor = key
			body, _ := json.Marshal(map[string]any{"paymentId": id, "status": payments.StatusRequiresCapture,
				"authorizationExpiresAt": p.AuthorizationExpiresAt})
			w.planActions(c, idempotency.Reply{Response: idempotency.Response{Status: http.StatusCreated, Body: body}})
		}
	case payments.StateDeclined, payments.StateCanceled:
		again := c.againOnDecline
		if p.State == payments.StateCanceled {
			again = c.againOnCancel
		}
		if again && c.key == key {
			c.againOnCancel, c.againOnDecline = false, false
			if p.State == payments.StateDeclined {
				c.method, c.threeDS = methodOK, false
			}
			c.newKey(fmt.Sprintf("pay%d", c.n))
			w.tracef("client %s: pays the same invoice again with a new key", c.name)
			w.schedule(w.clock.Now().Add(between(w.arng, time.Second, time.Hour)), true, "pay", func() { w.pay(c) })
		}
	case payments.StateRequiresAction:
		settled = false
		if n < 40 {
			w.schedule(w.clock.Now().Add(between(w.arng, 5*time.Minute, 30*time.Minute)), true, "read "+w.name(id), func() { w.readPayment(c, id, key, cmd, n+1) })
		}
	default:
		settled = false
	}
	if settled && w.arng.Float64() < 0.5 {
		w.replayCreate(w.name(id), id, key, cmd)
	}
}

// replayCreate sends a payment's create request again: it must be
// answered by the bytes its client was first told (or, past the replay
// window, as expired).
func (w *world) replayCreate(name, id, key string, cmd payments.Command) {
	first, ok := w.saw[id]
	if !ok {
		return
	}
	reply, err := w.core.Payments.Create(w.ctx, tenant, key, cmd, 0)
	var expired *idempotency.KeyExpiredError
	switch {
	case err == nil && reply.Response.Status == first.status && bytes.Equal(reply.Response.Body, first.body):
		w.tracef("client %s: replay %d, same bytes", name, reply.Response.Status)
	case errors.As(err, &expired) && expired.Resource.ID == id:
		w.tracef("client %s: replay: 409 key expired", name)
	default:
		w.fail("replay", name, "%s: its create request again got %d %s / %v, not the stored %d %s",
			name, reply.Response.Status, reply.Response.Body, err, first.status, first.body)
	}
}

// checkAuthentications, after every step of a run with 3-D Secure
// payments: a payment that waited for its customer is SUCCEEDED or
// authorized (and what follows an authorization) only if the provider's
// charge says its customer authenticated (unauthenticated-success);
// DECLINED only as a declined charge; CANCELED only as a canceled one
// (canceled-while-provider-holds: never while the provider holds a
// charge, an authorization, or one still waiting for its customer).
func (w *world) checkAuthentications() {
	if w.knobs.PThreeDS == 0 {
		return
	}
	rows, err := w.pool.Query(w.ctx, `SELECT id, state, COALESCE(provider_reference, '') FROM payments
		WHERE next_action_url IS NOT NULL AND state <> 'REQUIRES_ACTION' ORDER BY created_at, id`)
	if err != nil {
		w.t.Fatal(err)
	}
	type settled struct{ id, state, charge string }
	var list []settled
	for rows.Next() {
		var s settled
		if err := rows.Scan(&s.id, &s.state, &s.charge); err != nil {
			w.t.Fatal(err)
		}
		list = append(list, s)
	}
	rows.Close()
	for _, s := range list {
		name := w.name(s.id)
		w.prov.mu.Lock()
		var ch object
		if o := w.prov.byID[s.charge]; o != nil {
			ch = *o
		}
		w.prov.mu.Unlock()
		switch payments.State(s.state) {
		case payments.StateCompleted, payments.StateAuthorized, payments.StateCaptureRequested, payments.StateVoidRequested:
			if !ch.Authenticated {
				w.fail("unauthenticated-success", name, "payment %s is %s, but the provider's charge %q is %q and its customer never authenticated; %s",
					name, s.state, s.charge, ch.Status, w.history("payment", s.id))
			}
		case payments.StateDeclined:
			if ch.Status != provider.StatusDeclined {
				w.fail("declined-unlike-provider", name, "payment %s is DECLINED while the provider's charge %q is %q; %s",
					name, s.charge, ch.Status, w.history("payment", s.id))
			}
		case payments.StateCanceled:
			if ch.Status != provider.StatusCanceled {
				w.fail("canceled-while-provider-holds", name, "payment %s is CANCELED while the provider's charge %q is %q (authenticated %v); %s",
					name, s.charge, ch.Status, ch.Authenticated, w.history("payment", s.id))
			}
		}
	}
}

// authFinal is what checkFinal reads of the payments that waited for their
// customer: by payment, its moves into and out of REQUIRES_ACTION.
type authFinal struct{ into, out int }

func (w *world) loadAuthMoves() map[string]authFinal {
	rows, err := w.pool.Query(w.ctx, `SELECT payment_id,
		count(*) FILTER (WHERE to_state = 'REQUIRES_ACTION'), count(*) FILTER (WHERE from_state = 'REQUIRES_ACTION')
		FROM payment_transitions GROUP BY payment_id`)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]authFinal{}
	for rows.Next() {
		var id string
		var m authFinal
		if err := rows.Scan(&id, &m.into, &m.out); err != nil {
			w.t.Fatal(err)
		}
		if m.into > 0 || m.out > 0 {
			out[id] = m
		}
	}
	return out
}

// checkAuthenticationEnd, at the end, for a payment that waited for its
// customer: it waited once and was settled exactly once (one move out of
// REQUIRES_ACTION: settled-once; one PaymentRequiresAction event, and the
// final event checkFinal counts); its authentication key is final, or left
// for a person only where the provider was ambiguous or could not say;
// the provider holds at most one cancellation for its abandonment.
func (w *world) checkAuthenticationEnd(p payRow, m authFinal, k keyRow, hasKey bool, bk books, events map[string]int) {
	name := w.name(p.id)
	chargeKey, abandonKey := payments.ProviderKey(p.id), abandonProviderKey(p.id)
	if m.into != 1 || m.out > 1 || (m.out == 0 && p.state != string(payments.StateRequiresAction)) {
		w.fail("settled-once", name, "payment %s (%s) moved into REQUIRES_ACTION %d times and out of it %d times; %s", name, p.state, m.into, m.out,
			w.history("payment", p.id))
	}
	w.checkEvents(name, p.id, events, payments.EventRequiresAction, true)
	if objs := bk.voids[abandonKey]; len(objs) > 1 {
		w.fail("one-object-per-key", name, "payment %s: the provider holds %d cancellations for its abandonment: %v", name, len(objs), objs)
	}
	if !hasKey {
		w.fail("authentication-key", name, "payment %s waited for its customer and has no authentication key", name)
		return
	}
	final := k.status != nil
	if final && p.state == string(payments.StateRequiresAction) {
		w.fail("authentication-key", name, "payment %s still waits for its customer, but its authentication key stored %d %s", name, *k.status, k.body)
	}
	gaveUp := w.uncertain[chargeKey] > 0 || w.uncertain[abandonKey] > 0
	held := []string{}
	for _, o := range bk.charges[chargeKey] {
		held = append(held, o.ID+" "+string(o.Status))
	}
	w.checkEnd("authentication", name, p.state, p.id, final, k, bk.ambiguous[chargeKey], gaveUp, held)
}
