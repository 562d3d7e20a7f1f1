package app_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/backoff"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// A crash at every boundary of the state machine, resolved by a retry or by
// the reconciler: one charge, and the right final answer.
func TestCrashAtEveryBoundaryRecoversWithOneCharge(t *testing.T) {
	t.Parallel()
	boundaries := map[string]func(h *payments.Hooks){
		"after claim":           func(h *payments.Hooks) { h.AfterClaim = servicetest.CrashOnce() },
		"after request sent":    func(h *payments.Hooks) { h.AfterRequestSent = servicetest.CrashOnce() },
		"after provider answer": func(h *payments.Hooks) { h.AfterProviderAnswer = servicetest.CrashOnce() },
	}
	for name, install := range boundaries {
		for _, resolver := range []string{"retry", "reconciler"} {
			t.Run(name+"/"+resolver, func(t *testing.T) {
				t.Parallel()
				var hooks payments.Hooks
				install(&hooks)
				e := servicetest.New(t, servicetest.WithHooks(hooks))

				if r := e.Post("k-crash", servicetest.Body()); r.Status != http.StatusInternalServerError {
					t.Fatalf("the crashed request answered %d %s", r.Status, r.Body)
				}
				id := e.OnlyPaymentID()
				// The dead owner's lease still runs: a retry is told to wait.
				if r := e.Post("k-crash", servicetest.Body()); r.Status != http.StatusConflict {
					t.Fatalf("retry within the lease: %d %s", r.Status, r.Body)
				}
				e.Clock.Advance(e.Config.Lease + time.Second)

				if resolver == "reconciler" {
					stats, err := e.Core.Reconciler.RunOnce(context.Background(), 10)
					if err != nil {
						t.Fatal(err)
					}
					// After the claim too: its transaction moved the
					// payment on to sent (providerflow.SendOnClaim), so the
					// reconciler looks it up, finds nothing, and sends it
					// inside the key window.
					if stats[payments.OutcomeSucceeded] != 1 {
						t.Fatalf("reconciler: %v", stats)
					}
				}
				final := e.Post("k-crash", servicetest.Body())
				if final.Status != http.StatusCreated || final.JSON(t)["status"] != "SUCCEEDED" {
					t.Fatalf("final answer %d %s", final.Status, final.Body)
				}
				again := e.Post("k-crash", servicetest.Body())
				if !bytes.Equal(again.Body, final.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
					t.Errorf("final answer not replayed: %s", again.Body)
				}
				e.AssertChargedOnce(id)
				// Every step is recorded, the claim's two included.
				for _, move := range [][2]string{{"", "RECEIVED"}, {"RECEIVED", "PROVIDER_REQUEST_SENT"}} {
					if n := e.Count(`payment_transitions WHERE payment_id = $1 AND COALESCE(from_state, '') = $2 AND to_state = $3`,
						id, move[0], move[1]); n != 1 {
						t.Errorf("transitions %s -> %s: %d, want 1", move[0], move[1], n)
					}
				}
			})
		}
	}
}

// Many retries find the same stale key at once: exactly one takes it over.
func TestConcurrentTakeoversExactlyOneWins(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithHooks(payments.Hooks{AfterProviderAnswer: servicetest.CrashOnce()}))
	e.Post("k-stale", servicetest.Body())
	id := e.OnlyPaymentID()
	e.Clock.Advance(e.Config.Lease + time.Second)

	// The mechanism itself: concurrent TakeOver calls on the same seen token.
	rec, err := idempotency.LoadByResource(context.Background(), e.Pool, idempotency.Resource{Type: payments.ResourceType, ID: id})
	if err != nil {
		t.Fatal(err)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, ok, err := idempotency.TakeOver(context.Background(), e.Pool, rec.ID, rec.FencingToken, e.Clock.Now(), time.Second)
			if err != nil {
				t.Error(err)
			}
			if ok {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d concurrent takeovers won, want exactly 1", wins.Load())
	}

	// Through the API: the winner's short lease has run out; twenty retries
	// race for the key again.
	e.Clock.Advance(2 * time.Second)
	statuses := make([]int, 20)
	for i := range statuses {
		wg.Go(func() { statuses[i] = e.Post("k-stale", servicetest.Body()).Status })
	}
	wg.Wait()
	var created int
	for _, s := range statuses {
		switch s {
		case http.StatusCreated:
			created++
		case http.StatusConflict:
		default:
			t.Errorf("unexpected status %d", s)
		}
	}
	if created == 0 {
		t.Errorf("nobody finished the payment: %v", statuses)
	}
	if got := e.Metric("paymentsapi_idempotency_takeovers_total", nil); got != 1 {
		t.Errorf("takeovers through the API = %v, want 1", got)
	}
	e.AssertChargedOnce(id)
}

