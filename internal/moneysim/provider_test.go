package moneysim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
)

// simProvider is the simulation's payment provider: an in-memory book of
// charges (captured at once, or authorized, then captured or voided) and
// refunds on the fake clock, with the faults the seed chose.
// Every fault it injects is one a real provider shows:
//
//   - a refusal (ErrUnavailable) that hides a processed request: the object
//     is created, the answer says it was not;
//   - a lost answer (ErrUnknownOutcome) after processing, and an answer
//     that comes after the caller's timeout, the request being processed
//     only later (its object appears then);
//   - lookups that lag creates: an object created at T is invisible to
//     Lookup and LookupRefund (ErrNotFound) until T+lag;
//   - lookups that cannot say (ErrUnavailable) or say ErrAmbiguous;
//   - its own idempotency: the same key within keyTTL of the key's first
//     request is the same object, never a second charge; after keyTTL the
//     key is forgotten and a request with it creates a second object
//     (which the service must never cause: ProviderKeyWindow).
//
// Captures and voids draw the same fates as creates (a refusal, hidden or
// not, a lost or late answer), from the world's manual-capture stream, and
// are keyed the same way; each new one may announce a webhook about its
// payment (as Stripe's payment_intent.succeeded or .canceled would). A capture or void processed late moves its charge at once, as
// far as other requests are concerned, but GetCharge and Lookup show the
// move only from when it was processed. GetCharge is read-after-write
// (no lag) and may only fail to say, like a lookup.
//
// Faults are drawn from the world's one random source, in the order of the
// calls, which the sequential simulation makes the same on every replay.
// It is safe for concurrent use, but the simulation calls it from one
// goroutine at a time.
type simProvider struct {
	mu    sync.Mutex
	clock *clock.Fake
	w     *world // its random source, knobs and trace; faults on or off

	charges  map[string][]*object // by idempotency key, oldest first
	refunds  map[string][]*object
	captures map[string][]*object
	voids    map[string][]*object
	byID     map[string]*object // charges and refunds
	// ambiguous: the keys a lookup answered ErrAmbiguous for (manual
	// review is expected only for these).
	ambiguous map[string]bool
	seq       int

	// midFlight, when set, runs once inside the next Charge or Refund
	// call, with no lock held: the world sends a duplicate of the request
	// while its original is in flight.
	midFlight func()
	// afterLookup, by a charge's key, runs once inside the next Lookup of
	// it, after the answer was read and with no lock held: another road
	// (a webhook, a return, the customer's choice) while one road's
	// lookup is at the provider. beforeAbandon, by payment id, runs once
	// inside the next cancellation of its charge for an abandoned
	// authentication, before it is processed: the customer's late choice
	// racing the abandonment.
	afterLookup   map[string][]*lookHook
	beforeAbandon map[string]func()
}

// object is a charge, a refund, a capture or a void as the provider holds
// it.
type object struct {
	ID, Key     string
	Refund      bool
	ChargeID    string // a refund's, capture's or void's charge
	OurID       string // the payment or refund id in the request's metadata
	Method      string // a charge's payment method
	Status      provider.Status
	DeclineCode string
	AmountMinor int64
	Currency    string
	ReceivedAt  time.Time // the first request with the key: its key window starts here
	ProcessedAt time.Time // after ReceivedAt when the answer came after the timeout
	Requests    int       // requests with its key that reached it
	// AmountCapturedMinor: of a charge, how much of it was captured (all
	// of it when captured at once); of a capture or void, the charge's
	// once it was decided.
	AmountCapturedMinor int64
	// MovedAt: of a charge that a capture or void moved on, when that was
	// processed. Before it the charge shows as MovedFrom (authorized when
	// empty).
	MovedAt   time.Time
	MovedFrom provider.Status
	// 3-D Secure: a charge made with one of the 3DS methods waits for its
	// customer (StatusRequiresAction) at NextActionURL. Manual: it was
	// asked for with CaptureManual. Authenticated: the customer approved
	// it, and the provider took the approval (at DecidedAt).
	NextActionURL string
	Manual        bool
	Authenticated bool
	DecidedAt     time.Time
}

var _ provider.Provider = (*simProvider)(nil)

