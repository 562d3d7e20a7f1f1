package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
	"github.com/paymentsapi/paymentsapi/internal/webhooks"
)

const webhookSecret = "whsec_test_paymentsapi"

// withStripeWebhooks enables POST /webhooks/stripe with webhookSecret.
func withStripeWebhooks() servicetest.Option {
	return func(o *servicetest.Options) { o.Config.StripeWebhookSecret = webhookSecret }
}

// stripeEvent is a Stripe event of type typ about object (JSON).
func stripeEvent(id, typ, object string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2023-10-16","created":1795000000,"livemode":false,`+
		`"type":%q,"data":{"object":%s}}`, id, typ, object)
}

// intentOf is a PaymentIntent as our Stripe adapter creates it for
// paymentID, saying status: what an event claims, never what is booked.
func intentOf(paymentID, status string) string {
	return fmt.Sprintf(`{"id":"pi_3Test","object":"payment_intent","amount":1000,"currency":"eur","status":%q,`+
		`"metadata":{"idempotency_key":%q,"payment_id":%q}}`, status, payments.ProviderKey(paymentID), paymentID)
}

// webhook delivers payload as Stripe would, signed with secret at at.
func (e *env) webhook(payload []byte, secret string, at time.Time) response {
	e.T.Helper()
	header := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at}).Header
	return e.Do("POST", "/webhooks/stripe", payload, map[string]string{"Content-Type": "application/json", "Stripe-Signature": header})
}

// deliver delivers payload signed now with the right secret; it must
// answer 200, and what it answers is returned.
func (e *env) deliver(payload []byte) webhooks.Answer {
	e.T.Helper()
	r := e.webhook(payload, webhookSecret, e.Clock.Now())
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

// unknownPayment creates a payment whose provider answer was lost after
// the charge succeeded: 202, UNKNOWN_REQUIRES_RECOVERY, key released.
func (e *env) unknownPayment(key, ref string) string {
	e.T.Helper()
	r := e.Post(key, servicetest.Body("merchantReference", `"`+ref+`"`, "paymentMethod", `"`+sim.MethodTimeoutAfterSuccess+`"`))
	if r.Status != http.StatusAccepted {
		e.T.Fatalf("lost answer: %d %s", r.Status, r.Body)
	}
	id := r.JSON(e.T)["paymentId"].(string)
	if s := e.PaymentState(id); s != payments.StateUnknown {
		e.T.Fatalf("payment %s", s)
	}
	return id
}

// keySnapshot is what any write about a payment's key or state changes.
func (e *env) keySnapshot(paymentID string) string {
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
		e.Count(`outbox_events WHERE aggregate_id = $1`, paymentID), e.lookups(paymentID))
}

// lookups is how many lookups reached the payment's charge at the simulator.
func (e *env) lookups(paymentID string) int {
	n := 0
	for _, c := range e.ChargesFor(paymentID) {
		n += c.LookupCount
	}
	return n
}