// The original pauses after the provider answered; its lease runs out and a
// retry completes the payment. When the original wakes, its writes are
// refused by the fencing token, and it answers with what the key recorded.
func TestFencedOutOriginalCannotOverwriteTheNewOwner(t *testing.T) {
	t.Parallel()
	paused, resume := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	e := servicetest.New(t, servicetest.WithHooks(payments.Hooks{AfterProviderAnswer: func(context.Context, string) error {
		if calls.Add(1) == 1 {
			close(paused)
			<-resume
		}
		return nil
	}}), servicetest.WithProviderTimeout(2*time.Second))
	original := make(chan servicetest.Response, 1)
	go func() { original <- e.Post("k-fence", servicetest.Body("paymentMethod", `"pm_card_chargeDeclined"`)) }()
	<-paused
	id := e.OnlyPaymentID()

	e.Clock.Advance(e.Config.Lease + time.Second)
	retry := e.Post("k-fence", servicetest.Body("paymentMethod", `"pm_card_chargeDeclined"`))
	if retry.Status != http.StatusPaymentRequired {
		t.Fatalf("retry after takeover: %d %s", retry.Status, retry.Body)
	}
	close(resume)
	late := <-original
	if late.Status != retry.Status || !bytes.Equal(late.Body, retry.Body) {
		t.Errorf("the fenced-out original answered %d %s, want the new owner's %s", late.Status, late.Body, retry.Body)
	}
	if n := e.Count(`payment_transitions WHERE payment_id = $1 AND to_state = 'DECLINED'`, id); n != 1 {
		t.Errorf("transitions to DECLINED = %d, want 1: the late owner wrote", n)
	}
	if n := e.Count(`outbox_events WHERE event_type = 'PaymentDeclined'`); n != 1 {
		t.Errorf("PaymentDeclined events = %d, want 1", n)
	}
	var token int64
	if err := e.Pool.QueryRow(context.Background(), `SELECT fencing_token FROM idempotency_keys`).Scan(&token); err != nil || token != 2 {
		t.Errorf("fencing token %d, %v: want 2 (one takeover)", token, err)
	}
}

func TestTimeoutAfterSuccessIsResolvedByTheReconciler(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithProviderTimeout(300*time.Millisecond))
	first := e.Post("k-lost", servicetest.Body("paymentMethod", `"pm_sim_timeout_after_success"`))
	if first.Status != http.StatusAccepted {
		t.Fatalf("got %d %s", first.Status, first.Body)
	}
	id := e.OnlyPaymentID()
	stats, err := e.Core.Reconciler.RunOnce(context.Background(), 10)
	if err != nil || stats[payments.OutcomeSucceeded] != 1 {
		t.Fatalf("reconciler: %v %v", stats, err)
	}
	g := e.Get(servicetest.SecretA, "/payments/"+id).JSON(t)
	if g["status"] != "SUCCEEDED" || g["providerReference"] == nil {
		t.Errorf("after reconciliation: %v", g)
	}
	retry := e.Post("k-lost", servicetest.Body("paymentMethod", `"pm_sim_timeout_after_success"`))
	if retry.Status != http.StatusCreated || retry.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the reconciler's answer is not replayed: %d %s", retry.Status, retry.Body)
	}
	e.AssertChargedOnce(id)
	if e.Metric("paymentsapi_reconciler_outcomes_total", map[string]string{"outcome": "succeeded"}) != 1 {
		t.Errorf("reconciler metric did not move")
	}
}