func newSimProvider(w *world) *simProvider {
	return &simProvider{clock: w.clock, w: w, charges: map[string][]*object{}, refunds: map[string][]*object{},
		captures: map[string][]*object{}, voids: map[string][]*object{},
		byID: map[string]*object{}, ambiguous: map[string]bool{},
		afterLookup: map[string][]*lookHook{}, beforeAbandon: map[string]func(){}}
}

// LookupLag is the provider's declared lag (provider.Adapter): how long
// after a request reached it a lookup may still miss what the request
// made. A late request (PLate) is processed LateBy after it arrived, and is
// visible LookupLag after that, so the declaration covers both. It covered
// the visibility alone, and a capture sent just before its authorization's
// expiry, processed late, was declined as "lapsed before the provider
// processed it" and then captured (seed 841): a provider that declares
// less than it lags is one whose "not found" nobody can trust
// (docs/operations.md, "Known limits").
func (p *simProvider) LookupLag() time.Duration {
	lag := p.w.knobs.LookupLag
	if p.w.knobs.PLate > 0 {
		lag += p.w.knobs.LateBy
	}
	return lag
}

// fate is what becomes of one create request.
type fate int

const (
	fateOK            fate = iota
	fateRefused            // refused before processing: nothing created
	fateRefusedHidden      // processed, but the answer is a refusal
	fateLost               // processed, the answer lost
	fateLate               // processed after the caller's timeout
)

func (f fate) String() string {
	return [...]string{"ok", "refused", "refused-but-processed", "answer-lost", "answer-after-timeout"}[f]
}

// drawFate draws the fate of a request from rng (none while faults are
// off): the world's main stream for charges and refunds, its manual-capture
// stream for captures and voids.
func (p *simProvider) drawFate(rng *rand.Rand) fate {
	w := p.w
	if !w.faults {
		return fateOK
	}
	k := w.knobs
	switch r := rng.Float64(); {
	case r < k.PRefuse*(1-k.PRefuseHidden):
		return fateRefused
	case r < k.PRefuse:
		return fateRefusedHidden
	case r < k.PRefuse+k.PLost:
		return fateLost
	case r < k.PRefuse+k.PLost+k.PLate:
		return fateLate
	}
	return fateOK
}

func (p *simProvider) runMidFlight() {
	p.mu.Lock()
	f := p.midFlight
	p.midFlight = nil
	p.mu.Unlock()
	if f != nil {
		f()
	}
}

// create finds the live object for key among objs (remembered for keyTTL
// from its first request) or makes one with mk, and announces it.
func (p *simProvider) create(book map[string][]*object, key string, f fate, mk func(o *object)) *object {
	o, made := p.keyed(book, key, f, mk)
	if made {
		p.byID[o.ID] = o
		p.w.objectCreated(o)
	}
	return o
}

// keyed finds the live object for key among objs (remembered for keyTTL
// from its first request), or makes one with mk and reports made.
func (p *simProvider) keyed(book map[string][]*object, key string, f fate, mk func(o *object)) (o *object, made bool) {
	now := p.clock.Now()
	objs := book[key]
	if n := len(objs); n > 0 && now.Sub(objs[n-1].ReceivedAt) < p.w.knobs.ProviderKeyTTL {
		o := objs[n-1]
		o.Requests++
		return o, false
	}
	p.seq++
	o = &object{Key: key, ReceivedAt: now, ProcessedAt: now, Requests: 1}
	if f == fateLate {
		o.ProcessedAt = now.Add(p.w.knobs.LateBy)
	}
	mk(o)
	book[key] = append(book[key], o)
	return o, true
}

// noteUncertain counts an answer to the reconciler that left the outcome
// of key unknown.
func (p *simProvider) noteUncertain(key string) {
	if p.w.actor == "reconciler" {
		p.w.uncertain[key]++
	}
}

