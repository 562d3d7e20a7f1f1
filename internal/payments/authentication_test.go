package payments_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// shopURL is the merchant's page the customer goes back to.
const shopURL = "https://shop.example/checkout/done?order=7781"

// publicURL is where the tests' customers would reach the service: the
// simulator sends them there, and the tests follow by hand to the
// instance they choose.
const publicURL = "https://pay.example"

// newAuthEnv is an environment whose payments may wait for their
// customer; with webhooks, the simulator announces the customers' choices
// to the service's POST /webhooks/stripe.
func newAuthEnv(t *testing.T, webhooks bool, opts ...servicetest.Option) *servicetest.Env {
	t.Helper()
	opts = append(opts, servicetest.WithConfig(func(c *app.Config) { c.PublicURL = publicURL }))
	if webhooks {
		opts = append(opts, servicetest.WithStripeWebhooks())
	}
	e := servicetest.New(t, opts...)
	if webhooks {
		e.Sim.SetWebhook(sim.WebhookTarget{URL: e.URL + "/webhooks/stripe", Secret: servicetest.StripeWebhookSecret, Clock: e.Clock})
	}
	return e
}

// authBody is a payment with method that returns to shopURL.
func authBody(reference, method string) string {
	return servicetest.Body("merchantReference", `"`+reference+`"`, "paymentMethod", `"`+method+`"`, "returnUrl", `"`+shopURL+`"`)
}

// requiresAction creates a payment that waits for its customer and returns
// its id and its challenge's URL.
func requiresAction(t *testing.T, e *servicetest.Env, key, body string) (id, challenge string, first servicetest.Response) {
	t.Helper()
	r := e.Post(key, body)
	if r.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	p := r.JSON(t)
	next, _ := p["nextAction"].(map[string]any)
	if p["status"] != "REQUIRES_ACTION" || next["type"] != "redirect" || !strings.Contains(fmt.Sprint(next["url"]), "/challenge/") {
		t.Fatalf("want REQUIRES_ACTION with a redirect to the challenge: %s", r.Body)
	}
	return p["paymentId"].(string), next["url"].(string), r
}

