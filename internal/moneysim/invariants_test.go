package moneysim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/money"
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
		SELECT k.resource_type, k.resource_id, COALESCE(p.state, r.state, '?'), k.response_status, k.response_body,
		       k.recovery_next_at, k.manual_review_at, k.recovery_attempts, k.recovery_last_error
		FROM idempotency_keys k
		LEFT JOIN payments p ON k.resource_type = 'payment' AND p.id = k.resource_id
		LEFT JOIN refunds r ON k.resource_type = 'refund' AND r.id = k.resource_id
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
	if resType == refunds.ResourceType {
		return refunds.ProviderKey(id)
	}
	return payments.ProviderKey(id)
}

// kind names a resource type the way the provider does.
func kind(resType string) string {
	if resType == refunds.ResourceType {
		return "refund"
	}
	return "charge"
}

func (w *world) book(resType string) map[string][]*object {
	if resType == refunds.ResourceType {
		return w.prov.refunds
	}
	return w.prov.charges
}

// checkTimeliness, after every step: a resource without a final answer
// whose request the provider processed with success (money moved) is
// looked at again within lateBound, or left for a person. A resource that
// shows FAILED (or any unfinished state) while the provider holds its money
// for longer, unlooked-at, is the service losing track of money.
func (w *world) checkTimeliness() {
	now := w.clock.Now()
	for _, k := range w.loadKeys() {
		if k.status != nil || k.review != nil {
			continue
		}
		w.prov.mu.Lock()
		var held *object
		for _, o := range w.book(k.resType)[providerKey(k.resType, k.resID)] {
			if o.Status == provider.StatusSucceeded && !now.Before(o.ProcessedAt) {
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
		w.fail("late-recheck", w.name(k.resID), "%s %s is %s while the provider has held its succeeded %s %s (%s) since %s, visible to lookups since %s; its next look is %s; last lookup: %s",
			k.resType, w.name(k.resID), k.state, kind(k.resType), held.ID, money.Format(held.AmountMinor, held.Currency),
			w.at(held.ProcessedAt), w.at(held.ProcessedAt.Add(w.knobs.LookupLag)), next, looked)
	}
}

// checkFinal checks, once the faults stopped and nothing is due, what the
// database and the provider hold.
func (w *world) checkFinal() {
	charges, refundBook, ambiguous := w.prov.snapshot()
	keys := map[string]keyRow{}
	for _, k := range w.loadKeys() {
		keys[k.resID] = k
	}
	events := w.countEvents()

	type pay struct {
		id, state, account, ref, providerRef string
		amount, refunded                     int64
	}
	var pays []pay
	rows, err := w.pool.Query(w.ctx, `SELECT id, state, account_id, merchant_reference, COALESCE(provider_reference, ''),
		amount_minor, refunded_minor FROM payments ORDER BY created_at, id`)
	if err != nil {
		w.t.Fatal(err)
	}
	for rows.Next() {
		var p pay
		if err := rows.Scan(&p.id, &p.state, &p.account, &p.ref, &p.providerRef, &p.amount, &p.refunded); err != nil {
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

	invoices := map[string][]string{} // account/reference -> payments the provider charged
	refundedDB := map[string]int64{}
	for _, r := range refs {
		name := w.name(r.id)
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
		w.checkStored(refunds.ResourceType, name, r.id, r.state, keys[r.id])
	}
	for _, p := range pays {
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
			if len(objs) == 0 || objs[0].ID != p.providerRef || objs[0].Status != provider.StatusSucceeded || objs[0].AmountMinor != p.amount {
				w.fail("succeeded-unlike-provider", name, "payment %s COMPLETED (%s) but the provider holds %v", name, p.providerRef, objs)
			}
		}
		// Refunds within the payment: in the database, and at the provider.
		if refundedDB[p.id] > p.amount || p.refunded != refundedDB[p.id] {
			w.fail("refunds", name, "payment %s of %s: refunded_minor %d, refunds succeeded %d", name, money.Format(p.amount, "EUR"), p.refunded, refundedDB[p.id])
		}
		var atProvider int64
		for _, objs := range refundBook {
			for _, o := range objs {
				if o.Status == provider.StatusSucceeded && o.ChargeID != "" && chargeOfPayment(charges, key, o.ChargeID) {
					atProvider += o.AmountMinor
				}
			}
		}
		if atProvider > p.amount {
			w.fail("refunds", name, "payment %s of %s: the provider refunded %s", name, money.Format(p.amount, "EUR"), money.Format(atProvider, "EUR"))
		}
		if atProvider != refundedDB[p.id] {
			w.fail("refunded-unlike-provider", name, "payment %s: the provider refunded %s, the payment shows %s refunded",
				name, money.Format(atProvider, "EUR"), money.Format(refundedDB[p.id], "EUR"))
		}
		w.checkEvents(name, p.id, events, payments.EventSucceeded, p.state == string(payments.StateCompleted))
		w.checkEvents(name, p.id, events, payments.EventDeclined, p.state == string(payments.StateDeclined))
		w.checkStored(payments.ResourceType, name, p.id, p.state, keys[p.id])
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
		case canceled != "" && state == canceled:
			// A cancellation says the provider never saw the request.
			w.fail("processed-but-CANCELED", name, "%s %s is CANCELED while the provider holds its %s %s %s (processed at %s, visible to lookups from %s); %s",
				what, name, o.Status, kind(what), o.ID, w.at(o.ProcessedAt), w.at(o.ProcessedAt.Add(w.knobs.LookupLag)), w.history(what, id))
		}
	}
	final := state == succeeded || state == declined || (canceled != "" && state == canceled)
	review := k.review != nil && k.status == nil
	lastErr := ""
	if k.lastError != nil {
		lastErr = *k.lastError
	}
	// Manual review is the answer to a provider that was ambiguous; and,
	// by design, to one that could not say what became of a request that
	// may have moved money (UNKNOWN, SENT) on every one of the
	// reconciler's attempts. Never to a resource the service itself
	// believes moved nothing: that one must be abandoned.
	gaveUpOnUncertainty := (state == string(payments.StateUnknown) || state == string(payments.StateProviderRequestSent)) && w.uncertain[key] > 0
	switch {
	case review && !ambiguous[key] && !gaveUpOnUncertainty:
		w.fail("review-without-ambiguity", name, "%s %s (%s) left for manual review after %d reconciler attempts (%q), though the provider never answered a lookup of it ambiguously; nobody will end it; %s",
			what, name, state, k.attempts, lastErr, w.history(what, id))
	case final, review:
	case what == "refund" && state == string(refunds.StateFailedRetryable) && len(objs) == 0:
		// Refused, nothing moved, its client gave up: refunds have no
		// abandonment, so it stays as it is. Not money lost.
	default:
		held := []string{}
		for _, o := range objs {
			held = append(held, o.ID+" "+string(o.Status))
		}
		w.fail("not-final", name, "%s %s is still %s after healing (the provider holds %v; key's next look %v, %d attempts); %s",
			what, name, state, held, k.next, k.attempts, w.history(what, id))
	}
}

// history is the last moves of a resource, for failure messages.
func (w *world) history(what, id string) string {
	table, fk := "payment_transitions", "payment_id"
	if what == "refund" {
		table, fk = "refund_transitions", "refund_id"
	}
	rows, err := w.pool.Query(w.ctx, `SELECT to_state, reason, occurred_at FROM `+table+` WHERE `+fk+` = $1 ORDER BY id DESC LIMIT 4`, id)
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

// checkStored: a key has a stored answer exactly when its resource is
// final, and the answer says what the resource is; what a client was told
// as final is what the resource stayed.
func (w *world) checkStored(resType, name, id, state string, k keyRow) {
	want := map[string]int{
		string(payments.StateCompleted): http.StatusCreated, string(payments.StateDeclined): http.StatusPaymentRequired,
		string(payments.StateCanceled): http.StatusConflict,
	}
	if resType == refunds.ResourceType {
		want = map[string]int{string(refunds.StateSucceeded): http.StatusCreated, string(refunds.StateDeclined): http.StatusPaymentRequired}
	}
	wantStatus, final := want[state]
	switch {
	case k.resID == "":
		w.fail("stored-answer", name, "%s has no idempotency key", name)
		return
	case final && k.status == nil:
		w.fail("stored-answer", name, "%s is %s but its key has no stored answer", name, state)
	case !final && k.status != nil:
		w.fail("stored-answer", name, "%s is %s but its key stored %d %s", name, state, *k.status, k.body)
	case final && int(*k.status) != wantStatus:
		w.fail("stored-answer", name, "%s is %s but its key stored %d %s", name, state, *k.status, k.body)
	}
	if k.status != nil && k.body != nil {
		var body struct {
			PaymentID string `json:"paymentId"`
			RefundID  string `json:"refundId"`
			Status    string `json:"status"`
			Code      string `json:"code"`
		}
		if err := json.Unmarshal(k.body, &body); err != nil {
			w.fail("stored-answer", name, "%s: stored body is not JSON: %s", name, k.body)
		}
		gotID := body.PaymentID
		if resType == refunds.ResourceType {
			gotID = body.RefundID
		}
		wantCode := map[string]string{
			string(payments.StateDeclined): "PAYMENT_DECLINED", string(payments.StateCanceled): "PAYMENT_CANCELED",
		}[state]
		if resType == refunds.ResourceType {
			wantCode = map[string]string{string(refunds.StateDeclined): "REFUND_DECLINED"}[state]
		}
		switch {
		case gotID != id:
			w.fail("stored-answer", name, "%s: stored answer is about %q: %s", name, gotID, k.body)
		case *k.status == http.StatusCreated && body.Status != "SUCCEEDED":
			w.fail("stored-answer", name, "%s: stored 201 says %q", name, body.Status)
		case *k.status != http.StatusCreated && body.Code != wantCode:
			w.fail("stored-answer", name, "%s (%s): stored %d with code %q, want %q", name, state, *k.status, body.Code, wantCode)
		}
	}
	if s, ok := w.saw[id]; ok {
		if s.status != wantStatus || !final {
			w.fail("client-told-otherwise", name, "client %s was told %d %s, but %s ended %s", s.who, s.status, s.body, name, state)
		} else if k.body != nil && !bytes.Equal(k.body, s.body) {
			w.fail("client-told-otherwise", name, "client %s was told %s, the key stores %s", s.who, s.body, k.body)
		}
	}
}
