package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/audit"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
)

// payAnyhow sends a payment through the API as tenant secret and returns
// its id, whatever the answer (a lost answer, a crash).
func (e *env) payAnyhow(secret, key, body string) string {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.url+"/payments", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var id string
	if err := e.pool.QueryRow(context.Background(), `SELECT resource_id FROM idempotency_keys
		WHERE idempotency_key = $1 AND operation = 'create_payment'`, key).Scan(&id); err != nil {
		e.t.Fatalf("the payment of key %s: %v", key, err)
	}
	return id
}

// leaveForReview marks the key of payment id for manual review, as the
// reconciler does when it gives up (its write, markForReview: the lease
// ends too), so that the test need not run twenty attempts.
func (e *env) leaveForReview(id string) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), `UPDATE idempotency_keys
		SET manual_review_at = $2, recovery_last_error = 'the operation could not resolve it', lease_expires_at = NULL
		WHERE resource_type = 'payment' AND resource_id = $1`, id, e.clock.Now()); err != nil {
		e.t.Fatal(err)
	}
}

// stateOf is payment id's state, as its row says.
func (e *env) stateOf(id string) string {
	e.t.Helper()
	var st string
	if err := e.pool.QueryRow(context.Background(), `SELECT state FROM payments WHERE id = $1`, id).Scan(&st); err != nil {
		e.t.Fatal(err)
	}
	return st
}

// resolutions are the audit log's records of people's resolutions.
func (e *env) resolutions() []audit.Event {
	e.t.Helper()
	page, err := audit.List(context.Background(), e.pool, audit.Query{Action: idempotency.AuditResolved, Limit: 10})
	if err != nil {
		e.t.Fatal(err)
	}
	return page.Items
}

// resolveForm is the form that resolves payment id's key as outcome.
func resolveForm(b *browser, id, outcome, reason string) url.Values {
	return url.Values{"csrf": {b.csrf()}, "resourceType": {"payment"}, "resourceId": {id}, "key": {"k"},
		"outcome": {outcome}, "reason": {reason}}
}

func TestAnOperatorResolvesAKeyInManualReviewAndTheProviderVetoesAContradiction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	// The provider charged, and the answer was lost: the payment's
	// outcome is unknown to the service.
	id := e.payAnyhow(secretA, "lost-1", payment("acc_1", "inv-lost", "12.00", "pm_sim_timeout_after_success", "automatic"))
	if st := e.stateOf(id); st != "UNKNOWN_REQUIRES_RECOVERY" && st != "PROVIDER_REQUEST_SENT" {
		t.Fatalf("a lost answer left the payment %s", st)
	}
	e.leaveForReview(id)

	b := e.browser()
	b.login(secretOp)
	p := b.get("/dashboard/attention")
	mustStatus(t, p, 200)
	golden(t, "attention", p)

	// Declined contradicts the provider's charge: refused, nothing written.
	p = b.post("/dashboard/attention/resolve", resolveForm(b, id, "declined", "the customer says no"))
	mustStatus(t, p, http.StatusConflict)
	if !strings.Contains(p.body, "contradicts the provider, which reports it succeeded") {
		t.Errorf("the refusal does not say why:\n%s", p.body)
	}
	if st := e.stateOf(id); st == "DECLINED" || st == "COMPLETED" {
		t.Errorf("a refused resolution moved the payment to %s", st)
	}
	if got := e.resolutions(); len(got) != 0 {
		t.Errorf("a refused resolution is in the audit log: %+v", got)
	}
	// A resolution needs a reason.
	p = b.post("/dashboard/attention/resolve", resolveForm(b, id, "succeeded", "  "))
	mustStatus(t, p, http.StatusBadRequest)

	// Succeeded agrees with the provider: settled, audited as the operator.
	p = b.post("/dashboard/attention/resolve", resolveForm(b, id, "succeeded", "checked the provider's dashboard"))
	mustStatus(t, p, 200)
	if !strings.Contains(p.body, "Resolved: succeeded") || !strings.Contains(p.body, "review-empty") {
		t.Errorf("the resolution's page:\n%s", p.body)
	}
	if st := e.stateOf(id); st != "COMPLETED" {
		t.Errorf("resolved as succeeded, the payment is %s", st)
	}
	got := e.resolutions()
	if len(got) != 1 || got[0].Actor != "operator:alice" || got[0].TargetID != id || got[0].TenantID != "tenant_a" ||
		got[0].Details["reason"] != "checked the provider's dashboard" || got[0].Details["outcome"] != "succeeded" {
		t.Fatalf("the audit log's resolutions: %+v", got)
	}
	p = b.get("/dashboard/payments/" + id + "?tenant=tenant_a")
	if !strings.Contains(p.body, "resolved by a person as succeeded") || !strings.Contains(p.body, "by operator:alice") {
		t.Errorf("the payment's timeline does not show the resolution:\n%s", p.body)
	}
	// The same resolution again changes nothing.
	p = b.post("/dashboard/attention/resolve", resolveForm(b, id, "succeeded", "checked the provider's dashboard"))
	if !strings.Contains(p.body, "Already resolved") || len(e.resolutions()) != 1 {
		t.Errorf("a second resolution: %d resolutions, page:\n%.1500s", len(e.resolutions()), p.body)
	}

	// A tenant has no such page, and no link to it.
	t2 := e.browser()
	p = t2.login(secretA)
	if strings.Contains(p.body, "Needs attention") {
		t.Error("a tenant's navigation links to Needs attention")
	}
	mustStatus(t, t2.get("/dashboard/attention"), http.StatusForbidden)
	mustStatus(t, t2.post("/dashboard/attention/resolve", resolveForm(t2, id, "declined", "mine")), http.StatusForbidden)
}