// noRedirects is a client that hands back the redirects it is sent.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// choose presses Approve or Fail (action) on the challenge page, as the
// customer's browser would, and returns where the customer is sent.
func choose(t *testing.T, challenge, action string) string {
	t.Helper()
	resp, err := noRedirects.PostForm(challenge, url.Values{"action": {action}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("challenge %s: %d", action, resp.StatusCode)
	}
	return resp.Header.Get("Location")
}

// comeBack is the customer's browser arriving at the payment's return
// route on the instance at base, with query (which the service must not
// trust); it returns the answer's status and Location.
func comeBack(t testing.TB, base, id, query string) (int, string) {
	t.Helper()
	u := base + payments.ReturnPath(id)
	if query != "" {
		u += "?" + query
	}
	resp, err := noRedirects.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// assertSettledOnce checks that the payment left REQUIRES_ACTION exactly
// once, to want, with one event of wantEvent after its
// PaymentRequiresAction, and that its create key still answers the
// original bytes.
func assertSettledOnce(t *testing.T, e *servicetest.Env, id string, want payments.State, wantEvent string) {
	t.Helper()
	if s := e.PaymentState(id); s != want {
		t.Errorf("payment %s, want %s", s, want)
	}
	if n := e.Count(`payment_transitions WHERE payment_id = $1 AND from_state = 'REQUIRES_ACTION'`, id); n != 1 {
		t.Errorf("moves out of REQUIRES_ACTION = %d, want 1", n)
	}
	var types []string
	rows, err := e.Pool.Query(context.Background(), `SELECT event_type FROM outbox_events WHERE aggregate_id = $1 ORDER BY seq`, id)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var typ string
		if err := rows.Scan(&typ); err != nil {
			t.Fatal(err)
		}
		types = append(types, typ)
	}
	if got, w := strings.Join(types, ","), "PaymentCreated,PaymentRequiresAction,"+wantEvent; got != w {
		t.Errorf("events %s, want %s", got, w)
	}
	if len(e.ChargesFor(id)) != 1 || e.ChargesFor(id)[0].RequestCount != 1 {
		t.Errorf("provider charges %+v: want one, asked for once", e.ChargesFor(id))
	}
}

// A payment whose customer must authenticate answers 201 REQUIRES_ACTION
// with where to send the customer; a retry of its key replays those bytes
// whatever the payment became, while GET shows it as it now stands.
func TestAPaymentThatNeedsAuthenticationAnswers201RequiresActionAndItsKeyReplaysIt(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, false)
	id, challenge, first := requiresAction(t, e, "k-3ds", authBody("inv-3ds", sim.MethodThreeDSecureRequired))
	if first.JSON(t)["returnUrl"] != shopURL {
		t.Errorf("returnUrl: %s", first.Body)
	}
	if got := choose(t, challenge, "approve"); got != publicURL+payments.ReturnPath(id) {
		t.Errorf("the simulator sends the customer to %q, want the service's return route", got)
	}
	// Approved at the provider, not yet known here: nothing settles it
	// but a road, and a replay is the key's answer, not a road.
	replay := e.Post("k-3ds", authBody("inv-3ds", sim.MethodThreeDSecureRequired))
	if replay.Status != http.StatusCreated || !bytes.Equal(replay.Body, first.Body) || replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay before the return: %d %s", replay.Status, replay.Body)
	}
	if status, _ := comeBack(t, e.URL, id, ""); status != http.StatusSeeOther {
		t.Fatalf("return: %d", status)
	}
	if got := e.Get(servicetest.SecretA, "/payments/"+id).JSON(t); got["status"] != "SUCCEEDED" || got["nextAction"] != nil {
		t.Errorf("GET after the return: %v", got)
	}
	replay = e.Post("k-3ds", authBody("inv-3ds", sim.MethodThreeDSecureRequired))
	if replay.Status != http.StatusCreated || !bytes.Equal(replay.Body, first.Body) {
		t.Errorf("replay after the outcome: %d %s, want the original bytes %s", replay.Status, replay.Body, first.Body)
	}
	// The returnUrl is part of the command.
	other := e.Post("k-3ds", servicetest.Body("merchantReference", `"inv-3ds"`, "paymentMethod", `"`+sim.MethodThreeDSecureRequired+`"`,
		"returnUrl", `"https://shop.example/other"`))
	if other.Status != http.StatusUnprocessableEntity || !strings.Contains(string(other.Body), "IDEMPOTENCY_KEY_REUSED") {
		t.Errorf("another returnUrl under the key: %d %s", other.Status, other.Body)
	}
	assertSettledOnce(t, e, id, payments.StateCompleted, "PaymentSucceeded")
}

// The customer's return alone settles the payment as the provider says,
// whatever its query string claims, and sends the customer on to the
// returnUrl with the payment's id.
func TestTheCustomersReturnAloneSettlesThePaymentAsTheProviderSays(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, false)
	id, challenge, _ := requiresAction(t, e, "k-fail", authBody("inv-fail", sim.MethodThreeDSecureFail))
	choose(t, challenge, "approve") // this method fails whatever is pressed
	status, location := comeBack(t, e.URL, id, "status=succeeded&paymentId=pay_other")
	if want := "https://shop.example/checkout/done?order=7781&paymentId=" + id; status != http.StatusSeeOther || location != want {
		t.Errorf("return: %d to %q, want 303 to %q", status, location, want)
	}
	got := e.Get(servicetest.SecretA, "/payments/"+id).JSON(t)
	if got["status"] != "DECLINED" || got["declineCode"] != payments.DeclineAuthenticationFailed {
		t.Errorf("payment after a failed authentication: %v", got)
	}
	// A second return finds it settled and changes nothing.
	if status, _ := comeBack(t, e.URL, id, ""); status != http.StatusSeeOther {
		t.Errorf("second return: %d", status)
	}
	assertSettledOnce(t, e, id, payments.StateDeclined, "PaymentDeclined")
	if status, _ := comeBack(t, e.URL, "pay_nobody", ""); status != http.StatusNotFound {
		t.Errorf("return of no payment: %d, want 404", status)
	}
}

// The provider's webhook alone (the customer never comes back) settles
// the payment: the simulator announces the choice to POST
// /webhooks/stripe, which resolves the payment's authentication.
func TestTheProvidersWebhookAloneSettlesThePayment(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, true)
	id, challenge, _ := requiresAction(t, e, "k-hook", authBody("inv-hook", sim.MethodThreeDSecureRequired))
	choose(t, challenge, "approve") // the simulator announces before it redirects
	assertSettledOnce(t, e, id, payments.StateCompleted, "PaymentSucceeded")
	if n := e.Count(`inbox WHERE consumer = 'stripe-webhooks' AND outcome = 'applied'`); n != 1 {
		t.Errorf("applied webhook events = %d, want 1", n)
	}
}

