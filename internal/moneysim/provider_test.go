package moneysim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// simProvider is the simulation's payment provider: an in-memory book of
// charges and refunds on the fake clock, with the faults the seed chose.
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
// Faults are drawn from the world's one random source, in the order of the
// calls, which the sequential simulation makes the same on every replay.
// It is safe for concurrent use, but the simulation calls it from one
// goroutine at a time.
type simProvider struct {
	mu    sync.Mutex
	clock *clock.Fake
	w     *world // its random source, knobs and trace; faults on or off

	charges map[string][]*object // by idempotency key, oldest first
	refunds map[string][]*object
	byID    map[string]*object
	// ambiguous: the keys a lookup answered ErrAmbiguous for (manual
	// review is expected only for these).
	ambiguous map[string]bool
	seq       int

	// midFlight, when set, runs once inside the next Charge or Refund
	// call, with no lock held: the world sends a duplicate of the request
	// while its original is in flight.
	midFlight func()
}

// object is a charge or a refund as the provider holds it.
type object struct {
	ID, Key     string
	Refund      bool
	ChargeID    string // a refund's charge
	OurID       string // the payment or refund id in the request's metadata
	Method      string // a charge's payment method
	Status      provider.Status
	DeclineCode string
	AmountMinor int64
	Currency    string
	ReceivedAt  time.Time // the first request with the key: its key window starts here
	ProcessedAt time.Time // after ReceivedAt when the answer came after the timeout
	Requests    int       // requests with its key that reached it
}

var _ provider.Provider = (*simProvider)(nil)

func newSimProvider(w *world) *simProvider {
	return &simProvider{clock: w.clock, w: w, charges: map[string][]*object{}, refunds: map[string][]*object{},
		byID: map[string]*object{}, ambiguous: map[string]bool{}}
}

// LookupLag is how long after a create a lookup may miss it: the
// provider's configured lag. (The provider interface is expected to gain
// this method; the services can then be told the lag.)
func (p *simProvider) LookupLag() time.Duration { return p.w.knobs.LookupLag }

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

// drawFate draws the fate of a create request (none while faults are off).
func (p *simProvider) drawFate() fate {
	w := p.w
	if !w.faults {
		return fateOK
	}
	k := w.knobs
	switch r := w.rng.Float64(); {
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
// from its first request) or makes one with mk.
func (p *simProvider) create(book map[string][]*object, key string, f fate, mk func(o *object)) *object {
	now := p.clock.Now()
	objs := book[key]
	if n := len(objs); n > 0 && now.Sub(objs[n-1].ReceivedAt) < p.w.knobs.ProviderKeyTTL {
		o := objs[n-1]
		o.Requests++
		return o
	}
	p.seq++
	o := &object{Key: key, ReceivedAt: now, ProcessedAt: now, Requests: 1}
	if f == fateLate {
		o.ProcessedAt = now.Add(p.w.knobs.LateBy)
	}
	mk(o)
	book[key] = append(book[key], o)
	p.byID[o.ID] = o
	p.w.objectCreated(o)
	return o
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
	f := p.drawFate()
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
		o.Status = provider.StatusSucceeded
		if req.PaymentMethod == methodDeclined {
			o.Status, o.DeclineCode = provider.StatusDeclined, "card_declined"
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
	return provider.Charge{ID: o.ID, IdempotencyKey: o.Key, Status: o.Status, DeclineCode: o.DeclineCode,
		AmountMinor: o.AmountMinor, Currency: o.Currency}
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
		w.tracef("provider: lookup %s -> %s %s", what, seen[0].ID, seen[0].Status)
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

// Lookup returns the charge of key.
func (p *simProvider) Lookup(_ context.Context, l provider.ChargeLookup) (provider.Charge, error) {
	key := l.IdempotencyKey
	p.mu.Lock()
	defer p.mu.Unlock()
	o, err := p.lookup(p.charges, key, "charge "+p.w.nameOfKey(key))
	p.noteLook(key, o, err)
	if err != nil {
		return provider.Charge{}, err
	}
	return chargeOf(o), nil
}

// Refund creates a refund of a charge, or returns the key's. A refund the
// charge cannot cover (with the refunds it already has) is declined.
func (p *simProvider) Refund(_ context.Context, req provider.RefundRequest) (provider.Refund, error) {
	p.runMidFlight()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.drawFate()
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
		case ch.AmountMinor-p.refundedLocked(ch.ID) < req.AmountMinor:
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

// snapshot returns every object the provider holds (for the invariants),
// charges then refunds, each oldest first.
func (p *simProvider) snapshot() (charges, refunds map[string][]object, ambiguous map[string]bool) {
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
	return cp(p.charges), cp(p.refunds), amb
}