// answer is what the caller of a create gets for o under fate f.
func answerErr(f fate, o *object, now time.Time) error {
	switch f {
	case fateRefused, fateRefusedHidden:
		return fmt.Errorf("%w: simulated 503", provider.ErrUnavailable)
	case fateLost:
		return fmt.Errorf("%w: simulated lost answer", provider.ErrUnknownOutcome)
	case fateLate:
		return fmt.Errorf("%w: simulated timeout (processed later)", provider.ErrUnknownOutcome)
	}
	if now.Before(o.ProcessedAt) {
		// The key's first request is still being processed: this one
		// joins it and times out as well.
		return fmt.Errorf("%w: simulated timeout (request with this key in progress)", provider.ErrUnknownOutcome)
	}
	return nil
}

// Charge creates a charge, or returns the key's.
func (p *simProvider) Charge(_ context.Context, req provider.ChargeRequest) (provider.Charge, error) {
	p.runMidFlight()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.drawFate(p.w.rng)
	now := p.clock.Now()
	if f != fateOK {
		p.noteUncertain(req.IdempotencyKey)
	}
	if f == fateRefused {
		p.w.tracef("provider: charge %s refused before processing", p.w.name(req.PaymentID))
		return provider.Charge{}, answerErr(f, nil, now)
	}
	o := p.create(p.charges, req.IdempotencyKey, f, func(o *object) {
		o.ID = fmt.Sprintf("ch_%d", p.seq)
		o.OurID, o.AmountMinor, o.Currency, o.Method = req.PaymentID, req.AmountMinor, req.Currency, req.PaymentMethod
		o.Manual = req.CaptureManual
		if isThreeDS(req.PaymentMethod) {
			p.w.threeDS[req.PaymentID] = true
		}
		switch {
		case isThreeDS(req.PaymentMethod):
			o.Status, o.NextActionURL = provider.StatusRequiresAction, challengeURL(o.ID)
		case req.PaymentMethod == methodDeclined:
			o.Status, o.DeclineCode = provider.StatusDeclined, "card_declined"
		case req.CaptureManual:
			o.Status = provider.StatusAuthorized
		default:
			o.Status, o.AmountCapturedMinor = provider.StatusSucceeded, req.AmountMinor
		}
	})
	err := answerErr(f, o, now)
	p.w.tracef("provider: charge %s -> %s %s (%s, request %d, processed %s)", p.w.name(req.PaymentID), o.ID, o.Status, f, o.Requests, p.w.at(o.ProcessedAt))
	if err != nil {
		return provider.Charge{}, err
	}
	return chargeOf(o), nil
}

func chargeOf(o *object) provider.Charge {
	ch := provider.Charge{ID: o.ID, IdempotencyKey: o.Key, Status: o.Status, DeclineCode: o.DeclineCode,
		AmountMinor: o.AmountMinor, Currency: o.Currency, AmountCapturedMinor: o.AmountCapturedMinor}
	if o.Status == provider.StatusRequiresAction {
		ch.NextActionURL = o.NextActionURL
	}
	return ch
}

// chargeAt is charge o as a read at now shows it: as it was (authorized,
// or waiting for its customer) until the capture or void that moved it was
// processed.
func chargeAt(o *object, now time.Time) provider.Charge {
	if now.Before(o.MovedAt) {
		before := *o
		before.Status, before.AmountCapturedMinor, before.DeclineCode = provider.StatusAuthorized, 0, ""
		if o.MovedFrom != "" {
			before.Status = o.MovedFrom
		}
		return chargeOf(&before)
	}
	return chargeOf(o)
}

func refundOf(o *object) provider.Refund {
	return provider.Refund{ID: o.ID, IdempotencyKey: o.Key, ChargeID: o.ChargeID, Status: o.Status,
		DeclineCode: o.DeclineCode, AmountMinor: o.AmountMinor, Currency: o.Currency}
}

