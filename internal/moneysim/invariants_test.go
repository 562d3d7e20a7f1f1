package moneysim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/authorizations"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
)

// keyRow is an idempotency key with its resource's state.
type keyRow struct {
	resType, resID, state string
	status                *int32
	body                  []byte
	next, review          *time.Time
	attempts              int
	lastError             *string
}

func (w *world) loadKeys() []keyRow {
	rows, err := w.pool.Query(w.ctx, `
		SELECT k.resource_type, k.resource_id, COALESCE(p.state, r.state, a.state, '?'), k.response_status, k.response_body,
		       k.recovery_next_at, k.manual_review_at, k.recovery_attempts, k.recovery_last_error
		FROM idempotency_keys k
		LEFT JOIN payments p ON k.resource_type IN ('payment', 'payment_authentication') AND p.id = k.resource_id
		LEFT JOIN refunds r ON k.resource_type = 'refund' AND r.id = k.resource_id
		LEFT JOIN payment_actions a ON k.resource_type IN ('capture', 'cancellation') AND a.id = k.resource_id
		ORDER BY k.id`)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	var out []keyRow
	for rows.Next() {
		var k keyRow
		if err := rows.Scan(&k.resType, &k.resID, &k.state, &k.status, &k.body, &k.next, &k.review, &k.attempts, &k.lastError); err != nil {
			w.t.Fatal(err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		w.t.Fatal(err)
	}
	return out
}

func providerKey(resType, id string) string {
	switch resType {
	case refunds.ResourceType:
		return refunds.ProviderKey(id)
	case authorizations.ResourceCapture, authorizations.ResourceCancellation:
		return authorizations.ProviderKey(id)
	}
	return payments.ProviderKey(id)
}

// kind names a resource type the way the provider does.
func kind(resType string) string {
	switch resType {
	case refunds.ResourceType:
		return "refund"
	case authorizations.ResourceCapture:
		return "capture"
	case authorizations.ResourceCancellation:
		return "void"
	}
	return "charge"
}

func (w *world) book(resType string) map[string][]*object {
	switch resType {
	case refunds.ResourceType:
		return w.prov.refunds
	case authorizations.ResourceCapture:
		return w.prov.captures
	case authorizations.ResourceCancellation:
		return w.prov.voids
	}
	return w.prov.charges
}

// processedOK reports whether the provider's object o of a resource of
// resType is a success the resource must come to know: a charge that
// succeeded or was authorized, a refund or capture that succeeded, a void
// that canceled its charge.
func processedOK(resType string, o *object) bool {
	switch resType {
	case payments.ResourceType, payments.ResourceAuthentication:
		return o.Status == provider.StatusSucceeded || o.Status == provider.StatusAuthorized
	case authorizations.ResourceCancellation:
		return o.Status == provider.StatusCanceled
	}
	return o.Status == provider.StatusSucceeded
}

// checkTimeliness, after every step: a resource without a final answer
// whose request the provider processed with success (money moved, or an
// authorization, a capture, a void was made) is looked at again within
// lateBound, or left for a person. A resource that shows FAILED (or any
// unfinished state) while the provider holds its money for longer,
// unlooked-at, is the service losing track of money.
func (w *world) checkTimeliness() {
	now := w.clock.Now()
	for _, k := range w.loadKeys() {
		if k.status != nil || k.review != nil {
			continue
		}
		w.prov.mu.Lock()
		var held *object
		for _, o := range w.book(k.resType)[providerKey(k.resType, k.resID)] {
			if processedOK(k.resType, o) && !now.Before(o.ProcessedAt) {
				c := *o
				held = &c
				break
			}
		}
		looked := w.looked[providerKey(k.resType, k.resID)]
		w.prov.mu.Unlock()
		if held == nil || (k.next != nil && !k.next.After(now.Add(lateBound))) {
			continue
		}
		next := "never"
		if k.next != nil {
			next = fmt.Sprintf("at %s (%s from now)", w.at(*k.next), fmtDur(k.next.Sub(now)))
		}
		w.fail("late-recheck", w.name(k.resID), "%s %s is %s while the provider has held its %s %s %s (%s) since %s, visible to lookups since %s; its next look is %s; last lookup: %s",
			k.resType, w.name(k.resID), k.state, held.Status, kind(k.resType), held.ID, money.Format(held.AmountMinor, held.Currency),
			w.at(held.ProcessedAt), w.at(held.ProcessedAt.Add(w.knobs.LookupLag)), next, looked)
	}
	w.checkAuthorizations()
	w.checkAuthentications()
}

// checkAuthorizations, after every step of a run with manual payments: a
// payment AUTHORIZED is authorized at the provider too (a charge captured
// or voided behind the service's back is money or an authorization it
// lost track of); and once its authorizationExpiresAt has passed by
// lateBound, a void of it is due within lateBound (the one the service
// scheduled for itself, or a client's), or left for a person. An
// authorization nobody will ever void breaks it.
func (w *world) checkAuthorizations() {
	if w.knobs.PManual == 0 {
		return
	}
	now := w.clock.Now()
	rows, err := w.pool.Query(w.ctx, `
		SELECT p.id, p.authorization_expires_at, COALESCE(p.provider_reference, ''),
		       EXISTS (SELECT FROM payment_actions a
		               JOIN idempotency_keys k ON k.resource_type = 'cancellation' AND k.resource_id = a.id
		               WHERE a.payment_id = p.id AND k.response_status IS NULL
		                 AND (k.manual_review_at IS NOT NULL OR k.recovery_next_at <= $1))
		FROM payments p WHERE p.state = 'AUTHORIZED' ORDER BY p.created_at, p.id`, now.Add(lateBound))
	if err != nil {
		w.t.Fatal(err)
	}
	type authorized struct {
		id, charge string
		expires    *time.Time
		voidDue    bool
	}
	var list []authorized
	for rows.Next() {
		var a authorized
		if err := rows.Scan(&a.id, &a.expires, &a.charge, &a.voidDue); err != nil {
			w.t.Fatal(err)
		}
		list = append(list, a)
	}
	rows.Close()
	for _, a := range list {
		name := w.name(a.id)
		if a.expires == nil {
			w.fail("authorized-without-expiry", name, "payment %s is AUTHORIZED without an authorizationExpiresAt", name)
			continue
		}
		if now.Sub(*a.expires) > lateBound && !a.voidDue {
			w.fail("authorized-after-expiry", name, "payment %s is AUTHORIZED %s after its authorization expired (at %s), and no void of it is due; %s; %s",
				name, fmtDur(now.Sub(*a.expires)), w.at(*a.expires), w.history("payment", a.id), w.actionsOf(a.id))
		}
		w.prov.mu.Lock()
		ch := w.prov.byID[a.charge]
		var status provider.Status
		if ch != nil {
			status = ch.Status
		}
		w.prov.mu.Unlock()
		if status != provider.StatusAuthorized {
			w.fail("authorized-unlike-provider", name, "payment %s is AUTHORIZED, no action on it in flight, while the provider's charge %q is %q; %s; %s",
				name, a.charge, status, w.history("payment", a.id), w.actionsOf(a.id))
		}
	}
}

// payRow is a payment as checkFinal reads it.
type payRow struct {
	id, state, account, ref, providerRef, captureMethod string
	amount, refunded                                    int64
	capturedMinor                                       *int64
	expiresAt                                           *time.Time // set when it was authorized (manual capture)
}

// captured is what p took: its whole amount once COMPLETED, or what its
// capture took.
func (p payRow) captured() int64 {
	switch {
	case p.state != string(payments.StateCompleted):
		return 0
	case p.capturedMinor != nil:
		return *p.capturedMinor
	}
	return p.amount
}

// refundable is what p's refunds may return in all (payments.CapturedSQL).
func (p payRow) refundable() int64 {
	if p.capturedMinor != nil {
		return *p.capturedMinor
	}
	return p.amount
}

// actionRow is a capture or a void as checkFinal reads it.
type actionRow struct {
	id, paymentID, kind, state, providerRef, declineCode, reason string
	amount                                                       int64
	createdAt                                                    time.Time
	firstSentAt                                                  *time.Time
}

// checkFinal checks, once the faults stopped and nothing is due, what the
// database and the provider hold.
func (w *world) checkFinal() {
	bk := w.prov.snapshot()
	charges, refundBook, ambiguous := bk.charges, bk.refunds, bk.ambiguous
	keys := map[string]keyRow{}
	authKeys := map[string]keyRow{} // a payment's authentication key, by payment
	for _, k := range w.loadKeys() {
		if k.resType == payments.ResourceAuthentication {
			authKeys[k.resID] = k
			continue
		}
		keys[k.resID] = k
	}
	events := w.countEvents()
	authMoves := w.loadAuthMoves()

	var pays []payRow
	rows, err := w.pool.Query(w.ctx, `SELECT id, state, account_id, merchant_reference, COALESCE(provider_reference, ''),
		amount_minor, refunded_minor, capture_method, captured_minor, authorization_expires_at FROM payments ORDER BY created_at, id`)
	if err != nil {
		w.t.Fatal(err)
	}
	for rows.Next() {
		var p payRow
		if err := rows.Scan(&p.id, &p.state, &p.account, &p.ref, &p.providerRef, &p.amount, &p.refunded,
			&p.captureMethod, &p.capturedMinor, &p.expiresAt); err != nil {
			w.t.Fatal(err)
		}
		pays = append(pays, p)
	}
	rows.Close()
	type ref struct {
		id, paymentID, state, providerRef string
		amount                            int64
	}
	var refs []ref
	rows, err = w.pool.Query(w.ctx, `SELECT id, payment_id, state, COALESCE(provider_reference, ''), amount_minor
		FROM refunds ORDER BY created_at, id`)
	if err != nil {
		w.t.Fatal(err)
	}
	for rows.Next() {
		var r ref
		if err := rows.Scan(&r.id, &r.paymentID, &r.state, &r.providerRef, &r.amount); err != nil {
			w.t.Fatal(err)
		}
		refs = append(refs, r)
	}
	rows.Close()
	actions := w.loadActions("")
	actionsOf := map[string][]actionRow{}
	for _, a := range actions {
		actionsOf[a.paymentID] = append(actionsOf[a.paymentID], a)
	}
	ledger := w.ledgerEntries()

	invoices := map[string][]string{} // account/reference -> payments the provider charged
	refundedDB := map[string]int64{}
	// A refund the provider answered ambiguously is left for a person
	// (checkResource checks that it is, and only then): until that person
	// settles it, its payment's refunded amount may differ from the
	// provider's, and nobody claims otherwise.
	refundInReview := map[string]bool{}
	for _, r := range refs {
		name := w.name(r.id)
		if k := keys[r.id]; k.review != nil && k.status == nil {
			refundInReview[r.paymentID] = true
		}
		objs := refundBook[refunds.ProviderKey(r.id)]
		w.checkResource("refund", name, r.state, refunds.ProviderKey(r.id), objs, keys[r.id], ambiguous,
			string(refunds.StateSucceeded), string(refunds.StateDeclined), "")
		if r.state == string(refunds.StateSucceeded) {
			refundedDB[r.paymentID] += r.amount
			if len(objs) == 0 || objs[0].ID != r.providerRef || objs[0].AmountMinor != r.amount {
				w.fail("succeeded-unlike-provider", name, "refund %s SUCCEEDED (%s, %s) but the provider holds %v", name, r.providerRef, money.Format(r.amount, "EUR"), objs)
			}
		}
		w.checkEvents(name, r.id, events, refunds.EventSucceeded, r.state == string(refunds.StateSucceeded))
		w.checkEvents(name, r.id, events, refunds.EventDeclined, r.state == string(refunds.StateDeclined))
		want := wantAnswer{idField: "refundId", id: r.id}
		switch refunds.State(r.state) {
		case refunds.StateSucceeded:
			want.final, want.status, want.bodyStatus = true, http.StatusCreated, "SUCCEEDED"
		case refunds.StateDeclined:
			want.final, want.status, want.code = true, http.StatusPaymentRequired, "REFUND_DECLINED"
		}
		w.checkStored(name, r.id, keys[r.id], want)
	}
	payByID := map[string]payRow{}
	for _, p := range pays {
		payByID[p.id] = p
		name := w.name(p.id)
		key := payments.ProviderKey(p.id)
		objs := charges[key]
		w.checkResource("payment", name, p.state, key, objs, keys[p.id], ambiguous,
			string(payments.StateCompleted), string(payments.StateDeclined), string(payments.StateCanceled))
		for _, o := range objs {
			if o.Status == provider.StatusSucceeded {
				inv := p.account + "/" + p.ref
				invoices[inv] = append(invoices[inv], name+"("+p.state+")")
			}
		}
		if p.state == string(payments.StateCompleted) {
			if len(objs) == 0 || objs[0].ID != p.providerRef || objs[0].Status != provider.StatusSucceeded || objs[0].AmountMinor != p.amount ||
				objs[0].AmountCapturedMinor != p.captured() {
				w.fail("succeeded-unlike-provider", name, "payment %s COMPLETED (%s, captured %s) but the provider holds %v", name, p.providerRef,
					money.Format(p.captured(), "EUR"), objs)
			}
		}
		// Refunds within what the payment captured: in the database, and
		// at the provider.
		if refundedDB[p.id] > p.refundable() || p.refunded != refundedDB[p.id] {
			w.fail("refunds", name, "payment %s of %s (captured %s): refunded_minor %d, refunds succeeded %d", name, money.Format(p.amount, "EUR"),
				money.Format(p.refundable(), "EUR"), p.refunded, refundedDB[p.id])
		}
		var atProvider int64
		for _, objs := range refundBook {
			for _, o := range objs {
				if o.Status == provider.StatusSucceeded && o.ChargeID != "" && chargeOfPayment(charges, key, o.ChargeID) {
					atProvider += o.AmountMinor
				}
			}
		}
		if atProvider > p.refundable() {
			w.fail("refunds", name, "payment %s of %s (captured %s): the provider refunded %s", name, money.Format(p.amount, "EUR"),
				money.Format(p.refundable(), "EUR"), money.Format(atProvider, "EUR"))
		}
		if atProvider != refundedDB[p.id] && !refundInReview[p.id] {
			w.fail("refunded-unlike-provider", name, "payment %s: the provider refunded %s, the payment shows %s refunded",
				name, money.Format(atProvider, "EUR"), money.Format(refundedDB[p.id], "EUR"))
		}
		completed := p.state == string(payments.StateCompleted)
		w.checkEvents(name, p.id, events, payments.EventSucceeded, completed)
		w.checkEvents(name, p.id, events, payments.EventDeclined, p.state == string(payments.StateDeclined))
		w.checkEvents(name, p.id, events, payments.EventCanceled, p.state == string(payments.StateCanceled))
		w.checkEvents(name, p.id, events, payments.EventAuthorized, p.expiresAt != nil)
		m, waited := authMoves[p.id]
		if waited {
			ak, ok := authKeys[p.id]
			w.checkAuthenticationEnd(p, m, ak, ok, bk, events)
		} else {
			w.checkEvents(name, p.id, events, payments.EventRequiresAction, false)
		}
		// The ledger books what was captured, as its own code reads the
		// event.
		for _, e := range ledger[p.id] {
			if e.err != nil || e.entry.AmountMinor != p.captured() || e.entry.ProviderReference != p.providerRef {
				w.fail("ledger-events", name, "payment %s (%s, captured %s): its PaymentSucceeded books %s of %q (%v): %s", name, p.state,
					money.Format(p.captured(), "EUR"), money.Format(e.entry.AmountMinor, "EUR"), e.entry.ProviderReference, e.err, e.payload)
			}
		}
		want := wantAnswer{idField: "paymentId", id: p.id}
		switch payments.State(p.state) {
		case payments.StateCompleted:
			want.final, want.status, want.bodyStatus = true, http.StatusCreated, "SUCCEEDED"
		case payments.StateDeclined:
			want.final, want.status, want.code = true, http.StatusPaymentRequired, "PAYMENT_DECLINED"
		case payments.StateCanceled:
			want.final, want.status, want.code = true, http.StatusConflict, "PAYMENT_CANCELED"
		}
		switch {
		case waited:
			// Its key answered when the provider asked for the customer,
			// whatever came next.
			want = wantAnswer{final: true, status: http.StatusCreated, idField: "paymentId", id: p.id, bodyStatus: string(payments.StatusRequiresAction)}
		case p.expiresAt != nil:
			// Its key answered when it was authorized, whatever came next.
			want = wantAnswer{final: true, status: http.StatusCreated, idField: "paymentId", id: p.id, bodyStatus: string(payments.StatusRequiresCapture)}
		}
		w.checkStored(name, p.id, keys[p.id], want)
		if p.captureMethod == payments.CaptureManual {
			w.checkAuthorization(p, objs, actionsOf[p.id], bk, keys)
		}
	}
	for _, a := range actions {
		// The service's expiry void is left for a person with an action
		// that holds the authorization and was left for a person itself.
		holderInReview := false
		for _, o := range actionsOf[a.paymentID] {
			if k := keys[o.id]; o.id != a.id && k.review != nil && k.status == nil {
				holderInReview = true
			}
		}
		w.checkAction(a, payByID[a.paymentID], bk, keys, holderInReview)
	}
	for inv, charged := range invoices {
		if len(charged) > 1 {
			w.fail("invoice-charged-twice", inv, "invoice %s charged %d times at the provider: %v", inv, len(charged), charged)
		}
	}
}

func chargeOfPayment(charges map[string][]object, key, chargeID string) bool {
	for _, o := range charges[key] {
		if o.ID == chargeID {
			return true
		}
	}
	return false
}

// checkResource: at most one provider object per derived key; never an
// end that says no money moved while the provider holds a success; final
// after healing, or left for a person only where the provider was
// ambiguous.
func (w *world) checkResource(what, name, state, key string, objs []object, k keyRow, ambiguous map[string]bool, succeeded, declined, canceled string) {
	id := strings.TrimPrefix(key, "paymentsapi:")
	if len(objs) > 1 {
		ids := []string{}
		for _, o := range objs {
			ids = append(ids, fmt.Sprintf("%s %s at %s", o.ID, o.Status, w.at(o.ReceivedAt)))
		}
		w.fail("one-object-per-key", name, "%s %s: the provider holds %d objects for its key: %v", what, name, len(objs), ids)
	}
	// The ends that say no money moved: a decline, a refusal, a
	// cancellation (and a request never sent).
	saysNothingMoved := state == declined || state == canceled || state == string(payments.StateFailedRetryable) || state == string(payments.StateReceived)
	for _, o := range objs {
		switch {
		case o.Status == provider.StatusSucceeded && saysNothingMoved:
			w.fail("money-moved-but-"+state, name, "%s %s is %s while the provider holds its succeeded %s %s (%s, processed at %s, visible to lookups from %s); %s",
				what, name, state, kind(what), o.ID, money.Format(o.AmountMinor, o.Currency), w.at(o.ProcessedAt), w.at(o.ProcessedAt.Add(w.knobs.LookupLag)), w.history(what, id))
		case canceled != "" && state == canceled && o.Status == provider.StatusCanceled:
			// A voided authorization (manual capture): the provider says
			// so too (checkAuthorization).
		case canceled != "" && state == canceled:
			// A cancellation says the provider never saw the request.
			w.fail("processed-but-CANCELED", name, "%s %s is CANCELED while the provider holds its %s %s %s (processed at %s, visible to lookups from %s); %s",
				what, name, o.Status, kind(what), o.ID, w.at(o.ProcessedAt), w.at(o.ProcessedAt.Add(w.knobs.LookupLag)), w.history(what, id))
		}
	}
	switch payments.State(state) {
	case payments.StateAuthorized, payments.StateCaptureRequested, payments.StateVoidRequested:
		if what == "payment" {
			return // its key answered at the authorization: checkAuthorization
		}
	case payments.StateRequiresAction:
		if what == "payment" {
			return // its key answered when its customer was asked: checkAuthenticationEnd
		}
	}
	final := state == succeeded || state == declined || (canceled != "" && state == canceled)
	gaveUp := (state == string(payments.StateUnknown) || state == string(payments.StateProviderRequestSent)) && w.uncertain[key] > 0
	held := []string{}
	for _, o := range objs {
		held = append(held, o.ID+" "+string(o.Status))
	}
	// Refused, nothing moved, its client gave up: refunds have no
	// abandonment, so it stays as it is. Not money lost.
	unabandoned := what == "refund" && state == string(refunds.StateFailedRetryable) && len(objs) == 0
	w.checkEnd(what, name, state, id, final || unabandoned, k, ambiguous[key], gaveUp, held)
}

// checkEnd: a resource is final after healing, or left for a person where
// the provider was ambiguous (ambiguous) or, by design, could not say what
// became of a request that may have moved money on every one of the
// reconciler's attempts (gaveUp). Never a resource the service itself
// believes moved nothing: that one must be abandoned.
func (w *world) checkEnd(what, name, state, id string, final bool, k keyRow, ambiguous, gaveUp bool, held []string) {
	review := k.review != nil && k.status == nil
	lastErr := ""
	if k.lastError != nil {
		lastErr = *k.lastError
	}
	switch {
	case review && !ambiguous && !gaveUp:
		w.fail("review-without-ambiguity", name, "%s %s (%s) left for manual review after %d reconciler attempts (%q), though the provider never answered a lookup of it ambiguously; nobody will end it; %s",
			what, name, state, k.attempts, lastErr, w.history(what, id))
	case final, review:
	default:
		w.fail("not-final", name, "%s %s is still %s after healing (the provider holds %v; key's next look %v, %d attempts); %s",
			what, name, state, held, k.next, k.attempts, w.history(what, id))
	}
}

// checkAuthorization: what a manual payment's state says agrees with its
// charge at the provider and with its actions, once faults stopped; the
// charge is never both captured and voided, captured at most once, and
// never for more than it authorized.
func (w *world) checkAuthorization(p payRow, objs []object, acts []actionRow, bk books, keys map[string]keyRow) {
	name := w.name(p.id)
	var ch *object
	if len(objs) > 0 {
		ch = &objs[0]
	}
	if ch != nil {
		var captured, voided []string
		for _, book := range []map[string][]object{bk.captures, bk.voids} {
			for _, list := range book {
				for _, o := range list {
					switch {
					case o.ChargeID != ch.ID:
					case strings.HasPrefix(o.ID, "cp_") && o.Status == provider.StatusSucceeded:
						captured = append(captured, fmt.Sprintf("%s %s of %s", o.ID, money.Format(o.AmountMinor, o.Currency), w.nameOfKey(o.Key)))
						if o.AmountMinor > ch.AmountMinor {
							w.fail("captured-over-authorized", name, "payment %s: capture %s took %s of a charge authorized for %s", name, o.ID,
								money.Format(o.AmountMinor, o.Currency), money.Format(ch.AmountMinor, ch.Currency))
						}
					case strings.HasPrefix(o.ID, "vo_") && o.Status == provider.StatusCanceled:
						voided = append(voided, o.ID+" of "+w.nameOfKey(o.Key))
					}
				}
			}
		}
		if len(captured) > 1 {
			w.fail("one-capture-per-charge", name, "payment %s: the provider captured its charge %s %d times: %v", name, ch.ID, len(captured), captured)
		}
		if len(captured) > 0 && len(voided) > 0 {
			w.fail("captured-and-voided", name, "payment %s: the provider both captured (%v) and voided (%v) its charge %s", name, captured, voided, ch.ID)
		}
		if ch.AmountCapturedMinor > ch.AmountMinor {
			w.fail("captured-over-authorized", name, "payment %s: charge %s captured %s of %s", name, ch.ID,
				money.Format(ch.AmountCapturedMinor, ch.Currency), money.Format(ch.AmountMinor, ch.Currency))
		}
	}
	var capturedBy, voidedBy []actionRow
	for _, a := range acts {
		if a.state == string(authorizations.StateSucceeded) {
			if a.kind == string(payments.ActionCapture) {
				capturedBy = append(capturedBy, a)
			} else {
				voidedBy = append(voidedBy, a)
			}
		}
	}
	if len(capturedBy) > 1 || (len(capturedBy) > 0 && len(voidedBy) > 0) {
		w.fail("one-action-wins", name, "payment %s: %d captures and %d voids of it SUCCEEDED; %s", name, len(capturedBy), len(voidedBy), w.actionsOf(p.id))
	}
	chStatus := provider.Status("none")
	if ch != nil {
		chStatus = ch.Status
	}
	switch payments.State(p.state) {
	case payments.StateCompleted:
		// The charge: checkFinal's succeeded-unlike-provider.
		if len(capturedBy) != 1 || p.capturedMinor == nil || capturedBy[0].amount != *p.capturedMinor {
			w.fail("captured-unlike-action", name, "payment %s COMPLETED with captured_minor %v, but its succeeded captures are %v; %s",
				name, p.capturedMinor, capturedBy, w.actionsOf(p.id))
		}
	case payments.StateCanceled:
		// Never authorized: checkResource's processed-but-CANCELED.
		if p.expiresAt != nil && chStatus != provider.StatusCanceled {
			w.fail("canceled-unlike-provider", name, "payment %s is CANCELED while the provider's charge is %s; %s; %s", name, chStatus,
				w.history("payment", p.id), w.actionsOf(p.id))
		}
		if len(capturedBy) > 0 {
			w.fail("canceled-unlike-action", name, "payment %s is CANCELED but its capture %s SUCCEEDED", name, w.name(capturedBy[0].id))
		}
	case payments.StateDeclined:
		if chStatus != provider.StatusDeclined && chStatus != "none" {
			w.fail("declined-unlike-provider", name, "payment %s is DECLINED while the provider's charge %s is %s; %s", name, ch.ID, chStatus,
				w.history("payment", p.id))
		}
	case payments.StateAuthorized:
		if p.expiresAt == nil || !w.clock.Now().Before(*p.expiresAt) {
			w.fail("authorized-after-expiry", name, "payment %s is still AUTHORIZED after healing, its authorization expired at %v (the provider's charge is %s); %s; %s",
				name, p.expiresAt, chStatus, w.history("payment", p.id), w.actionsOf(p.id))
		}
	case payments.StateCaptureRequested, payments.StateVoidRequested:
		// An action holds it: final once that action is, or left for a
		// person with it.
		inReview := false
		for _, a := range acts {
			if k := keys[a.id]; k.review != nil && k.status == nil {
				inReview = true
			}
		}
		if !inReview {
			w.fail("not-final", name, "payment %s is still %s after healing (the provider's charge is %s); %s; %s", name, p.state, chStatus,
				w.history("payment", p.id), w.actionsOf(p.id))
		}
	}
}

// checkAction: a capture or a void has at most one provider object for
// its key, never an end that says nothing happened while the provider
// holds its success, SUCCEEDED only as the charge says, a capture claimed
// only before the expiry, and a stored answer that says its end; final
// after healing (manual review only where the provider was ambiguous).
func (w *world) checkAction(a actionRow, p payRow, bk books, keys map[string]keyRow, holderInReview bool) {
	name := w.name(a.id)
	key := authorizations.ProviderKey(a.id)
	capture := a.kind == string(payments.ActionCapture)
	resType, objs, done := authorizations.ResourceCancellation, bk.voids[key], provider.StatusCanceled
	if capture {
		resType, objs, done = authorizations.ResourceCapture, bk.captures[key], provider.StatusSucceeded
	}
	if len(objs) > 1 {
		list := []string{}
		for _, o := range objs {
			list = append(list, fmt.Sprintf("%s %s %s first requested at %s (%d requests)", o.ID, o.Status, o.DeclineCode, w.at(o.ReceivedAt), o.Requests))
		}
		w.fail("one-object-per-key", name, "%s %s: the provider holds %d objects for its key: %v; %s", kind(resType), name, len(objs), list,
			w.history(resType, a.id))
	}
	var ch *object
	if list := bk.charges[payments.ProviderKey(a.paymentID)]; len(list) > 0 {
		ch = &list[0]
	}
	st := authorizations.State(a.state)
	for _, o := range objs {
		if o.Status == done && (st == authorizations.StateDeclined || st == authorizations.StateCanceled ||
			st == authorizations.StateFailedRetryable || st == authorizations.StateReceived) {
			w.fail("provider-did-but-"+a.state, name, "%s %s is %s while the provider holds its %s %s %s (processed at %s); %s", kind(resType), name, a.state,
				kind(resType), o.ID, o.Status, w.at(o.ProcessedAt), w.history(resType, a.id))
		}
	}
	if st == authorizations.StateSucceeded {
		switch {
		case ch == nil && (capture || p.expiresAt != nil):
			// (A cancel of a payment that moved no money ends without a
			// call: its payment's CANCELED is checked against the
			// provider, processed-but-CANCELED.)
			w.fail("succeeded-unlike-provider", name, "%s %s SUCCEEDED but the provider holds no charge of %s", kind(resType), name, w.name(a.paymentID))
		case ch == nil:
		case capture && (ch.Status != provider.StatusSucceeded || ch.AmountCapturedMinor != a.amount || len(objs) != 1 || objs[0].Status != done):
			w.fail("succeeded-unlike-provider", name, "capture %s of %s SUCCEEDED but the provider's charge %s is %s with %s captured, and holds %v for its key",
				name, money.Format(a.amount, "EUR"), ch.ID, ch.Status, money.Format(ch.AmountCapturedMinor, ch.Currency), objs)
		case !capture && p.expiresAt != nil && ch.Status != provider.StatusCanceled:
			w.fail("succeeded-unlike-provider", name, "void %s SUCCEEDED but the provider's charge %s is %s", name, ch.ID, ch.Status)
		}
	}
	if capture && p.expiresAt != nil && !a.createdAt.Before(*p.expiresAt) {
		w.fail("capture-after-expiry", name, "capture %s of %s was claimed at %s, at or after its authorization's expiry %s", name, w.name(a.paymentID),
			w.at(a.createdAt), w.at(*p.expiresAt))
	}
	k := keys[a.id]
	var chargeUncertain bool
	if ch != nil {
		chargeUncertain = w.uncertain[ch.ID] > 0
	}
	gaveUp := (st == authorizations.StateUnknown || st == authorizations.StateProviderRequestSent) && (w.uncertain[key] > 0 || chargeUncertain)
	if a.reason == authorizations.ReasonExpired && st == authorizations.StateReceived && holderInReview {
		gaveUp = true
	}
	held := []string{}
	for _, o := range objs {
		held = append(held, o.ID+" "+string(o.Status))
	}
	w.checkEnd(kind(resType), name, a.state, a.id, st.Final(), k, bk.ambiguous[key], gaveUp, held)

	want := wantAnswer{idField: "paymentId", id: a.paymentID}
	switch {
	case st == authorizations.StateSucceeded && capture:
		want.final, want.status, want.bodyStatus = true, http.StatusOK, string(payments.StatusSucceeded)
		want.captured = money.Format(a.amount, "EUR")
	case st == authorizations.StateSucceeded:
		want.final, want.status, want.bodyStatus = true, http.StatusOK, string(payments.StatusCanceled)
	case st == authorizations.StateDeclined && capture:
		want.final, want.status, want.code = true, http.StatusPaymentRequired, string(authorizations.CodeCaptureDeclined)
	case st == authorizations.StateDeclined, st == authorizations.StateCanceled && !capture:
		want.final, want.status, want.code = true, http.StatusConflict, string(authorizations.CodeNotCancelable)
	case st == authorizations.StateCanceled:
		want.final, want.status, want.code = true, http.StatusConflict, string(authorizations.CodeNotCapturable)
	}
	w.checkStored(name, a.id, k, want)
}

// loadActions reads the captures and voids (of payment paymentID, or all),
// oldest first.
func (w *world) loadActions(paymentID string) []actionRow {
	rows, err := w.pool.Query(w.ctx, `SELECT id, payment_id, kind, state, COALESCE(provider_reference, ''), COALESCE(decline_code, ''),
		reason, amount_minor, created_at, first_sent_at FROM payment_actions WHERE $1 = '' OR payment_id = $1 ORDER BY created_at, id`, paymentID)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	var out []actionRow
	for rows.Next() {
		var a actionRow
		if err := rows.Scan(&a.id, &a.paymentID, &a.kind, &a.state, &a.providerRef, &a.declineCode, &a.reason, &a.amount, &a.createdAt, &a.firstSentAt); err != nil {
			w.t.Fatal(err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		w.t.Fatal(err)
	}
	return out
}

// actionsOf describes the actions on a payment, for failure messages.
func (w *world) actionsOf(paymentID string) string {
	var out []string
	for _, a := range w.loadActions(paymentID) {
		s := fmt.Sprintf("%s %s %s", w.name(a.id), a.kind, a.state)
		if a.kind == string(payments.ActionCapture) {
			s += " " + money.Format(a.amount, "EUR")
		}
		if a.declineCode != "" {
			s += " (" + a.declineCode + ")"
		}
		out = append(out, s+" claimed at "+w.at(a.createdAt))
	}
	if len(out) == 0 {
		return "no actions"
	}
	return "actions: " + strings.Join(out, "; ")
}

// history is the last moves of a resource, for failure messages.
func (w *world) history(what, id string) string {
	table, fk := "payment_transitions", "payment_id"
	switch what {
	case "refund":
		table, fk = "refund_transitions", "refund_id"
	case "capture", "void", authorizations.ResourceCancellation:
		table, fk = "payment_action_transitions", "payment_action_id"
	}
	rows, err := w.pool.Query(w.ctx, `SELECT to_state, reason, occurred_at FROM `+table+` WHERE `+fk+` = $1 ORDER BY id DESC LIMIT 5`, id)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	var moves []string
	for rows.Next() {
		var to, reason string
		var at time.Time
		if err := rows.Scan(&to, &reason, &at); err != nil {
			w.t.Fatal(err)
		}
		if len(reason) > 60 {
			reason = reason[:60] + "..."
		}
		moves = append([]string{fmt.Sprintf("%s at %s (%s)", to, w.at(at), reason)}, moves...)
	}
	return "last moves: " + strings.Join(moves, " -> ")
}

// checkEvents: one event of type typ for the resource if want, else none.
func (w *world) checkEvents(name, id string, events map[string]int, typ string, want bool) {
	n := events[id+"/"+typ]
	if (want && n != 1) || (!want && n != 0) {
		w.fail("ledger-events", name, "%s has %d %s events, want %d", name, n, typ, map[bool]int{true: 1, false: 0}[want])
	}
}

func (w *world) countEvents() map[string]int {
	rows, err := w.pool.Query(w.ctx, `SELECT aggregate_id, event_type, count(*) FROM outbox_events GROUP BY 1, 2`)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id, typ string
		var n int
		if err := rows.Scan(&id, &typ, &n); err != nil {
			w.t.Fatal(err)
		}
		out[id+"/"+typ] = n
	}
	return out
}

// booked is what the ledger books for one PaymentSucceeded event.
type booked struct {
	entry   operation.LedgerEntry
	err     error
	payload string
}

// ledgerEntries reads every PaymentSucceeded event through the ledger's
// own reading of it (the payments module's operation.Event.Ledger), by
// payment.
func (w *world) ledgerEntries() map[string][]booked {
	var read func(outbox.Event) (operation.LedgerEntry, error)
	for _, m := range w.core.Modules {
		for _, e := range m.Events {
			if e.Type == payments.EventSucceeded && e.Ledger != nil {
				read = e.Ledger
			}
		}
	}
	if read == nil {
		w.t.Fatal("no module books PaymentSucceeded")
	}
	rows, err := w.pool.Query(w.ctx, `SELECT id::text, aggregate_type, aggregate_id, event_type, created_at, payload
		FROM outbox_events WHERE event_type = $1 ORDER BY created_at, id`, payments.EventSucceeded)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]booked{}
	for rows.Next() {
		var e outbox.Event
		if err := rows.Scan(&e.ID, &e.AggregateType, &e.AggregateID, &e.Type, &e.OccurredAt, &e.Payload); err != nil {
			w.t.Fatal(err)
		}
		entry, err := read(e)
		out[e.AggregateID] = append(out[e.AggregateID], booked{entry: entry, err: err, payload: string(e.Payload)})
	}
	return out
}

// wantAnswer is what a key must store for its resource's state.
type wantAnswer struct {
	final      bool
	status     int
	idField    string // the field of the body that names the resource: paymentId, refundId
	id         string // what it must name
	bodyStatus string // a success's resource status (SUCCEEDED, REQUIRES_CAPTURE, CANCELED)
	code       string // a problem's code
	captured   string // a capture's capturedAmount
}

// checkStored: a key has a stored answer exactly when its resource is
// final, and the answer says what the resource is; what a client was told
// as final is what the resource stayed.
func (w *world) checkStored(name, id string, k keyRow, want wantAnswer) {
	switch {
	case k.resID == "":
		w.fail("stored-answer", name, "%s has no idempotency key", name)
		return
	case want.final && k.status == nil:
		w.fail("stored-answer", name, "%s is %s but its key has no stored answer", name, k.state)
	case !want.final && k.status != nil:
		w.fail("stored-answer", name, "%s is %s but its key stored %d %s", name, k.state, *k.status, k.body)
	case want.final && int(*k.status) != want.status:
		w.fail("stored-answer", name, "%s is %s but its key stored %d %s, want %d", name, k.state, *k.status, k.body, want.status)
	}
	if want.final && k.status != nil && k.body != nil {
		var body struct {
			PaymentID string `json:"paymentId"`
			RefundID  string `json:"refundId"`
			// A resource's status (a string), or a problem's HTTP status.
			Status         json.RawMessage `json:"status"`
			Code           string          `json:"code"`
			CapturedAmount string          `json:"capturedAmount"`
		}
		if err := json.Unmarshal(k.body, &body); err != nil {
			w.fail("stored-answer", name, "%s: stored body is not JSON: %v: %s", name, err, k.body)
		}
		var status string
		_ = json.Unmarshal(body.Status, &status)
		gotID := body.PaymentID
		if want.idField == "refundId" {
			gotID = body.RefundID
		}
		switch {
		case gotID != want.id:
			w.fail("stored-answer", name, "%s: stored answer is about %q: %s", name, gotID, k.body)
		case *k.status < 300 && status != want.bodyStatus:
			w.fail("stored-answer", name, "%s: stored %d says %q, want %q", name, *k.status, status, want.bodyStatus)
		case *k.status >= 300 && body.Code != want.code:
			w.fail("stored-answer", name, "%s (%s): stored %d with code %q, want %q", name, k.state, *k.status, body.Code, want.code)
		case want.captured != "" && body.CapturedAmount != want.captured:
			w.fail("stored-answer", name, "%s: stored %d says captured %q, want %q", name, *k.status, body.CapturedAmount, want.captured)
		}
	}
	if s, ok := w.saw[id]; ok {
		if s.status != want.status || !want.final {
			w.fail("client-told-otherwise", name, "client %s was told %d %s, but %s ended %s", s.who, s.status, s.body, name, k.state)
		} else if k.body != nil && !bytes.Equal(k.body, s.body) {
			w.fail("client-told-otherwise", name, "client %s was told %s, the key stores %s", s.who, s.body, k.body)
		}
	}
}
