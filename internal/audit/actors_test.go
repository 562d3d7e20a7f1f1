package audit_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// lostAfterForwarding is the provider whose answers to charges and
// captures are lost after the provider acted, while loseCharges and
// loseCaptures say so: the reconciler finds out what happened by a
// lookup.
type lostAfterForwarding struct {
	provider.Provider
	loseCharges, loseCaptures atomic.Bool
}

func (l *lostAfterForwarding) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Charge, error) {
	ch, err := l.Provider.Charge(ctx, req)
	if err == nil && l.loseCharges.Load() {
		return provider.Charge{}, fmt.Errorf("injected, after the provider charged: %w", provider.ErrUnknownOutcome)
	}
	return ch, err
}

func (l *lostAfterForwarding) Capture(ctx context.Context, req provider.CaptureRequest) (provider.Charge, error) {
	ch, err := l.Provider.Capture(ctx, req)
	if err == nil && l.loseCaptures.Load() {
		return provider.Charge{}, fmt.Errorf("injected, after the provider captured: %w", provider.ErrUnknownOutcome)
	}
	return ch, err
}

// A payment created by key A, found authorized by the reconciler, captured
// by key B and found captured by an operator's pass (`paymentsapi reconcile
// -once`): each of its transitions names the one that made it, and the
// request it made it under, in either commit mode.
func TestEveryTransitionNamesItsActorAndRequest(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{idempotency.CommitInline, idempotency.CommitGroup} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			faults := &lostAfterForwarding{}
			e := servicetest.New(t, servicetest.WithCommitMode(mode), servicetest.WithProvider(func(p provider.Provider) provider.Provider { faults.Provider = p; return faults }))
			secretB, keyB, keyA := e.SecondKey()
			ctx := context.Background()

			// Key A's create: the provider authorizes, its answer is lost.
			faults.loseCharges.Store(true)
			created := e.Do("POST", "/payments", []byte(servicetest.ManualBody("inv-actors", "pm_card_visa")), map[string]string{
				"Authorization": "Bearer " + servicetest.SecretA, "Idempotency-Key": "k-actors", "Content-Type": "application/json",
				"X-Request-Id": "req-create",
			})
			if created.Status != http.StatusAccepted {
				t.Fatalf("create: %d %s", created.Status, created.Body)
			}
			id := created.JSON(t)["paymentId"].(string)
			faults.loseCharges.Store(false)

			// The reconciler finds it authorized.
			e.Reconcile()
			if st := e.PaymentState(id); st != payments.StateAuthorized {
				t.Fatalf("after the reconciler's pass: %s, want AUTHORIZED", st)
			}

			// Key B's capture: the provider captures, its answer is lost.
			faults.loseCaptures.Store(true)
			captured := e.Do("POST", "/payments/"+id+"/capture", nil, map[string]string{
				"Authorization": "Bearer " + secretB, "Idempotency-Key": "k-capture", "X-Request-Id": "req-capture",
			})
			if captured.Status != http.StatusAccepted {
				t.Fatalf("capture: %d %s", captured.Status, captured.Body)
			}
			faults.loseCaptures.Store(false)

			// An operator's pass finds it captured.
			e.Clock.Advance(time.Minute)
			opCtx := actor.WithRequestID(actor.WithActor(ctx, actor.Operator("alice")), "req-operator")
			if _, err := e.Core.Reconciler.RunOnce(opCtx, 10); err != nil {
				t.Fatalf("the operator's pass: %v", err)
			}
			if g := e.Get(servicetest.SecretA, "/payments/"+id).JSON(t); g["status"] != "SUCCEEDED" {
				t.Fatalf("payment %v", g)
			}

			got := e.Transitions("payment_transitions", "payment_id", id)
			reconciled := servicetest.Transition{To: "AUTHORIZED", Actor: actor.Reconciler}
			for _, tr := range got {
				if tr.To == "AUTHORIZED" {
					reconciled.RequestID = tr.RequestID
				}
			}
			want := []servicetest.Transition{
				{To: "RECEIVED", Actor: actor.API(keyA), RequestID: "req-create"},
				{To: "PROVIDER_REQUEST_SENT", Actor: actor.API(keyA), RequestID: "req-create"},
				{To: "UNKNOWN_REQUIRES_RECOVERY", Actor: actor.API(keyA), RequestID: "req-create"},
				reconciled,
				{To: "CAPTURE_REQUESTED", Actor: actor.API(keyB), RequestID: "req-capture"},
				{To: "COMPLETED", Actor: actor.Operator("alice"), RequestID: "req-operator"},
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("the payment's transitions:\n got %v\nwant %v", got, want)
			}
			if reconciled.RequestID == "" || reconciled.RequestID == "req-create" || reconciled.RequestID == "req-capture" {
				t.Errorf("the reconciler's move is under request %q, want one of its own", reconciled.RequestID)
			}
			// The capture's own record names key B from its creation.
			var actionID string
			if err := e.Pool.QueryRow(ctx, `SELECT id FROM payment_actions WHERE payment_id = $1 AND kind = 'capture'`, id).Scan(&actionID); err != nil {
				t.Fatal(err)
			}
			for _, tr := range e.Transitions("payment_action_transitions", "payment_action_id", actionID) {
				if tr.To == "RECEIVED" && (tr.Actor != actor.API(keyB) || tr.RequestID != "req-capture") {
					t.Errorf("the capture's creation: %+v, want key B's request", tr)
				}
			}
		})
	}
}