func TestFlakyLookupsResolveAfterBackoff(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithHooks(payments.Hooks{AfterProviderAnswer: servicetest.CrashOnce()}),
		servicetest.WithRecovery(idempotency.RecoveryPolicy{Backoff: backoff.Policy{Base: time.Minute, Max: time.Hour}, MaxAttempts: 10}))
	e.Post("k-flaky", servicetest.Body("paymentMethod", `"pm_sim_lookup_flaky"`)) // charged, answer lost
	id := e.OnlyPaymentID()
	e.Clock.Advance(e.Config.Lease + time.Second)

	reconcile := func() idempotency.RecoveryStats {
		t.Helper()
		stats, err := e.Core.Reconciler.RunOnce(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		return stats
	}
	for attempt := 1; attempt <= 2; attempt++ { // the simulator fails the first two lookups
		if stats := reconcile(); stats[idempotency.OutcomeUnresolved] != 1 {
			t.Fatalf("attempt %d: %v", attempt, stats)
		}
		if stats := reconcile(); len(stats) != 0 {
			t.Fatalf("attempt %d: retried before its backoff: %v", attempt, stats)
		}
		if s := e.PaymentState(id); s != payments.StateUnknown {
			t.Fatalf("state %s", s)
		}
		e.Clock.Advance(time.Duration(attempt) * time.Minute) // past the jittered backoff
	}
	if stats := reconcile(); stats[payments.OutcomeSucceeded] != 1 {
		t.Fatalf("after backoff: %v", stats)
	}
	e.AssertChargedOnce(id)
	if c := e.ChargesFor(id); c[0].LookupCount != 3 {
		t.Errorf("lookups %d, want 3", c[0].LookupCount)
	}
}

// Past the provider's key window a create with the same key would be a new
// charge: the reconciler only looks up, and after its last attempt marks the
// payment for a person, keeping it PROCESSING.
func TestPastTheProviderKeyWindowOnlyLookUp(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithHooks(payments.Hooks{AfterRequestSent: servicetest.CrashOnce()}),
		servicetest.WithRecovery(idempotency.RecoveryPolicy{Backoff: backoff.Policy{Base: time.Second, Max: time.Second}, MaxAttempts: 3}))
	e.Post("k-old", servicetest.Body())
	id := e.OnlyPaymentID()
	e.Clock.Advance(e.Config.ProviderKeyWindow + time.Hour)

	outcomes := map[string]int{}
	for range 5 {
		stats, err := e.Core.Reconciler.RunOnce(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range stats {
			outcomes[k] += v
		}
		e.Clock.Advance(2 * time.Second)
	}
	if outcomes[idempotency.OutcomeUnresolved] != 2 || outcomes[idempotency.OutcomeManualReview] != 1 {
		t.Errorf("outcomes %v: want 2 unresolved then manual review, then nothing", outcomes)
	}
	if n := len(e.Sim.Charges()); n != 0 {
		t.Errorf("the reconciler created %d charges past the key window", n)
	}
	if n := e.Count(`idempotency_keys WHERE manual_review_at IS NOT NULL AND recovery_attempts = 3`); n != 1 {
		t.Errorf("payment not marked for manual review")
	}
	if g := e.Get(servicetest.SecretA, "/payments/"+id).JSON(t); g["status"] != "PROCESSING" {
		t.Errorf("status %v, want PROCESSING", g["status"])
	}
	// A client retry past the window may not create either.
	if r := e.Post("k-old", servicetest.Body()); r.Status != http.StatusAccepted {
		t.Errorf("retry past the window: %d %s", r.Status, r.Body)
	}
	if n := len(e.Sim.Charges()); n != 0 {
		t.Errorf("the retry created a charge past the key window")
	}
	if e.Metric("paymentsapi_reconciler_outcomes_total", map[string]string{"outcome": "manual_review"}) != 1 {
		t.Errorf("manual review metric did not move")
	}
	if e.Metric("paymentsapi_payments_manual_review", nil) != 1 || e.Metric("paymentsapi_payments_unknown_outcome", nil) != 0 {
		t.Errorf("manual review gauge %v, unknown gauge %v", e.Metric("paymentsapi_payments_manual_review", nil),
			e.Metric("paymentsapi_payments_unknown_outcome", nil))
	}
}

