package webhooks_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
	"github.com/paymentsapi/paymentsapi/internal/webhooks"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// deliver delivers payload signed now with the right secret; it must
// answer 200, and what it answers is returned.
func deliver(e *servicetest.Env, payload []byte) webhooks.Answer {
	e.T.Helper()
	r := e.Webhook(payload, servicetest.StripeWebhookSecret, e.Clock.Now())
	if r.Status != http.StatusOK {
		e.T.Fatalf("webhook answered %d %s", r.Status, r.Body)
	}
	m := r.JSON(e.T)
	a := webhooks.Answer{EventID: m["eventId"].(string), Outcome: m["outcome"].(string)}
	if res, ok := m["resolution"].(string); ok {
		a.Resolution = res
	}
	return a
}

// keySnapshot is what any write about a payment's key or state changes.
func keySnapshot(e *servicetest.Env, paymentID string) string {
	e.T.Helper()
	var token int64
	var state string
	var updated time.Time
	err := e.Pool.QueryRow(context.Background(), `
		SELECT k.fencing_token, p.state, p.updated_at FROM idempotency_keys k JOIN payments p ON p.id = k.resource_id
		WHERE k.resource_id = $1`, paymentID).Scan(&token, &state, &updated)
	if err != nil {
		e.T.Fatal(err)
	}
	return fmt.Sprintf("token %d, %s since %s, %d transitions, %d events, %d lookups", token, state, updated,
		e.Count(`payment_transitions WHERE payment_id = $1`, paymentID),
		e.Count(`outbox_events WHERE aggregate_id = $1`, paymentID), e.Lookups(paymentID))
}

// A signed payment_intent.succeeded resolves a payment whose outcome was
// unknown, by asking the provider: COMPLETED with its one charge, and the
// stored answer is what a retry of the client gets.
func TestStripeWebhookResolvesAnUnknownPayment(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithProviderTimeout(300*time.Millisecond), servicetest.WithStripeWebhooks())
	id := e.UnknownPayment("k-lost", "inv-1")

	got := deliver(e, servicetest.StripeEvent("evt_1", "payment_intent.succeeded", servicetest.IntentOf(id, "succeeded")))
	if got.Outcome != webhooks.OutcomeApplied || got.Resolution != payments.OutcomeSucceeded {
		t.Fatalf("answer %+v", got)
	}
	e.AssertChargedOnce(id)
	if n := e.Lookups(id); n != 1 {
		t.Errorf("lookups %d, want 1: the provider, not the event, decides", n)
	}
	stored := e.Get(servicetest.SecretA, "/payments/"+id).JSON(t)
	if stored["status"] != "SUCCEEDED" || stored["providerReference"] == nil {
		t.Errorf("payment %v", stored)
	}
	retry := e.Post("k-lost", servicetest.Body("merchantReference", `"inv-1"`, "paymentMethod", `"`+sim.MethodTimeoutAfterSuccess+`"`))
	if retry.Status != http.StatusCreated || retry.Header.Get("Idempotent-Replayed") != "true" || retry.JSON(t)["status"] != "SUCCEEDED" {
		t.Errorf("retry: %d %v %s", retry.Status, retry.Header, retry.Body)
	}
	if n := e.Count(`inbox WHERE consumer = $1 AND event_id = $2 AND outcome = 'applied' AND aggregate_id = $3`,
		webhooks.Consumer, webhooks.InboxID("evt_1"), id); n != 1 {
		t.Errorf("inbox rows %d, want 1", n)
	}
	if stats, err := e.Core.Reconciler.RunOnce(context.Background(), 10); err != nil || len(stats) != 0 {
		t.Errorf("the reconciler found work after the webhook: %v %v", stats, err)
	}
}