// lookup answers a lookup of key in book: the lookup faults, then what is
// visible (processed more than the lag ago).
func (p *simProvider) lookup(book map[string][]*object, key, what string) (*object, error) {
	w := p.w
	now := p.clock.Now()
	if w.faults {
		switch r := w.rng.Float64(); {
		case r < w.knobs.PLookupUnavailable:
			p.noteUncertain(key)
			w.tracef("provider: lookup %s cannot say (503)", what)
			return nil, fmt.Errorf("%w: simulated 503 on lookup", provider.ErrUnavailable)
		case r < w.knobs.PLookupUnavailable+w.knobs.PAmbiguous:
			p.ambiguous[key] = true
			w.tracef("provider: lookup %s ambiguous (simulated)", what)
			return nil, fmt.Errorf("%w: simulated", provider.ErrAmbiguous)
		}
	}
	var seen []*object
	for _, o := range book[key] {
		if !now.Before(o.ProcessedAt.Add(w.knobs.LookupLag)) {
			seen = append(seen, o)
		}
	}
	switch len(seen) {
	case 0:
		hidden := ""
		if n := len(book[key]); n > 0 {
			hidden = fmt.Sprintf(" (it holds %s, visible from %s: lag)", book[key][0].ID, w.at(book[key][0].ProcessedAt.Add(w.knobs.LookupLag)))
		}
		w.tracef("provider: lookup %s not found%s", what, hidden)
		return nil, fmt.Errorf("%w: %s", provider.ErrNotFound, key)
	case 1:
		if o := seen[0]; now.Before(o.MovedAt) {
			w.tracef("provider: lookup %s -> %s %s (%s from %s)", what, o.ID, chargeAt(o, now).Status, o.Status, w.at(o.MovedAt))
		} else {
			w.tracef("provider: lookup %s -> %s %s", what, o.ID, o.Status)
		}
		return seen[0], nil
	}
	p.ambiguous[key] = true
	w.tracef("provider: lookup %s ambiguous: %d objects", what, len(seen))
	return nil, fmt.Errorf("%w: %d objects for %s", provider.ErrAmbiguous, len(seen), key)
}

// noteLook remembers the last lookup of key: who asked, when, and what it
// was told (for the failure messages).
func (p *simProvider) noteLook(key string, o *object, err error) {
	said := "not found"
	switch {
	case o != nil:
		said = o.ID + " " + string(o.Status)
	case errors.Is(err, provider.ErrAmbiguous):
		said = "ambiguous"
	case !errors.Is(err, provider.ErrNotFound):
		said = "cannot say"
	}
	p.w.looked[key] = fmt.Sprintf("by %s at %s, told %s", p.w.actor, p.w.at(p.clock.Now()), said)
}

// Lookup returns the charge of key, and then runs what waits on a lookup
// of it (afterLookup): the answer is the charge as it stood when read.
func (p *simProvider) Lookup(_ context.Context, l provider.ChargeLookup) (provider.Charge, error) {
	key := l.IdempotencyKey
	p.mu.Lock()
	o, err := p.lookup(p.charges, key, "charge "+p.w.nameOfKey(key))
	p.noteLook(key, o, err)
	var ch provider.Charge
	if err == nil {
		ch = chargeAt(o, p.clock.Now())
	}
	after := p.afterLookup[key]
	delete(p.afterLookup, key)
	p.mu.Unlock()
	for _, h := range after {
		h.f()
	}
	return ch, err
}

// Refund creates a refund of a charge, or returns the key's. A refund the
// charge cannot cover (with the refunds it already has) is declined.
func (p *simProvider) Refund(_ context.Context, req provider.RefundRequest) (provider.Refund, error) {
	p.runMidFlight()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.drawFate(p.w.rng)
	now := p.clock.Now()
	if f != fateOK {
		p.noteUncertain(req.IdempotencyKey)
	}
	if f == fateRefused {
		p.w.tracef("provider: refund %s refused before processing", p.w.name(req.RefundID))
		return provider.Refund{}, answerErr(f, nil, now)
	}
	o := p.create(p.refunds, req.IdempotencyKey, f, func(o *object) {
		o.ID = fmt.Sprintf("re_%d", p.seq)
		o.OurID, o.ChargeID, o.AmountMinor, o.Currency = req.RefundID, req.ChargeID, req.AmountMinor, req.Currency
		o.Status = provider.StatusSucceeded
		ch := p.byID[req.ChargeID]
		switch {
		case ch == nil || ch.Refund || ch.Status != provider.StatusSucceeded:
			o.Status, o.DeclineCode = provider.StatusDeclined, "charge_not_refundable"
		case ch.AmountCapturedMinor-p.refundedLocked(ch.ID) < req.AmountMinor:
			o.Status, o.DeclineCode = provider.StatusDeclined, "amount_too_large"
		case ch.Method == methodRefundDeclined:
			o.Status, o.DeclineCode = provider.StatusDeclined, "refund_declined"
		}
	})
	err := answerErr(f, o, now)
	p.w.tracef("provider: refund %s -> %s %s (%s, request %d, processed %s)", p.w.name(req.RefundID), o.ID, o.Status, f, o.Requests, p.w.at(o.ProcessedAt))
	if err != nil {
		return provider.Refund{}, err
	}
	return refundOf(o), nil
}