func TestTwoReconcilersResolveEachPaymentOnce(t *testing.T) {
	t.Parallel()
	var crashed sync.Map // the original of every payment dies after the provider answered
	e := servicetest.New(t, servicetest.WithHooks(payments.Hooks{AfterProviderAnswer: func(_ context.Context, id string) error {
		if _, seen := crashed.LoadOrStore(id, true); !seen {
			return servicetest.ErrCrash
		}
		return nil
	}}))
	const n = 30
	for i := range n {
		e.Post(fmt.Sprintf("k-%d", i), servicetest.Body("merchantReference", fmt.Sprintf(`"inv-%d"`, i)))
	}
	reconcilers := []*idempotency.Reconciler{e.Core.Reconciler}
	for range 3 {
		_, core, _ := e.Instance()
		reconcilers = append(reconcilers, core.Reconciler)
	}
	e.Clock.Advance(e.Config.Lease + time.Second)

	var wg sync.WaitGroup
	results := make([]idempotency.RecoveryStats, len(reconcilers))
	start := make(chan struct{})
	for i, rc := range reconcilers {
		wg.Go(func() {
			<-start
			stats, err := rc.RunOnce(context.Background(), 100)
			if err != nil {
				t.Error(err)
			}
			results[i] = stats
		})
	}
	close(start)
	wg.Wait()
	total := 0
	for _, r := range results {
		total += r[payments.OutcomeSucceeded]
		if len(r) > 1 {
			t.Errorf("a reconciler had other outcomes: %v", r)
		}
	}
	if total != n {
		t.Errorf("resolved %d (%v), want %d", total, results, n)
	}
	// Each payment was claimed by exactly one reconciler: one takeover each.
	if got := e.Count(`idempotency_keys WHERE fencing_token <> 2`); got != 0 {
		t.Errorf("%d keys were claimed more than once", got)
	}
	if got := e.Count(`payment_transitions WHERE to_state = 'COMPLETED'`); got != n {
		t.Errorf("transitions to COMPLETED = %d, want %d", got, n)
	}
	if got := e.Count(`outbox_events WHERE event_type = 'PaymentSucceeded'`); got != n {
		t.Errorf("PaymentSucceeded events = %d, want %d", got, n)
	}
	for _, c := range e.Sim.Charges() {
		if c.RequestCount != 1 {
			t.Errorf("charge %s created by %d requests", c.ID, c.RequestCount)
		}
	}
}

// A duplicate sent to another instance with Prefer: wait is held until the
// original finishes (LISTEN/NOTIFY), then gets its answer byte for byte.
func TestPreferWaitOnAnotherInstanceGetsTheOriginalsAnswer(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithSlowDelay(time.Second))
	otherURL, _, otherReg := e.Instance()
	slow := servicetest.Body("paymentMethod", `"pm_sim_slow"`)
	original := make(chan servicetest.Response, 1)
	go func() { original <- e.Post("k-wait", slow) }()
	servicetest.WaitFor(t, func() bool { return e.Count("payments WHERE state = 'PROVIDER_REQUEST_SENT'") == 1 })

	other := &servicetest.Env{T: t, URL: otherURL}
	noWait := other.Post("k-wait", slow)
	if noWait.Status != http.StatusConflict {
		t.Fatalf("without Prefer: %d %s", noWait.Status, noWait.Body)
	}
	waited := other.Do("POST", "/payments", []byte(slow), map[string]string{
		"Authorization": "Bearer " + servicetest.SecretA, "Idempotency-Key": "k-wait",
		"Content-Type": "application/json", "Prefer": "wait=5",
	})
	first := <-original
	if first.Status != http.StatusCreated {
		t.Fatalf("original: %d %s", first.Status, first.Body)
	}
	if waited.Status != first.Status || !bytes.Equal(waited.Body, first.Body) || waited.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("waited duplicate answered %d %s, want the original's %s", waited.Status, waited.Body, first.Body)
	}
	// It was woken by the original's NOTIFY, not by its own time running out.
	other.Registry = otherReg
	if n := other.Metric("paymentsapi_idempotency_waits_total", map[string]string{"result": "notified"}); n < 1 {
		t.Errorf("the wait was not ended by a notification (notified = %v, timeout = %v)", n,
			other.Metric("paymentsapi_idempotency_waits_total", map[string]string{"result": "timeout"}))
	}
}