// A refund event resolves an unknown refund the same way.
func TestStripeWebhookResolvesAnUnknownRefund(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithProviderTimeout(300*time.Millisecond), servicetest.WithStripeWebhooks())
	pay := e.Pay(sim.MethodRefundTimeoutAfterSuccess, "inv-1")
	first := e.Refund(pay, "r-1", `{"amount":"4.00"}`)
	if first.Status != http.StatusAccepted {
		t.Fatalf("lost answer: %d %s", first.Status, first.Body)
	}
	refundID := first.JSON(t)["refundId"].(string)
	got := deliver(e, servicetest.StripeEvent("evt_r1", "refund.updated",
		fmt.Sprintf(`{"id":"re_3Test","object":"refund","status":"succeeded","metadata":{"refund_id":%q}}`, refundID)))
	if got.Outcome != webhooks.OutcomeApplied || got.Resolution != "succeeded" {
		t.Fatalf("answer %+v", got)
	}
	retry := e.Refund(pay, "r-1", `{"amount":"4.00"}`)
	if retry.Status != http.StatusCreated || retry.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry: %d %s", retry.Status, retry.Body)
	}
	if got := e.ProviderRefunds(e.ChargeOf(pay)); len(got) != 1 || got[0].RequestCount != 1 {
		t.Errorf("provider refunds %+v: want one, created by one request", got)
	}
	if g := e.Get(servicetest.SecretA, "/payments/"+pay).JSON(t); g["refundedAmount"] != "4.00" {
		t.Errorf("refundedAmount %v", g["refundedAmount"])
	}
}

// A webhook only ever looks up: a payment sent, but never seen by the
// provider (its owner died before the call), is not sent by the webhook,
// whatever the event claims. The reconciler, which may send, completes it.
func TestStripeWebhookNeverSends(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithHooks(payments.Hooks{AfterRequestSent: servicetest.CrashOnce()}), servicetest.WithStripeWebhooks())
	if r := e.Post("k-crash", servicetest.Body()); r.Status != http.StatusInternalServerError {
		t.Fatalf("the crashed request answered %d %s", r.Status, r.Body)
	}
	id := e.OnlyPaymentID()
	e.Clock.Advance(e.Config.Lease + time.Second)

	got := deliver(e, servicetest.StripeEvent("evt_1", "payment_intent.succeeded", servicetest.IntentOf(id, "succeeded")))
	if got.Resolution != idempotency.OutcomeUnresolved {
		t.Errorf("answer %+v", got)
	}
	if n := len(e.Sim.Charges()); n != 0 {
		t.Fatalf("the webhook made the provider charge (%d charges)", n)
	}
	if s := e.PaymentState(id); s != payments.StateUnknown {
		t.Errorf("state %s, want %s", s, payments.StateUnknown)
	}
	if stats, err := e.Core.Reconciler.RunOnce(context.Background(), 10); err != nil || stats[payments.OutcomeSucceeded] != 1 {
		t.Fatalf("reconciler: %v %v", stats, err)
	}
	e.AssertChargedOnce(id)
}

// A payment the provider refused (FAILED, retryable by its client) is only
// looked up: the provider holds nothing, so it stays as it was, and the
// event is handled (200, recorded).
func TestStripeWebhookOnARefusedPaymentOnlyLooks(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithStripeWebhooks())
	r := e.Post("k-refused", servicetest.Body("paymentMethod", `"`+sim.MethodUnavailable+`"`))
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("refused: %d %s", r.Status, r.Body)
	}
	id := e.OnlyPaymentID()
	got := deliver(e, servicetest.StripeEvent("evt_1", "payment_intent.succeeded", servicetest.IntentOf(id, "succeeded")))
	if got.Outcome != webhooks.OutcomeApplied || got.Resolution != idempotency.OutcomeUnresolved {
		t.Errorf("answer %+v", got)
	}
	if s := e.PaymentState(id); s != payments.StateFailedRetryable {
		t.Errorf("state %s", s)
	}
	if n := len(e.Sim.Charges()); n != 0 {
		t.Errorf("%d charges", n)
	}
	if n := e.Count(`inbox WHERE consumer = $1`, webhooks.Consumer); n != 1 {
		t.Errorf("inbox rows %d, want 1", n)
	}
}