func TestAPersonsDecisionStandsWhereTheProviderKnowsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.crashSent.Store(true)
	id := e.payAnyhow(secretA, "crashed-1", payment("acc_1", "inv-crash", "8.00", "pm_card_visa", "automatic"))
	e.crashSent.Store(false)
	e.clock.Advance(time.Hour) // past any lookup lag: the provider's "not found" is certain
	e.leaveForReview(id)

	b := e.browser()
	b.login(secretOp)
	b.get("/dashboard/attention")
	p := b.post("/dashboard/attention/resolve", resolveForm(b, id, "declined", "never reached the provider"))
	mustStatus(t, p, 200)
	if st := e.stateOf(id); st != "DECLINED" {
		t.Fatalf("resolved as declined, the payment is %s:\n%.2000s", st, p.body)
	}
	got := e.resolutions()
	if len(got) != 1 || got[0].Details["provider"] != "holds nothing for its key" {
		t.Errorf("the audit log's resolutions: %+v", got)
	}
}

func TestTheEmptyPagesOfAnOperatorsAttentionAndUnparking(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	b := e.browser()
	b.login(secretOp)
	golden(t, "attention-empty", b.get("/dashboard/attention"))

	// A parked event, unparked from the page: released, and audited.
	e.pay(secretA, "k-1", payment("acc_1", "inv-1", "10.00", "pm_card_visa", "automatic"))
	var eventID string
	if err := e.pool.QueryRow(context.Background(), `
		INSERT INTO outbox_parked (event_id, aggregate_type, aggregate_id, seq, attempts, last_error, parked_at)
		SELECT id, aggregate_type, aggregate_id, 1, 5, 'nats: no responders', $1 FROM outbox_events ORDER BY created_at LIMIT 1
		RETURNING event_id::text`, e.clock.Now()).Scan(&eventID); err != nil {
		t.Fatal(err)
	}
	p := b.get("/dashboard/attention")
	if !strings.Contains(p.body, `id="parked-`+eventID+`"`) {
		t.Fatalf("the parked event is not listed:\n%s", p.body)
	}
	p = b.post("/dashboard/attention/unpark", url.Values{"csrf": {b.csrf()}, "eventId": {eventID}})
	mustStatus(t, p, 200)
	if !strings.Contains(p.body, "Unpark event "+eventID+": 200 Unparked") || !strings.Contains(p.body, "unparked, publishing") {
		t.Errorf("the unpark's page:\n%s", p.body)
	}
	page, err := audit.List(context.Background(), e.pool, audit.Query{Action: "outbox.events_unparked", Limit: 5})
	if err != nil || len(page.Items) != 1 || page.Items[0].Actor != "operator:alice" {
		t.Errorf("the audit log's unparks: %+v, %v", page.Items, err)
	}
	p = b.post("/dashboard/attention/unpark", url.Values{"csrf": {b.csrf()}, "eventId": {"not-an-event"}})
	if !strings.Contains(p.body, "Not parked") {
		t.Errorf("unparking no event:\n%s", p.body)
	}
}