// A duplicate that waits longer than the original takes is answered 409
// when its wait runs out.
func TestPreferWaitRunsOut(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithSlowDelay(3*time.Second))
	slow := servicetest.Body("paymentMethod", `"pm_sim_slow"`)
	original := make(chan servicetest.Response, 1)
	go func() { original <- e.Post("k-wait", slow) }()
	defer func() { <-original }()
	servicetest.WaitFor(t, func() bool { return e.Count("payments WHERE state = 'PROVIDER_REQUEST_SENT'") == 1 })
	r := e.Do("POST", "/payments", []byte(slow), map[string]string{
		"Authorization": "Bearer " + servicetest.SecretA, "Idempotency-Key": "k-wait",
		"Content-Type": "application/json", "Prefer": "wait=1",
	})
	if r.Status != http.StatusConflict || r.JSON(t)["code"] != "IDEMPOTENCY_KEY_IN_USE" {
		t.Errorf("got %d %s", r.Status, r.Body)
	}
	if n := e.Metric("paymentsapi_idempotency_waits_total", map[string]string{"result": "timeout"}); n != 1 {
		t.Errorf("waits that timed out = %v, want 1: Prefer: wait was ignored", n)
	}
}

// A retry that takes over a payment the provider may have charged asks
// first; if the provider cannot say, the answer is 202 and the payment is
// left to the reconciler, never charged again.
func TestTakeoverWhenTheProviderCannotSayAnswers202(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithHooks(payments.Hooks{AfterProviderAnswer: servicetest.CrashOnce()}))
	flaky := servicetest.Body("paymentMethod", `"pm_sim_lookup_flaky"`)
	e.Post("k-unsure", flaky)
	id := e.OnlyPaymentID()
	e.Clock.Advance(e.Config.Lease + time.Second)

	r := e.Post("k-unsure", flaky)
	if r.Status != http.StatusAccepted || r.JSON(t)["status"] != "PROCESSING" || r.Header.Get("Location") != "/payments/"+id {
		t.Fatalf("got %d %v %s", r.Status, r.Header, r.Body)
	}
	if s := e.PaymentState(id); s != payments.StateUnknown {
		t.Errorf("state %s, want UNKNOWN_REQUIRES_RECOVERY", s)
	}
	e.Post("k-unsure", flaky) // second failing lookup: 202 again
	if final := e.Post("k-unsure", flaky); final.Status != http.StatusCreated {
		t.Fatalf("third retry: %d %s", final.Status, final.Body)
	}
	e.AssertChargedOnce(id)
}