// Capture captures an authorized charge, or returns the key's capture: the
// charge with the capture's verdict as its status. A capture of a charge
// the provider does not hold is a plain error, and records nothing.
func (p *simProvider) Capture(_ context.Context, req provider.CaptureRequest) (provider.Charge, error) {
	return p.act("capture", p.captures, req.IdempotencyKey, req.ChargeID, req.PaymentID, p.w.mrng, func(o, ch *object) {
		o.ID = fmt.Sprintf("cp_%d", p.seq)
		o.AmountMinor, o.Currency = req.AmountMinor, req.Currency
		o.Status = provider.StatusSucceeded
		switch {
		case ch.Status == provider.StatusCanceled:
			o.DeclineCode = "charge_canceled"
		case ch.Status == provider.StatusSucceeded:
			o.DeclineCode = "charge_already_captured"
		case ch.Status != provider.StatusAuthorized:
			o.DeclineCode = "charge_not_capturable"
		case req.Currency != ch.Currency:
			o.DeclineCode = "currency_mismatch"
		case req.AmountMinor > ch.AmountMinor:
			o.DeclineCode = "amount_too_large"
		case ch.Method == sim.MethodCaptureDeclined:
			o.DeclineCode = "capture_declined"
		default:
			ch.Status, ch.AmountCapturedMinor, ch.MovedAt = provider.StatusSucceeded, req.AmountMinor, o.ProcessedAt
		}
		if o.DeclineCode != "" {
			o.Status = provider.StatusDeclined
		}
	})
}

// Void voids an authorized charge, or one that waits for its customer, or
// returns the key's void: the charge with the void's verdict as its status.
// A charge voided already is canceled again. The cancellation of an
// abandoned authentication (its own key, abandonProviderKey; its reason,
// abandoned, is also the expiry void's) draws its faults from the 3-D
// Secure stream, and first runs the customer's choice that races it
// (beforeAbandon).
func (p *simProvider) Void(_ context.Context, req provider.VoidRequest) (provider.Charge, error) {
	rng := p.w.mrng
	if req.IdempotencyKey == abandonProviderKey(req.PaymentID) {
		rng = p.w.arng
		p.mu.Lock()
		before := p.beforeAbandon[req.PaymentID]
		delete(p.beforeAbandon, req.PaymentID)
		p.mu.Unlock()
		if before != nil {
			before()
		}
	}
	return p.act("void", p.voids, req.IdempotencyKey, req.ChargeID, req.PaymentID, rng, func(o, ch *object) {
		o.ID = fmt.Sprintf("vo_%d", p.seq)
		o.Status = provider.StatusCanceled
		switch ch.Status {
		case provider.StatusAuthorized, provider.StatusRequiresAction:
			ch.MovedFrom = ch.Status
			ch.Status, ch.MovedAt = provider.StatusCanceled, o.ProcessedAt
		case provider.StatusCanceled:
		case provider.StatusSucceeded:
			o.Status, o.DeclineCode = provider.StatusDeclined, "charge_already_captured"
		default:
			o.Status, o.DeclineCode = provider.StatusDeclined, "charge_not_cancelable"
		}
	})
}

// simKill is what a capture or void call panics with to kill its caller
// as kill -9 would: nothing after it runs (no answer written, no lease
// handed back). The capture path has no failpoints (payments.Hooks are the
// payments' only), so the simulation kills there; world.sendAction
// recovers it. Only a client's request is killed, never the reconciler's.
type simKill struct{ point string }