// An event whose handling fails (here the resolving owner dies after the
// provider answered) is answered 500 and not recorded, so that Stripe
// delivers it again; the next delivery resolves the payment.
func TestStripeWebhookThatFailsIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	e := servicetest.New(t, servicetest.WithProviderTimeout(300*time.Millisecond), servicetest.WithStripeWebhooks(), servicetest.WithHooks(payments.Hooks{
		AfterProviderAnswer: func(context.Context, string) error {
			if failing.Load() {
				return servicetest.ErrCrash
			}
			return nil
		},
	}))
	id := e.UnknownPayment("k-lost", "inv-1")
	event := servicetest.StripeEvent("evt_1", "payment_intent.succeeded", servicetest.IntentOf(id, "succeeded"))
	failing.Store(true)
	if r := e.Webhook(event, servicetest.StripeWebhookSecret, e.Clock.Now()); r.Status != http.StatusInternalServerError || r.JSON(t)["code"] != "INTERNAL" {
		t.Fatalf("failed handling: %d %s", r.Status, r.Body)
	}
	failing.Store(false)
	if n := e.Count("inbox"); n != 0 {
		t.Fatalf("a failed event was recorded (%d rows)", n)
	}
	e.Clock.Advance(e.Config.Lease + time.Second) // the dead owner's lease runs out
	if got := deliver(e, event); got.Outcome != webhooks.OutcomeApplied || got.Resolution != payments.OutcomeSucceeded {
		t.Errorf("redelivery: %+v", got)
	}
	e.AssertChargedOnce(id)
}

// A delivery of an event already handled answers 200 and does nothing:
// here the first delivery left the payment unresolved (the provider's
// lookups fail at first), so handling it again would look up again.
func TestStripeWebhookDuplicateDeliveryChangesNothing(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithHooks(payments.Hooks{AfterProviderAnswer: servicetest.CrashOnce()}), servicetest.WithStripeWebhooks())
	e.Post("k-flaky", servicetest.Body("paymentMethod", `"`+sim.MethodLookupFlaky+`"`)) // charged, answer lost
	id := e.OnlyPaymentID()
	e.Clock.Advance(e.Config.Lease + time.Second)

	event := servicetest.StripeEvent("evt_dup", "payment_intent.succeeded", servicetest.IntentOf(id, "succeeded"))
	if got := deliver(e, event); got.Outcome != webhooks.OutcomeApplied || got.Resolution != idempotency.OutcomeUnresolved {
		t.Fatalf("first delivery: %+v", got)
	}
	before := keySnapshot(e, id)
	e.Clock.Advance(time.Minute) // Stripe delivers again later, signed afresh
	if got := deliver(e, event); got.Outcome != webhooks.OutcomeDuplicate {
		t.Errorf("second delivery: %+v", got)
	}
	if after := keySnapshot(e, id); after != before {
		t.Errorf("a duplicate delivery changed the payment:\n before %s\n after  %s", before, after)
	}
	if n := e.Count(`inbox WHERE consumer = $1`, webhooks.Consumer); n != 1 {
		t.Errorf("inbox rows %d, want 1", n)
	}
	// An ignored event is recorded once too.
	other := servicetest.StripeEvent("evt_other", "customer.created", `{"id":"cus_1","object":"customer"}`)
	for i, want := range []string{webhooks.OutcomeIgnored, webhooks.OutcomeDuplicate} {
		if got := deliver(e, other); got.Outcome != want {
			t.Errorf("delivery %d of an ignored event: %+v, want %s", i+1, got, want)
		}
	}
	if n := e.Count(`inbox WHERE consumer = $1`, webhooks.Consumer); n != 2 {
		t.Errorf("inbox rows %d, want 2", n)
	}
	for outcome, want := range map[string]float64{webhooks.OutcomeApplied: 1, webhooks.OutcomeDuplicate: 2, webhooks.OutcomeIgnored: 1} {
		if n := e.Metric("paymentsapi_stripe_webhook_events_total", map[string]string{"outcome": outcome}); n != want {
			t.Errorf("stripe webhook events %s: %v, want %v", outcome, n, want)
		}
	}
}