func TestStateGaugesMove(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithSlowDelay(time.Second), servicetest.WithProviderTimeout(300*time.Millisecond))
	gauge := func(name string) float64 { t.Helper(); return e.Metric(name, nil) }

	slow := make(chan servicetest.Response, 1)
	go func() {
		slow <- e.Post("k-slow", servicetest.Body("paymentMethod", `"pm_sim_slow"`, "merchantReference", `"slow"`))
	}()
	servicetest.WaitFor(t, func() bool { return e.Count("payments WHERE state = 'PROVIDER_REQUEST_SENT'") == 1 })
	e.Clock.Advance(10 * time.Second)
	if gauge("paymentsapi_idempotency_in_flight_keys") != 1 || gauge("paymentsapi_idempotency_unfinished_keys") != 1 ||
		gauge("paymentsapi_idempotency_oldest_unfinished_key_age_seconds") != 10 {
		t.Errorf("in flight: %v %v %v", gauge("paymentsapi_idempotency_in_flight_keys"),
			gauge("paymentsapi_idempotency_unfinished_keys"), gauge("paymentsapi_idempotency_oldest_unfinished_key_age_seconds"))
	}
	// The slow charge outlives the provider timeout: its outcome is unknown.
	if r := <-slow; r.Status != http.StatusAccepted {
		t.Fatalf("slow payment: %d %s", r.Status, r.Body)
	}
	if gauge("paymentsapi_payments_unknown_outcome") != 1 || gauge("paymentsapi_idempotency_in_flight_keys") != 0 ||
		gauge("paymentsapi_idempotency_unfinished_keys") != 1 {
		t.Errorf("unknown: %v, in flight %v", gauge("paymentsapi_payments_unknown_outcome"), gauge("paymentsapi_idempotency_in_flight_keys"))
	}
	if _, err := e.Core.Reconciler.RunOnce(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if gauge("paymentsapi_payments_unknown_outcome") != 0 || gauge("paymentsapi_idempotency_unfinished_keys") != 0 ||
		gauge("paymentsapi_idempotency_oldest_unfinished_key_age_seconds") != 0 {
		t.Errorf("after reconciliation: unknown %v, unfinished %v", gauge("paymentsapi_payments_unknown_outcome"),
			gauge("paymentsapi_idempotency_unfinished_keys"))
	}
}

// slowLookupProvider makes every lookup take 25 s of the fake clock, and
// records how much lease its caller still holds when it charges.
type slowLookupProvider struct {
	provider.Provider
	e         *servicetest.Env
	mu        sync.Mutex
	remaining []time.Duration
}

func (p *slowLookupProvider) Lookup(ctx context.Context, l provider.ChargeLookup) (provider.Charge, error) {
	p.e.Clock.Advance(25 * time.Second)
	return p.Provider.Lookup(ctx, l)
}

func (p *slowLookupProvider) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Charge, error) {
	var until time.Time
	if err := p.e.Pool.QueryRow(ctx, `SELECT lease_expires_at FROM idempotency_keys`).Scan(&until); err == nil {
		p.mu.Lock()
		p.remaining = append(p.remaining, until.Sub(p.e.Clock.Now()))
		p.mu.Unlock()
	}
	return p.Provider.Charge(ctx, req)
}

// A takeover may look up, then charge: the owner renews its lease in
// between, so the two calls never outlive it.
func TestOwnerRenewsItsLeaseBeforeCharging(t *testing.T) {
	t.Parallel()
	slow := &slowLookupProvider{}
	e := servicetest.New(t, servicetest.WithHooks(payments.Hooks{AfterRequestSent: servicetest.CrashOnce()}),
		servicetest.WithProvider(func(p provider.Provider) provider.Provider { slow.Provider = p; return slow }))
	slow.e = e
	e.Post("k-renew", servicetest.Body()) // dies after PROVIDER_REQUEST_SENT, before the provider call
	e.Clock.Advance(e.Config.Lease + time.Second)
	if r := e.Post("k-renew", servicetest.Body()); r.Status != http.StatusCreated {
		t.Fatalf("takeover: %d %s", r.Status, r.Body)
	}
	if len(slow.remaining) != 1 || slow.remaining[0] != e.Config.Lease {
		t.Errorf("lease left when charging: %v, want a full %s", slow.remaining, e.Config.Lease)
	}
	e.AssertChargedOnce(e.OnlyPaymentID())
}