// killPoint draws whether the client's owner of a capture or void dies at
// the provider, at each of the two points where the payments' failpoints
// kill theirs, with the same probability (PCrash, while faults are on):
// "before" its request reaches it (the action is PROVIDER_REQUEST_SENT, the
// provider holds nothing: payments' AfterRequestSent), or "after" the
// provider processed it (AfterProviderAnswer); "" if it lives.
func (p *simProvider) killPoint() string {
	w := p.w
	switch {
	case !w.faults || w.actor != "client":
		return ""
	case w.mrng.Float64() < w.knobs.PCrash:
		return "before"
	case w.mrng.Float64() < w.knobs.PCrash:
		return "after"
	}
	return ""
}

// act runs a capture or void (kind) of charge chargeID with key in book:
// the fate of the request, then the key's object, or a new one that decide
// fills in (its id, verdict) and applies to the charge.
func (p *simProvider) act(kind string, book map[string][]*object, key, chargeID, ourID string, rng *rand.Rand, decide func(o, ch *object)) (provider.Charge, error) {
	p.runMidFlight()
	p.mu.Lock()
	defer p.mu.Unlock()
	kill := p.killPoint()
	if kill == "before" {
		p.w.tracef("crash: owner of %s's %s dies after request sent (the provider never gets it)", p.w.name(ourID), kind)
		panic(simKill{point: "after request sent"})
	}
	f := p.drawFate(rng)
	now := p.clock.Now()
	if kind == "capture" && p.w.pool != nil { // (TestProviderCaptures has no service)
		if exp := p.w.expiryOf(ourID); exp != nil && !now.Before(*exp) {
			p.w.note("capture-after-expiry", "capture of %s sent to the provider at %s, %s after its authorization expired (%s)",
				p.w.name(ourID), p.w.at(now), fmtDur(now.Sub(*exp)), f)
		}
	}
	if f != fateOK {
		p.noteUncertain(key)
	}
	if f == fateRefused {
		p.w.tracef("provider: %s %s refused before processing", kind, p.w.name(ourID))
		return provider.Charge{}, answerErr(f, nil, now)
	}
	ch := p.byID[chargeID]
	if ch == nil || ch.Refund {
		p.w.tracef("provider: %s %s of unknown charge %s", kind, p.w.name(ourID), chargeID)
		return provider.Charge{}, fmt.Errorf("simulated 404: no charge %s", chargeID)
	}
	o, made := p.keyed(book, key, f, func(o *object) {
		o.ChargeID, o.OurID = chargeID, ourID
		decide(o, ch)
		o.AmountCapturedMinor = ch.AmountCapturedMinor
	})
	if made {
		p.w.chargeMoved(o, rng)
	}
	err := answerErr(f, o, now)
	p.w.tracef("provider: %s %s of %s -> %s %s %s (%s, request %d, processed %s)", kind, p.w.name(ourID), ch.ID, o.ID, o.Status, o.DeclineCode,
		f, o.Requests, p.w.at(o.ProcessedAt))
	if kill == "after" {
		p.w.tracef("crash: owner of %s's %s dies after the provider processed it", p.w.name(ourID), kind)
		panic(simKill{point: "after provider answer"})
	}
	if err != nil {
		return provider.Charge{}, err
	}
	out := chargeOf(ch)
	out.Status, out.DeclineCode, out.AmountCapturedMinor = o.Status, o.DeclineCode, o.AmountCapturedMinor
	return out, nil
}

// LookupCapture returns the key's capture, as its answer was: the charge
// with the capture's verdict as its status (the lookups' lag and faults
// apply).
func (p *simProvider) LookupCapture(_ context.Context, l provider.ActionLookup) (provider.Charge, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, err := p.lookup(p.captures, l.IdempotencyKey, "capture "+p.w.nameOfKey(l.IdempotencyKey))
	p.noteLook(l.IdempotencyKey, o, err)
	if err != nil {
		return provider.Charge{}, err
	}
	ch := p.byID[o.ChargeID]
	if ch == nil {
		return provider.Charge{}, fmt.Errorf("simulated: capture %s of unknown charge %s", o.ID, o.ChargeID)
	}
	out := chargeOf(ch)
	out.Status, out.DeclineCode, out.AmountCapturedMinor = o.Status, o.DeclineCode, o.AmountCapturedMinor
	return out, nil
}