// A signed payment_intent.succeeded resolves a payment whose outcome was
// unknown, by asking the provider: COMPLETED with its one charge, and the
// stored answer is what a retry of the client gets.
func TestStripeWebhookResolvesAnUnknownPayment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, servicetest.WithProviderTimeout(300*time.Millisecond), withStripeWebhooks())
	id := e.unknownPayment("k-lost", "inv-1")

	got := e.deliver(stripeEvent("evt_1", "payment_intent.succeeded", intentOf(id, "succeeded")))
	if got.Outcome != webhooks.OutcomeApplied || got.Resolution != payments.OutcomeSucceeded {
		t.Fatalf("answer %+v", got)
	}
	e.AssertChargedOnce(id)
	if n := e.lookups(id); n != 1 {
		t.Errorf("lookups %d, want 1: the provider, not the event, decides", n)
	}
	stored := e.Get(secretA, "/payments/"+id).JSON(t)
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
	e := newEnv(t, servicetest.WithProviderTimeout(300*time.Millisecond), withStripeWebhooks())
	pay := e.Pay(sim.MethodRefundTimeoutAfterSuccess, "inv-1")
	first := e.Refund(pay, "r-1", `{"amount":"4.00"}`)
	if first.Status != http.StatusAccepted {
		t.Fatalf("lost answer: %d %s", first.Status, first.Body)
	}
	refundID := first.JSON(t)["refundId"].(string)
	got := e.deliver(stripeEvent("evt_r1", "refund.updated",
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
	if g := e.Get(secretA, "/payments/"+pay).JSON(t); g["refundedAmount"] != "4.00" {
		t.Errorf("refundedAmount %v", g["refundedAmount"])
	}
}

// A webhook only ever looks up: a payment sent, but never seen by the
// provider (its owner died before the call), is not sent by the webhook,
// whatever the event claims. The reconciler, which may send, completes it.
func TestStripeWebhookNeverSends(t *testing.T) {
	t.Parallel()
	e := newEnv(t, servicetest.WithHooks(payments.Hooks{AfterRequestSent: servicetest.CrashOnce()}), withStripeWebhooks())
	if r := e.Post("k-crash", servicetest.Body()); r.Status != http.StatusInternalServerError {
		t.Fatalf("the crashed request answered %d %s", r.Status, r.Body)
	}
	id := e.OnlyPaymentID()
	e.Clock.Advance(e.Config.Lease + time.Second)

	got := e.deliver(stripeEvent("evt_1", "payment_intent.succeeded", intentOf(id, "succeeded")))
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
	e := newEnv(t, withStripeWebhooks())
	r := e.Post("k-refused", servicetest.Body("paymentMethod", `"`+sim.MethodUnavailable+`"`))
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("refused: %d %s", r.Status, r.Body)
	}
	id := e.OnlyPaymentID()
	got := e.deliver(stripeEvent("evt_1", "payment_intent.succeeded", intentOf(id, "succeeded")))
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
	e := newEnv(t, servicetest.WithProviderTimeout(300*time.Millisecond), withStripeWebhooks(), servicetest.WithHooks(payments.Hooks{
		AfterProviderAnswer: func(context.Context, string) error {
			if failing.Load() {
				return servicetest.ErrCrash
			}
			return nil
		},
	}))
	id := e.unknownPayment("k-lost", "inv-1")
	event := stripeEvent("evt_1", "payment_intent.succeeded", intentOf(id, "succeeded"))
	failing.Store(true)
	if r := e.webhook(event, webhookSecret, e.Clock.Now()); r.Status != http.StatusInternalServerError || r.JSON(t)["code"] != "INTERNAL" {
		t.Fatalf("failed handling: %d %s", r.Status, r.Body)
	}
	failing.Store(false)
	if n := e.Count("inbox"); n != 0 {
		t.Fatalf("a failed event was recorded (%d rows)", n)
	}
	e.Clock.Advance(e.Config.Lease + time.Second) // the dead owner's lease runs out
	if got := e.deliver(event); got.Outcome != webhooks.OutcomeApplied || got.Resolution != payments.OutcomeSucceeded {
		t.Errorf("redelivery: %+v", got)
	}
	e.AssertChargedOnce(id)
}