// The reconciler alone (no return, no webhook) finds the outcome when it
// looks at the payment's authentication on its schedule.
func TestTheReconcilerAloneSettlesThePayment(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, false)
	id, challenge, _ := requiresAction(t, e, "k-look", authBody("inv-look", sim.MethodThreeDSecureRequired))
	e.Reconcile() // not due yet
	if s := e.PaymentState(id); s != payments.StateRequiresAction {
		t.Fatalf("payment %s before the customer chose", s)
	}
	choose(t, challenge, "approve")
	e.Clock.Advance(payments.DefaultAuthenticationTimeout / 6)
	e.Reconcile()
	assertSettledOnce(t, e, id, payments.StateCompleted, "PaymentSucceeded")
	if n := e.Count(`idempotency_keys WHERE resource_type = $1 AND resource_id = $2 AND response_status = 200`,
		payments.ResourceAuthentication, id); n != 1 {
		t.Errorf("the authentication's key is not finished")
	}
}

// The three roads at once, each several times, on real goroutines: the
// outcome is written once, with one event.
func TestTheThreeRoadsRacingSettleThePaymentOnce(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, false, servicetest.WithStripeWebhooks())
	id, challenge, _ := requiresAction(t, e, "k-race", authBody("inv-race", sim.MethodThreeDSecureRequired))
	choose(t, challenge, "approve") // no webhook target: the test delivers the events
	e.Clock.Advance(payments.DefaultAuthenticationTimeout / 6)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			if status, _ := comeBack(t, e.URL, id, ""); status != http.StatusSeeOther {
				t.Errorf("return: %d", status)
			}
		})
		wg.Go(func() {
			ev := servicetest.StripeEvent(fmt.Sprintf("evt_race_%d", i), "payment_intent.succeeded", servicetest.IntentOf(id, "succeeded"))
			if r := e.Webhook(ev, servicetest.StripeWebhookSecret, e.Clock.Now()); r.Status != http.StatusOK {
				t.Errorf("webhook: %d %s", r.Status, r.Body)
			}
		})
		wg.Go(func() {
			if _, err := e.Core.Reconciler.RunOnce(context.Background(), 10); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	e.Reconcile() // whatever a road left, the reconciler closes
	assertSettledOnce(t, e, id, payments.StateCompleted, "PaymentSucceeded")
}

// A customer who never authenticates: after AUTHENTICATION_TIMEOUT the
// reconciler cancels the charge at the provider, then the payment; the
// challenge pressed after that charges nothing.
func TestAnAbandonedAuthenticationIsCanceledAtTheProviderFirst(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, false)
	id, challenge, _ := requiresAction(t, e, "k-gone", authBody("inv-gone", sim.MethodThreeDSecureRequired))
	for range 6 {
		e.Clock.Advance(payments.DefaultAuthenticationTimeout / 6)
		e.Reconcile()
	}
	got := e.Get(servicetest.SecretA, "/payments/"+id).JSON(t)
	if got["status"] != "CANCELED" || got["declineCode"] != payments.DeclineAuthenticationAbandoned {
		t.Fatalf("abandoned payment: %v", got)
	}
	choose(t, challenge, "approve")
	if c := e.ChargesFor(id); len(c) != 1 || c[0].Status != provider.StatusCanceled || c[0].AmountCapturedMinor != 0 {
		t.Errorf("the provider's charge after a late approval: %+v", c)
	}
	assertSettledOnce(t, e, id, payments.StateCanceled, "PaymentCanceled")
}