// The fenced-out owner's late write arrives while the new owner is still in
// flight, in the same state: only the fencing token can refuse it.
func TestLateWriteInTheSameStateIsRefusedByTheToken(t *testing.T) {
	t.Parallel()
	pauseA, resumeA := make(chan struct{}), make(chan struct{})
	pauseB, resumeB := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	e := servicetest.New(t, servicetest.WithHooks(payments.Hooks{AfterProviderAnswer: func(context.Context, string) error {
		switch calls.Add(1) {
		case 1: // the original, after the provider charged
			close(pauseA)
			<-resumeA
		case 2: // the new owner, after its lookup found the charge
			close(pauseB)
			<-resumeB
		}
		return nil
	}}))
	a := make(chan servicetest.Response, 1)
	go func() { a <- e.Post("k-token", servicetest.Body()) }()
	<-pauseA
	id := e.OnlyPaymentID()
	e.Clock.Advance(e.Config.Lease + time.Second)
	b := make(chan servicetest.Response, 1)
	go func() { b <- e.Post("k-token", servicetest.Body()) }()
	<-pauseB // B owns the key (token 2); the payment is still PROVIDER_REQUEST_SENT

	close(resumeA)
	late := <-a
	if late.Status != http.StatusConflict {
		t.Errorf("the fenced-out owner answered %d %s: its write went through", late.Status, late.Body)
	}
	if s := e.PaymentState(id); s != payments.StateProviderRequestSent {
		t.Errorf("the fenced-out owner moved the payment to %s", s)
	}
	close(resumeB)
	if r := <-b; r.Status != http.StatusCreated {
		t.Fatalf("the new owner: %d %s", r.Status, r.Body)
	}
	e.AssertChargedOnce(id)
}

// A retry of a key whose owner died is told, in whole seconds rounded up,
// to come back when the owner's lease runs out and the key can be taken
// over, once the owner has been silent for longer than a provider call and
// the engine's RetryAfter; before that, to come back at once. A retry
// that waited (Prefer: wait) and was not woken is told the same.
func TestARetryOfADeadOwnersKeyIsToldWhenItsLeaseEnds(t *testing.T) {
	t.Parallel()
	// A lease of 30 s, PROVIDER_TIMEOUT 5 s, RETRY_AFTER 1 s.
	e := servicetest.New(t, servicetest.WithHooks(payments.Hooks{AfterRequestSent: servicetest.CrashOnce()}))
	if r := e.Post("k-dead", servicetest.Body()); r.Status != http.StatusInternalServerError {
		t.Fatalf("the crashed request answered %d %s", r.Status, r.Body)
	}
	retry := func(header ...string) string {
		t.Helper()
		h := servicetest.CreateHeaders(servicetest.SecretA, "k-dead")
		for i := 0; i+1 < len(header); i += 2 {
			h[header[i]] = header[i+1]
		}
		r := e.Do("POST", "/payments", []byte(servicetest.Body()), h)
		if r.Status != http.StatusConflict || r.JSON(t)["code"] != "IDEMPOTENCY_KEY_IN_USE" {
			t.Fatalf("retry within the lease: %d %s", r.Status, r.Body)
		}
		return r.Header.Get("Retry-After")
	}
	if got := retry(); got != "1" {
		t.Errorf("at once: Retry-After %q, want 1 (the owner was heard from a moment ago)", got)
	}
	e.Clock.Advance(6 * time.Second)
	if got := retry(); got != "1" {
		t.Errorf("after 6 s: Retry-After %q, want 1 (silent no longer than a call and RetryAfter)", got)
	}
	e.Clock.Advance(7*time.Second + 500*time.Millisecond) // 16.5 s of the lease left
	if got := retry(); got != "17" {
		t.Errorf("after 13.5 s: Retry-After %q, want 17 (the lease's 16.5 s left, rounded up)", got)
	}
	if got := retry("Prefer", "wait=1"); got != "17" {
		t.Errorf("after 13.5 s and a wait nothing woke: Retry-After %q, want 17", got)
	}
	e.Clock.Advance(17 * time.Second) // as told: the key is taken over
	if r := e.Post("k-dead", servicetest.Body()); r.Status != http.StatusCreated {
		t.Errorf("the retry that came back when told: %d %s", r.Status, r.Body)
	}
}