// Events about what we do not know, or do not act on, are answered 200,
// recorded as ignored, and ask the provider nothing.
func TestStripeWebhookIgnoresWhatIsNotOurs(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithStripeWebhooks())
	id := e.Pay("pm_card_visa", "inv-1") // final: nothing to do about it
	before := keySnapshot(e, id)
	for _, c := range []struct {
		event      []byte
		resolution string
	}{
		{servicetest.StripeEvent("evt_unknown", "payment_intent.succeeded", servicetest.IntentOf("pay_unknown", "succeeded")), webhooks.ResolutionUnknownResource},
		{servicetest.StripeEvent("evt_final", "payment_intent.payment_failed", servicetest.IntentOf(id, "requires_payment_method")), idempotency.OutcomeFinal},
		{servicetest.StripeEvent("evt_foreign", "payment_intent.succeeded",
			`{"id":"pi_other","object":"payment_intent","metadata":{"order":"42"}}`), ""},
		{servicetest.StripeEvent("evt_refunded", "charge.refunded", `{"id":"ch_1","object":"charge","payment_intent":"pi_3Test"}`), ""},
		{servicetest.StripeEvent("evt_customer", "customer.created", `{"id":"cus_1","object":"customer"}`), ""},
	} {
		if got := deliver(e, c.event); got.Outcome != webhooks.OutcomeIgnored || got.Resolution != c.resolution {
			t.Errorf("%s: %+v, want ignored (%q)", c.event, got, c.resolution)
		}
	}
	if n := e.Count(`inbox WHERE consumer = $1 AND outcome = 'ignored'`, webhooks.Consumer); n != 5 {
		t.Errorf("ignored inbox rows %d, want 5", n)
	}
	if after := keySnapshot(e, id); after != before {
		t.Errorf("an event changed a final payment:\n before %s\n after  %s", before, after)
	}
	if n := e.Count("payments"); n != 1 {
		t.Errorf("payments %d", n)
	}
	// A signed event of a type we act on whose object is not what it says
	// is recorded as rejected, for a person, and answered 200.
	if got := deliver(e, servicetest.StripeEvent("evt_bad", "payment_intent.succeeded", `{"id":"ch_1","object":"charge"}`)); got.Outcome != webhooks.OutcomeRejected {
		t.Errorf("unreadable object: %+v", got)
	}
	if n := e.Count(`inbox WHERE consumer = $1 AND outcome = 'rejected' AND error IS NOT NULL`, webhooks.Consumer); n != 1 {
		t.Errorf("rejected inbox rows %d, want 1", n)
	}
}

// A bad, missing or stale signature is answered 400 and writes nothing:
// the unknown payment the event names stays as it was, the provider is
// not asked, the inbox stays empty. A signature just inside the tolerance
// is accepted (measured on the service's clock).
func TestStripeWebhookRefusesBadSignatures(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithProviderTimeout(300*time.Millisecond), servicetest.WithStripeWebhooks())
	id := e.UnknownPayment("k-lost", "inv-1")
	before := keySnapshot(e, id)
	event := servicetest.StripeEvent("evt_1", "payment_intent.succeeded", servicetest.IntentOf(id, "succeeded"))
	now := e.Clock.Now()
	valid := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: event, Secret: servicetest.StripeWebhookSecret, Timestamp: now}).Header
	for name, send := range map[string]func() servicetest.Response{
		"stale timestamp": func() servicetest.Response {
			return e.Webhook(event, servicetest.StripeWebhookSecret, now.Add(-webhooks.Tolerance-time.Second))
		},
		"another secret": func() servicetest.Response { return e.Webhook(event, "whsec_someone_else", now) },
		"no signature": func() servicetest.Response {
			return e.Do("POST", "/webhooks/stripe", event, map[string]string{"Content-Type": "application/json"})
		},
		"tampered body": func() servicetest.Response {
			tampered := bytes.Replace(event, []byte(`"succeeded"`), []byte(`"succeeded" `), 1)
			return e.Do("POST", "/webhooks/stripe", tampered, map[string]string{"Stripe-Signature": valid})
		},
		"garbled header": func() servicetest.Response {
			return e.Do("POST", "/webhooks/stripe", event, map[string]string{"Stripe-Signature": "t=now,v1=zz"})
		},
	} {
		r := send()
		if r.Status != http.StatusBadRequest || r.Header.Get("Content-Type") != "application/problem+json" ||
			r.JSON(t)["code"] != "WEBHOOK_SIGNATURE_INVALID" {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
		}
	}
	if n := e.Count("inbox"); n != 0 {
		t.Errorf("inbox rows %d after refused deliveries", n)
	}
	if n := e.Metric("paymentsapi_stripe_webhook_events_total", map[string]string{"outcome": "signature_invalid"}); n != 5 {
		t.Errorf("refused deliveries counted %v, want 5", n)
	}
	if after := keySnapshot(e, id); after != before {
		t.Errorf("a refused delivery changed the payment:\n before %s\n after  %s", before, after)
	}
	if r := e.Webhook(event, servicetest.StripeWebhookSecret, now.Add(-webhooks.Tolerance+time.Second)); r.Status != http.StatusOK {
		t.Errorf("inside the tolerance: %d %s", r.Status, r.Body)
	}
	if s := e.PaymentState(id); s != payments.StateCompleted {
		t.Errorf("state %s after the valid delivery", s)
	}
}