// Abandonment racing the customer's approval, on real goroutines, payment
// after payment: one outcome each, and never canceled while charged.
func TestAbandonmentRacingAnApprovalEndsOnceAndNeverCanceledWhileCharged(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, false)
	const n = 6
	ids, challenges := make([]string, n), make([]string, n)
	for i := range n {
		ids[i], challenges[i], _ = requiresAction(t, e, fmt.Sprintf("k-ab-%d", i), authBody(fmt.Sprintf("inv-ab-%d", i), sim.MethodThreeDSecureRequired))
	}
	e.Clock.Advance(payments.DefaultAuthenticationTimeout)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			choose(t, challenges[i], "approve")
			comeBack(t, e.URL, ids[i], "")
		})
	}
	wg.Go(func() {
		for range n {
			if _, err := e.Core.Reconciler.RunOnce(context.Background(), 2); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	e.Clock.Advance(time.Minute)
	e.Reconcile()
	won := map[payments.State]int{}
	for _, id := range ids {
		s := e.PaymentState(id)
		won[s]++
		charge := e.ChargesFor(id)[0]
		switch s {
		case payments.StateCompleted:
			assertSettledOnce(t, e, id, s, "PaymentSucceeded")
			if charge.Status != provider.StatusSucceeded {
				t.Errorf("%s succeeded, its charge is %s", id, charge.Status)
			}
		case payments.StateCanceled:
			assertSettledOnce(t, e, id, s, "PaymentCanceled")
			if charge.Status != provider.StatusCanceled || charge.AmountCapturedMinor != 0 {
				t.Errorf("%s canceled, its charge is %s (captured %d)", id, charge.Status, charge.AmountCapturedMinor)
			}
		default:
			t.Errorf("%s ended %s", id, s)
		}
	}
	t.Logf("outcomes: %v", won)
}

// approvesBeforeVoid is the customer approving at the worst moment: after
// the reconciler found the charge still waiting at the deadline, before its
// cancellation reaches the provider.
type approvesBeforeVoid struct {
	provider.Provider
	challenge atomic.Pointer[string]
	err       error
}

func (p *approvesBeforeVoid) Void(ctx context.Context, req provider.VoidRequest) (provider.Charge, error) {
	if c := p.challenge.Swap(nil); c != nil {
		resp, err := noRedirects.PostForm(*c, url.Values{"action": {"approve"}})
		if err == nil {
			resp.Body.Close()
		}
		p.err = err
	}
	return p.Provider.Void(ctx, req)
}

// The approval lands between the reconciler's look (still waiting, past
// the deadline) and its cancellation: the provider refuses to cancel a
// charge that succeeded, and the payment ends as the provider says, never
// canceled while charged.
func TestAnApprovalJustBeforeTheCancellationWins(t *testing.T) {
	t.Parallel()
	late := &approvesBeforeVoid{}
	e := newAuthEnv(t, false, servicetest.WithProvider(func(p provider.Provider) provider.Provider { late.Provider = p; return late }))
	id, challenge, _ := requiresAction(t, e, "k-late", authBody("inv-late", sim.MethodThreeDSecureRequired))
	late.challenge.Store(&challenge)
	e.Clock.Advance(payments.DefaultAuthenticationTimeout)
	e.Reconcile()
	if late.err != nil || late.challenge.Load() != nil {
		t.Fatalf("the customer's approval was not pressed before the cancellation: %v", late.err)
	}
	assertSettledOnce(t, e, id, payments.StateCompleted, "PaymentSucceeded")
	if c := e.ChargesFor(id); len(c) != 1 || c[0].Status != provider.StatusSucceeded {
		t.Errorf("the provider's charge: %+v", c)
	}
}

// losesFirstVoid loses the answer of the first cancellation and holds the
// request back until deliverLate: the provider processes it after the
// service has looked again.
type losesFirstVoid struct {
	provider.Provider
	mu   sync.Mutex
	held *provider.VoidRequest
}

func (p *losesFirstVoid) Void(ctx context.Context, req provider.VoidRequest) (provider.Charge, error) {
	p.mu.Lock()
	first := p.held == nil
	if first {
		p.held = &req
	}
	p.mu.Unlock()
	if first {
		return provider.Charge{}, fmt.Errorf("%w: the answer was lost", provider.ErrUnknownOutcome)
	}
	return p.Provider.Void(ctx, req)
}

func (p *losesFirstVoid) deliverLate(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	req := p.held
	p.mu.Unlock()
	if req == nil {
		t.Fatal("no cancellation was sent")
	}
	if _, err := p.Provider.Void(context.Background(), *req); err != nil {
		t.Logf("the late cancellation: %v", err)
	}
}

// A manual payment's abandonment sends its cancellation, whose answer is
// lost; the customer then approves, and every road sees the authorization
// before the cancellation reaches the provider. None may settle the
// payment REQUIRES_CAPTURE on it: the cancellation would then void it.
// The reconciler sends the cancellation again (one key), and the payment
// ends as the provider's last word says: CANCELED, its authorization
// voided, however late the first cancellation arrives.
func TestAnAuthorizationWithTheAbandonmentsCancellationOnItsWayIsNotSettled(t *testing.T) {
	t.Parallel()
	lost := &losesFirstVoid{}
	e := newAuthEnv(t, false, servicetest.WithStripeWebhooks(),
		servicetest.WithProvider(func(p provider.Provider) provider.Provider { lost.Provider = p; return lost }))
	body := strings.TrimSuffix(authBody("inv-lostvoid", sim.MethodThreeDSecureRequired), "}") + `,"captureMethod":"manual"}`
	id, challenge, _ := requiresAction(t, e, "k-lostvoid", body)
	e.Clock.Advance(payments.DefaultAuthenticationTimeout)
	e.Reconcile() // past the deadline: the cancellation is sent, its answer lost
	choose(t, challenge, "approve")
	comeBack(t, e.URL, id, "")
	ev := servicetest.StripeEvent("evt_lostvoid", "payment_intent.amount_capturable_updated", servicetest.IntentOf(id, "requires_capture"))
	if r := e.Webhook(ev, servicetest.StripeWebhookSecret, e.Clock.Now()); r.Status != http.StatusOK {
		t.Fatalf("webhook: %d %s", r.Status, r.Body)
	}
	if s := e.PaymentState(id); s != payments.StateRequiresAction {
		t.Fatalf("the return or the webhook settled the payment %s with a cancellation on its way", s)
	}
	e.Clock.Advance(time.Minute)
	e.Reconcile()
	lost.deliverLate(t)
	e.Clock.Advance(time.Minute)
	e.Reconcile()
	assertSettledOnce(t, e, id, payments.StateCanceled, "PaymentCanceled")
	if c := e.ChargesFor(id); len(c) != 1 || c[0].Status != provider.StatusCanceled || c[0].AmountCapturedMinor != 0 {
		t.Errorf("the provider's charge: %+v", c)
	}
}

// A manual payment whose customer authenticated is authorized
// (REQUIRES_CAPTURE), with its authorization's expiry scheduled.
func TestAnAuthenticatedManualPaymentWaitsForItsCapture(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, false)
	body := strings.TrimSuffix(authBody("inv-manual", sim.MethodThreeDSecureRequired), "}") + `,"captureMethod":"manual"}`
	id, challenge, _ := requiresAction(t, e, "k-manual", body)
	choose(t, challenge, "approve")
	comeBack(t, e.URL, id, "")
	got := e.Get(servicetest.SecretA, "/payments/"+id).JSON(t)
	if got["status"] != "REQUIRES_CAPTURE" || got["authorizationExpiresAt"] == nil {
		t.Errorf("authenticated manual payment: %v", got)
	}
	assertSettledOnce(t, e, id, payments.StateAuthorized, "PaymentAuthorized")
}

// Outside dev mode a returnUrl must be https; a malformed one is refused
// in any mode. Nothing is stored.
func TestAReturnURLMustBeHTTPSOutsideDevMode(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, false)
	for _, u := range []string{"http://shop.example/done", "ftp://shop.example", "/relative", "https://user:pw@shop.example/"} {
		r := e.Post("k-url", servicetest.Body("returnUrl", `"`+u+`"`))
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "returnUrl") {
			t.Errorf("returnUrl %q: %d %s", u, r.Status, r.Body)
		}
	}
	if n := e.Count("payments"); n != 0 {
		t.Errorf("payments stored: %d", n)
	}
}

// The return and the webhook land on two API instances at once: one
// outcome.
func TestTheReturnAndTheWebhookOnTwoInstancesSettleOnce(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, false, servicetest.WithStripeWebhooks())
	second, _, _ := e.Process() // a pool of its own, as another process has
	id, challenge, _ := requiresAction(t, e, "k-two", authBody("inv-two", sim.MethodThreeDSecureRequired))
	choose(t, challenge, "approve")
	var wg sync.WaitGroup
	wg.Go(func() { comeBack(t, second, id, "") })
	wg.Go(func() {
		ev := servicetest.StripeEvent("evt_two", "payment_intent.succeeded", servicetest.IntentOf(id, "succeeded"))
		if r := e.Webhook(ev, servicetest.StripeWebhookSecret, e.Clock.Now()); r.Status != http.StatusOK {
			t.Errorf("webhook: %d %s", r.Status, r.Body)
		}
	})
	wg.Wait()
	assertSettledOnce(t, e, id, payments.StateCompleted, "PaymentSucceeded")
}