// A delivery of an event already handled answers 200 and does nothing:
// here the first delivery left the payment unresolved (the provider's
// lookups fail at first), so handling it again would look up again.
func TestStripeWebhookDuplicateDeliveryChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, servicetest.WithHooks(payments.Hooks{AfterProviderAnswer: servicetest.CrashOnce()}), withStripeWebhooks())
	e.Post("k-flaky", servicetest.Body("paymentMethod", `"`+sim.MethodLookupFlaky+`"`)) // charged, answer lost
	id := e.OnlyPaymentID()
	e.Clock.Advance(e.Config.Lease + time.Second)

	event := stripeEvent("evt_dup", "payment_intent.succeeded", intentOf(id, "succeeded"))
	if got := e.deliver(event); got.Outcome != webhooks.OutcomeApplied || got.Resolution != idempotency.OutcomeUnresolved {
		t.Fatalf("first delivery: %+v", got)
	}
	before := e.keySnapshot(id)
	e.Clock.Advance(time.Minute) // Stripe delivers again later, signed afresh
	if got := e.deliver(event); got.Outcome != webhooks.OutcomeDuplicate {
		t.Errorf("second delivery: %+v", got)
	}
	if after := e.keySnapshot(id); after != before {
		t.Errorf("a duplicate delivery changed the payment:\n before %s\n after  %s", before, after)
	}
	if n := e.Count(`inbox WHERE consumer = $1`, webhooks.Consumer); n != 1 {
		t.Errorf("inbox rows %d, want 1", n)
	}
	// An ignored event is recorded once too.
	other := stripeEvent("evt_other", "customer.created", `{"id":"cus_1","object":"customer"}`)
	for i, want := range []string{webhooks.OutcomeIgnored, webhooks.OutcomeDuplicate} {
		if got := e.deliver(other); got.Outcome != want {
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
	e := newEnv(t, withStripeWebhooks())
	id := e.Pay("pm_card_visa", "inv-1") // final: nothing to do about it
	before := e.keySnapshot(id)
	for _, c := range []struct {
		event      []byte
		resolution string
	}{
		{stripeEvent("evt_unknown", "payment_intent.succeeded", intentOf("pay_unknown", "succeeded")), webhooks.ResolutionUnknownResource},
		{stripeEvent("evt_final", "payment_intent.payment_failed", intentOf(id, "requires_payment_method")), idempotency.OutcomeFinal},
		{stripeEvent("evt_foreign", "payment_intent.succeeded",
			`{"id":"pi_other","object":"payment_intent","metadata":{"order":"42"}}`), ""},
		{stripeEvent("evt_refunded", "charge.refunded", `{"id":"ch_1","object":"charge","payment_intent":"pi_3Test"}`), ""},
		{stripeEvent("evt_customer", "customer.created", `{"id":"cus_1","object":"customer"}`), ""},
	} {
		if got := e.deliver(c.event); got.Outcome != webhooks.OutcomeIgnored || got.Resolution != c.resolution {
			t.Errorf("%s: %+v, want ignored (%q)", c.event, got, c.resolution)
		}
	}
	if n := e.Count(`inbox WHERE consumer = $1 AND outcome = 'ignored'`, webhooks.Consumer); n != 5 {
		t.Errorf("ignored inbox rows %d, want 5", n)
	}
	if after := e.keySnapshot(id); after != before {
		t.Errorf("an event changed a final payment:\n before %s\n after  %s", before, after)
	}
	if n := e.Count("payments"); n != 1 {
		t.Errorf("payments %d", n)
	}
	// A signed event of a type we act on whose object is not what it says
	// is recorded as rejected, for a person, and answered 200.
	if got := e.deliver(stripeEvent("evt_bad", "payment_intent.succeeded", `{"id":"ch_1","object":"charge"}`)); got.Outcome != webhooks.OutcomeRejected {
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
	e := newEnv(t, servicetest.WithProviderTimeout(300*time.Millisecond), withStripeWebhooks())
	id := e.unknownPayment("k-lost", "inv-1")
	before := e.keySnapshot(id)
	event := stripeEvent("evt_1", "payment_intent.succeeded", intentOf(id, "succeeded"))
	now := e.Clock.Now()
	valid := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: event, Secret: webhookSecret, Timestamp: now}).Header
	for name, send := range map[string]func() response{
		"stale timestamp": func() response { return e.webhook(event, webhookSecret, now.Add(-webhooks.Tolerance-time.Second)) },
		"another secret":  func() response { return e.webhook(event, "whsec_someone_else", now) },
		"no signature": func() response {
			return e.Do("POST", "/webhooks/stripe", event, map[string]string{"Content-Type": "application/json"})
		},
		"tampered body": func() response {
			tampered := bytes.Replace(event, []byte(`"succeeded"`), []byte(`"succeeded" `), 1)
			return e.Do("POST", "/webhooks/stripe", tampered, map[string]string{"Stripe-Signature": valid})
		},
		"garbled header": func() response {
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
	if after := e.keySnapshot(id); after != before {
		t.Errorf("a refused delivery changed the payment:\n before %s\n after  %s", before, after)
	}
	if r := e.webhook(event, webhookSecret, now.Add(-webhooks.Tolerance+time.Second)); r.Status != http.StatusOK {
		t.Errorf("inside the tolerance: %d %s", r.Status, r.Body)
	}
	if s := e.PaymentState(id); s != payments.StateCompleted {
		t.Errorf("state %s after the valid delivery", s)
	}
}

// Without a secret the route does not exist.
func TestStripeWebhooksNeedASecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.webhook(stripeEvent("evt_1", "customer.created", `{"id":"cus_1","object":"customer"}`), webhookSecret, e.Clock.Now())
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
	e := newEnv(t, servicetest.WithProviderTimeout(300*time.Millisecond), withStripeWebhooks(),
		servicetest.WithProvider(func(p provider.Provider) provider.Provider {
			return &slowLookups{Provider: p, delay: 50 * time.Millisecond}
		}))
	wins := map[string]int{}
	for i := range 15 {
		id := e.unknownPayment(fmt.Sprint("k-", i), fmt.Sprint("inv-", i))
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
			answer = e.deliver(stripeEvent(fmt.Sprint("evt_", i), "payment_intent.succeeded", intentOf(id, "succeeded")))
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