// Without a secret the route does not exist.
func TestStripeWebhooksNeedASecret(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	r := e.Webhook(servicetest.StripeEvent("evt_1", "customer.created", `{"id":"cus_1","object":"customer"}`), servicetest.StripeWebhookSecret, e.Clock.Now())
	if r.Status != http.StatusNotFound {
		t.Errorf("without STRIPE_WEBHOOK_SECRET: %d %s", r.Status, r.Body)
	}
}

// slowLookups holds every lookup for a while: whoever owns a key then
// holds it long enough for a rival to find it held.
type slowLookups struct {
	provider.Provider
	delay time.Duration
}

func (p *slowLookups) Lookup(ctx context.Context, l provider.ChargeLookup) (provider.Charge, error) {
	time.Sleep(p.delay)
	return p.Provider.Lookup(ctx, l)
}

// A webhook and the reconciler resolve the same unknown payment at the
// same moment, many times over: exactly one of them resolves it, with one
// lookup and one charge at the provider, and neither fails. Lookups are
// slowed down so that the loser arrives while the winner holds the key,
// not after it finished; rounds start both at once, or one of them a
// little later (then the other has already taken the key over, and only
// its lease turns the latecomer away).
func TestStripeWebhookRacingTheReconciler(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithProviderTimeout(300*time.Millisecond), servicetest.WithStripeWebhooks(),
		servicetest.WithProvider(func(p provider.Provider) provider.Provider {
			return &slowLookups{Provider: p, delay: 50 * time.Millisecond}
		}))
	wins := map[string]int{}
	for i := range 15 {
		id := e.UnknownPayment(fmt.Sprint("k-", i), fmt.Sprint("inv-", i))
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			answer  webhooks.Answer
			stats   idempotency.RecoveryStats
			passErr error
		)
		late := func(who int) {
			<-start
			if i%3 == who {
				time.Sleep(10 * time.Millisecond)
			}
		}
		wg.Go(func() {
			late(1)
			answer = deliver(e, servicetest.StripeEvent(fmt.Sprint("evt_", i), "payment_intent.succeeded", servicetest.IntentOf(id, "succeeded")))
		})
		wg.Go(func() {
			late(2)
			stats, passErr = e.Core.Reconciler.RunOnce(context.Background(), 10)
		})
		close(start)
		wg.Wait()
		if passErr != nil {
			t.Fatal(passErr)
		}
		byWebhook := answer.Resolution == payments.OutcomeSucceeded
		byReconciler := stats[payments.OutcomeSucceeded] == 1
		if byWebhook == byReconciler || (byWebhook && len(stats) != 0) || len(stats) > 1 {
			t.Fatalf("round %d: webhook %+v, reconciler %v: want exactly one to resolve it", i, answer, stats)
		}
		if !byWebhook && answer.Resolution != idempotency.OutcomeInFlight && answer.Resolution != idempotency.OutcomeFinal {
			t.Fatalf("round %d: the webhook lost with %+v", i, answer)
		}
		if s := e.PaymentState(id); s != payments.StateCompleted {
			t.Fatalf("round %d: state %s", i, s)
		}
		charges := e.ChargesFor(id)
		if len(charges) != 1 || charges[0].RequestCount != 1 || charges[0].LookupCount != 1 {
			t.Fatalf("round %d: provider charges %+v: want one, sent once, looked up once", i, charges)
		}
		if n := e.Count(`outbox_events WHERE aggregate_id = $1 AND event_type = 'PaymentSucceeded'`, id); n != 1 {
			t.Fatalf("round %d: PaymentSucceeded events %d", i, n)
		}
		switch {
		case byWebhook:
			wins["webhook"]++
		default:
			wins["reconciler, webhook found it "+answer.Resolution]++
		}
	}
	t.Logf("resolved by: %v", wins)
}