// GetCharge reads a charge by id as it stands (no lag), unless the read
// fails to say (the lookups' 503, while faults are on).
func (p *simProvider) GetCharge(_ context.Context, chargeID string) (provider.Charge, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.w
	now := p.clock.Now()
	if w.faults && w.mrng.Float64() < w.knobs.PLookupUnavailable {
		p.noteUncertain(chargeID) // an action's lookup: counted by its charge
		w.tracef("provider: get charge %s cannot say (503)", chargeID)
		return provider.Charge{}, fmt.Errorf("%w: simulated 503 on get", provider.ErrUnavailable)
	}
	ch := p.byID[chargeID]
	if ch == nil || ch.Refund || now.Before(ch.ProcessedAt) {
		w.tracef("provider: get charge %s not found", chargeID)
		return provider.Charge{}, fmt.Errorf("%w: %s", provider.ErrNotFound, chargeID)
	}
	out := chargeAt(ch, now)
	w.tracef("provider: get charge %s -> %s captured %d", chargeID, out.Status, out.AmountCapturedMinor)
	return out, nil
}

// refundedLocked sums the succeeded refunds of charge id.
func (p *simProvider) refundedLocked(chargeID string) int64 {
	var sum int64
	for _, objs := range p.refunds {
		for _, o := range objs {
			if o.ChargeID == chargeID && o.Status == provider.StatusSucceeded {
				sum += o.AmountMinor
			}
		}
	}
	return sum
}

// LookupRefund returns the refund of the key.
func (p *simProvider) LookupRefund(_ context.Context, l provider.RefundLookup) (provider.Refund, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, err := p.lookup(p.refunds, l.IdempotencyKey, "refund "+p.w.nameOfKey(l.IdempotencyKey))
	p.noteLook(l.IdempotencyKey, o, err)
	if err != nil {
		return provider.Refund{}, err
	}
	if o.ChargeID != l.ChargeID {
		return provider.Refund{}, fmt.Errorf("%w: refund %s belongs to charge %s, not %s", provider.ErrNotFound, o.ID, o.ChargeID, l.ChargeID)
	}
	return refundOf(o), nil
}

// books are the provider's books as a snapshot holds them: by key, each
// oldest first.
type books struct {
	charges, refunds, captures, voids map[string][]object
	ambiguous                         map[string]bool
}

// snapshot returns every object the provider holds (for the invariants).
func (p *simProvider) snapshot() books {
	p.mu.Lock()
	defer p.mu.Unlock()
	cp := func(book map[string][]*object) map[string][]object {
		out := map[string][]object{}
		for k, objs := range book {
			for _, o := range objs {
				out[k] = append(out[k], *o)
			}
		}
		return out
	}
	amb := map[string]bool{}
	for k := range p.ambiguous {
		amb[k] = true
	}
	return books{charges: cp(p.charges), refunds: cp(p.refunds), captures: cp(p.captures), voids: cp(p.voids), ambiguous: amb}
}

// TestProviderCaptures runs the Captures port's conformance cases against
// the simulation's provider, faults off, in a world of its own (no
// database, no service): its authorizations, captures and voids mean what
// every adapter's do.
func TestProviderCaptures(t *testing.T) {
	providertest.RunCaptures(t, func(t *testing.T) providertest.CapturesSubject {
		w := &world{t: t, rng: rand.New(rand.NewPCG(1, 2)), mrng: rand.New(rand.NewPCG(3, 4)), ctx: context.Background(), clock: clock.NewFake(epoch), start: epoch,
			knobs: Knobs{ProviderKeyTTL: keyWindow}, names: map[string]string{}, failed: map[string]bool{},
			looked: map[string]string{}, uncertain: map[string]int{}}
		p := newSimProvider(w)
		return providertest.CapturesSubject{
			Provider:              p,
			Method:                methodOK,
			CaptureDeclinedMethod: sim.MethodCaptureDeclined,
			Captures: func() int {
				p.mu.Lock()
				defer p.mu.Unlock()
				n := 0
				for _, objs := range p.captures {
					n += len(objs)
				}
				return n
			},
		}
	})
}