// Payments created at once by two keys share their transactions, and their
// statements are merged over their rows (package groupcommit): each
// payment's transitions still name its own key and request.
func TestMergedMovesKeepEachRequestsActor(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithSlowDelay(300*time.Millisecond), servicetest.WithCommitMode(idempotency.CommitGroup))
	secretB, keyB, keyA := e.SecondKey()
	const n = 16
	var wg sync.WaitGroup
	start := make(chan struct{})
	answers := make([]servicetest.Response, n)
	secrets, keyIDs := []string{servicetest.SecretA, secretB}, []string{keyA, keyB}
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = e.Do("POST", "/payments", []byte(servicetest.Body("merchantReference", fmt.Sprintf(`"inv-merged-%d"`, i), "paymentMethod", `"pm_sim_slow"`)),
				map[string]string{"Authorization": "Bearer " + secrets[i%2], "Idempotency-Key": fmt.Sprintf("k-merged-%d", i),
					"Content-Type": "application/json", "X-Request-Id": fmt.Sprintf("req-merged-%d", i)})
		})
	}
	close(start)
	wg.Wait()
	for i, r := range answers {
		if r.Status != http.StatusCreated {
			t.Fatalf("payment %d: %d %s", i, r.Status, r.Body)
		}
		for _, tr := range e.Transitions("payment_transitions", "payment_id", r.JSON(t)["paymentId"].(string)) {
			if tr.Actor != actor.API(keyIDs[i%2]) || tr.RequestID != fmt.Sprintf("req-merged-%d", i) {
				t.Errorf("payment %d's move to %s names %s under %s, want %s under req-merged-%d",
					i, tr.To, tr.Actor, tr.RequestID, actor.API(keyIDs[i%2]), i)
			}
		}
	}
	for _, kind := range []string{"claims", "steps"} {
		if e.Metric("paymentsapi_group_commit_merged_batches_total", map[string]string{"kind": kind}) == 0 {
			t.Errorf("no %s' batches merged: the test proved nothing", kind)
		}
	}
}

// A payment a Stripe webhook resolves names the provider's webhook, and
// the webhook's request, on its move; the move of the unknown outcome
// stays the creating key's.
func TestAWebhooksMoveNamesTheProviderWebhook(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithProviderTimeout(300*time.Millisecond), servicetest.WithStripeWebhooks())
	id := e.UnknownPayment("k-lost", "inv-1")
	payload := servicetest.StripeEvent("evt_1", "payment_intent.succeeded", servicetest.IntentOf(id, "succeeded"))
	header := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: servicetest.StripeWebhookSecret, Timestamp: e.Clock.Now()}).Header
	if r := e.Do("POST", "/webhooks/stripe", payload, map[string]string{
		"Content-Type": "application/json", "Stripe-Signature": header, "X-Request-Id": "req-webhook",
	}); r.Status != http.StatusOK {
		t.Fatalf("webhook: %d %s", r.Status, r.Body)
	}
	got := e.Transitions("payment_transitions", "payment_id", id)
	last := got[len(got)-1]
	if last.To != "COMPLETED" || last.Actor != actor.ProviderWebhook || last.RequestID != "req-webhook" {
		t.Errorf("the webhook's move: %+v, want COMPLETED by %s under req-webhook", last, actor.ProviderWebhook)
	}
	if before := got[len(got)-2]; before.To != "UNKNOWN_REQUIRES_RECOVERY" || before.Actor == actor.ProviderWebhook || before.Actor == "" {
		t.Errorf("the move before it: %+v, want the creating key's", before)
	}
}
