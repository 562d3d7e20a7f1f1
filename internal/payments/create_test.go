package payments_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

func TestCreateAnswers201WithLocationAndStoresEverything(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	r := e.Post("k-1", servicetest.Body())
	if r.Status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
	p := r.JSON(t)
	id, _ := p["paymentId"].(string)
	if !strings.HasPrefix(id, "pay_") || p["status"] != "SUCCEEDED" || p["amount"] != "10.00" ||
		p["currency"] != "EUR" || p["channel"] != "web" || p["providerReference"] == nil {
		t.Fatalf("unexpected payment: %s", r.Body)
	}
	if got := r.Header.Get("Location"); got != "/payments/"+id {
		t.Errorf("Location = %q", got)
	}
	if r.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first answer must not be marked replayed")
	}
	if n := len(e.ChargesFor(id)); n != 1 {
		t.Errorf("provider charges = %d, want 1", n)
	}
	// The state machine was walked, and every step recorded, as the
	// payment's audit trail reads it.
	var steps []string
	rows, err := e.Pool.Query(context.Background(),
		`SELECT COALESCE(from_state, '-') || '>' || to_state FROM (`+payments.AuditSQL+`) a ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, s)
	}
	want := "->RECEIVED,RECEIVED>PROVIDER_REQUEST_SENT,PROVIDER_REQUEST_SENT>COMPLETED"
	if got := strings.Join(steps, ","); got != want {
		t.Errorf("transitions %s, want %s", got, want)
	}
	if n := e.Count(`outbox_events WHERE aggregate_id = $1 AND event_type IN ('PaymentCreated', 'PaymentSucceeded')`, id); n != 2 {
		t.Errorf("outbox events = %d, want PaymentCreated and PaymentSucceeded", n)
	}
	// GET answers the current representation.
	g := e.Get(servicetest.SecretA, "/payments/"+id)
	if g.Status != http.StatusOK || !bytes.Equal(bytes.TrimSpace(g.Body), r.Body) {
		t.Errorf("GET: %d %s\nwant %s", g.Status, g.Body, r.Body)
	}
	if e.Metric("paymentsapi_idempotency_claims_total", nil) != 1 {
		t.Errorf("claims metric did not move")
	}
	if e.Metric("paymentsapi_provider_call_duration_seconds", map[string]string{"operation": "charge", "outcome": "succeeded"}) != 1 {
		t.Errorf("provider latency metric did not move")
	}
}

func TestReplayIsByteIdenticalAndMarked(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"pm_card_visa", "pm_card_chargeDeclined"} {
		t.Run(method, func(t *testing.T) {
			e := servicetest.New(t)
			first := e.Post("k-replay", servicetest.Body("paymentMethod", `"`+method+`"`))
			e.Clock.Advance(time.Hour) // a replay is not re-rendered: timestamps stay
			second := e.Post("k-replay", servicetest.Body("paymentMethod", `"`+method+`"`))
			if first.Status != second.Status || !bytes.Equal(first.Body, second.Body) {
				t.Fatalf("replay differs:\n%d %s\n%d %s", first.Status, first.Body, second.Status, second.Body)
			}
			for _, h := range []string{"Content-Type", "Location"} {
				if first.Header.Get(h) != second.Header.Get(h) {
					t.Errorf("%s: %q then %q", h, first.Header.Get(h), second.Header.Get(h))
				}
			}
			if first.Header.Get("Idempotent-Replayed") != "" || second.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("Idempotent-Replayed: first %q, replay %q", first.Header.Get("Idempotent-Replayed"), second.Header.Get("Idempotent-Replayed"))
			}
			if n := e.Count("payments"); n != 1 {
				t.Errorf("payments = %d, want 1", n)
			}
			if len(e.Sim.Charges()) != 1 || e.Sim.Charges()[0].RequestCount != 1 {
				t.Errorf("the replay reached the provider: %+v", e.Sim.Charges())
			}
			if e.Metric("paymentsapi_idempotency_replays_total", nil) != 1 {
				t.Errorf("replay metric did not move")
			}
		})
	}
}

func TestDeclineIsA402ProblemStoredForReplay(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	r := e.Post("k-decline", servicetest.Body("paymentMethod", `"pm_card_insufficientFunds"`))
	if r.Status != http.StatusPaymentRequired || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("got %d %s %s", r.Status, r.Header.Get("Content-Type"), r.Body)
	}
	p := r.JSON(t)
	if p["code"] != "PAYMENT_DECLINED" || p["declineCode"] != "insufficient_funds" || p["paymentId"] == nil {
		t.Fatalf("problem %s", r.Body)
	}
	g := e.Get(servicetest.SecretA, "/payments/"+p["paymentId"].(string)).JSON(t)
	if g["status"] != "DECLINED" || g["declineCode"] != "insufficient_funds" {
		t.Errorf("GET after decline: %v", g)
	}
	// A declined payment frees its merchant reference for a new attempt.
	again := e.Post("k-decline-2", servicetest.Body())
	if again.Status != http.StatusCreated {
		t.Errorf("new key after a decline: %d %s", again.Status, again.Body)
	}
}

// Fifty clients send the same key and body at once while the provider is
// slow: one payment, one charge, one PaymentCreated; everyone else hears 409
// with Retry-After, or the replay if they arrive after the original finished.
func TestConcurrentSameKeyChargesOnce(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithSlowDelay(time.Second))
	const n = 50
	var (
		wg        sync.WaitGroup
		start     = make(chan struct{})
		responses = make([]servicetest.Response, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			responses[i] = e.Post("k-race", servicetest.Body("paymentMethod", `"pm_sim_slow"`))
		}()
	}
	close(start)
	wg.Wait()

	var created, conflicts, replays int
	for _, r := range responses {
		switch {
		case r.Status == http.StatusCreated && r.Header.Get("Idempotent-Replayed") == "true":
			replays++
		case r.Status == http.StatusCreated:
			created++
		case r.Status == http.StatusConflict:
			conflicts++
			if r.JSON(t)["code"] != "IDEMPOTENCY_KEY_IN_USE" || r.Header.Get("Retry-After") == "" {
				t.Errorf("409 without its code or Retry-After: %v %s", r.Header, r.Body)
			}
		default:
			t.Errorf("unexpected answer %d %s", r.Status, r.Body)
		}
	}
	if created != 1 || conflicts+replays != n-1 {
		t.Errorf("created %d, conflicts %d, replays %d", created, conflicts, replays)
	}
	if conflicts == 0 {
		t.Errorf("no request overlapped the slow original: the test proved nothing")
	}
	if got := e.Count("payments"); got != 1 {
		t.Errorf("payments = %d, want 1", got)
	}
	if got := e.Count("outbox_events WHERE event_type = 'PaymentCreated'"); got != 1 {
		t.Errorf("PaymentCreated events = %d, want 1", got)
	}
	charges := e.Sim.Charges()
	if len(charges) != 1 || charges[0].RequestCount != 1 {
		t.Errorf("provider charges %+v, want one, asked once", charges)
	}
	if got := e.Metric("paymentsapi_idempotency_conflicts_total", map[string]string{"reason": "in_flight"}); int(got) != conflicts {
		t.Errorf("in-flight conflict metric %v, want %d", got, conflicts)
	}
}

func TestEquivalentBodiesReplay(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	original := e.Post("k-eq", servicetest.Body())
	if original.Status != http.StatusCreated {
		t.Fatalf("original: %d %s", original.Status, original.Body)
	}
	equivalent := map[string]string{
		"field order":          `{"paymentMethod":"pm_card_visa","merchantReference":"invoice-7781","currency":"EUR","amount":"10.00","accountId":"acc_1"}`,
		"white space":          "{\n  \"accountId\" : \"acc_1\",\t\"amount\":\"10.00\", \"currency\":\"EUR\",\"merchantReference\":\"invoice-7781\",\"paymentMethod\":\"pm_card_visa\"\n}\n",
		"amount 10":            servicetest.Body("amount", `"10"`),
		"amount 10.0":          servicetest.Body("amount", `"10.0"`),
		"lower-case currency":  servicetest.Body("currency", `"eur"`),
		"explicit web channel": servicetest.Body("channel", `"web"`),
		"empty description":    servicetest.Body("description", `""`),
	}
	for name, b := range equivalent {
		t.Run(name, func(t *testing.T) {
			r := e.Post("k-eq", b)
			if r.Status != original.Status || !bytes.Equal(r.Body, original.Body) || r.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("not a replay: %d %s", r.Status, r.Body)
			}
		})
	}
	if n := e.Count("payments"); n != 1 {
		t.Errorf("payments = %d", n)
	}
}

// differentBodies each differ from servicetest.Body() in one semantic field.
var differentBodies = map[string]string{
	"amount":      servicetest.Body("amount", `"10.01"`),
	"currency":    servicetest.Body("currency", `"USD"`),
	"account":     servicetest.Body("accountId", `"acc_2"`),
	"reference":   servicetest.Body("merchantReference", `"invoice-7782"`),
	"method":      servicetest.Body("paymentMethod", `"pm_card_mastercard"`),
	"description": servicetest.Body("description", `"gift"`),
	"channel":     servicetest.Body("channel", `"mobile"`),
}

func TestDifferentBodyWithSameKeyIs422InFlightAndAfter(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithSlowDelay(2*time.Second))
	slow := servicetest.Body("paymentMethod", `"pm_sim_slow"`)
	done := make(chan servicetest.Response, 1)
	go func() { done <- e.Post("k-reuse", slow) }()
	servicetest.WaitFor(t, func() bool { return e.Count("payments WHERE state = 'PROVIDER_REQUEST_SENT'") == 1 })

	check := func(phase string) {
		for name, b := range differentBodies {
			b = strings.Replace(b, `"pm_card_visa"`, `"pm_sim_slow"`, 1)
			r := e.Post("k-reuse", b)
			if r.Status != http.StatusUnprocessableEntity || r.JSON(t)["code"] != "IDEMPOTENCY_KEY_REUSED" {
				t.Errorf("%s, different %s: %d %s", phase, name, r.Status, r.Body)
			}
		}
	}
	check("in flight")
	if r := <-done; r.Status != http.StatusCreated {
		t.Fatalf("original: %d %s", r.Status, r.Body)
	}
	check("after completion")
	if n := e.Count("payments"); n != 1 {
		t.Errorf("payments = %d, want 1", n)
	}
	if got := e.Metric("paymentsapi_idempotency_conflicts_total", map[string]string{"reason": "mismatch"}); int(got) != 2*len(differentBodies) {
		t.Errorf("mismatch metric = %v", got)
	}
}

func TestTenantsHaveSeparateKeysAndPayments(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	a := e.PostAs(servicetest.SecretA, "shared-key", servicetest.Body())
	b := e.PostAs(servicetest.SecretB, "shared-key", servicetest.Body())
	if a.Status != http.StatusCreated || b.Status != http.StatusCreated {
		t.Fatalf("A %d %s, B %d %s", a.Status, a.Body, b.Status, b.Body)
	}
	if b.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("tenant B got tenant A's replay")
	}
	idA, idB := a.JSON(t)["paymentId"].(string), b.JSON(t)["paymentId"].(string)
	if idA == idB {
		t.Fatalf("same payment for both tenants")
	}
	if r := e.Get(servicetest.SecretB, "/payments/"+idA); r.Status != http.StatusNotFound || r.JSON(t)["code"] != "NOT_FOUND" {
		t.Errorf("B reading A's payment: %d %s", r.Status, r.Body)
	}
	list := e.Get(servicetest.SecretB, "/payments").JSON(t)
	if items := list["items"].([]any); len(items) != 1 || items[0].(map[string]any)["paymentId"] != idB {
		t.Errorf("B's list: %v", list)
	}
	// B's different command under A's key is B's business alone.
	if r := e.PostAs(servicetest.SecretB, "shared-key", servicetest.Body("amount", `"99.00"`)); r.Status != http.StatusUnprocessableEntity {
		t.Errorf("B reusing its own key: %d", r.Status)
	}
}

func TestRejectedRequestsWriteNothingAndLeaveTheKeyUsable(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	big := `{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"r","paymentMethod":"pm_card_visa","description":"` +
		strings.Repeat("x", 17<<10) + `"}`
	cases := []struct {
		name   string
		header map[string]string
		body   string
		status int
		code   string
	}{
		{"no auth", map[string]string{"Content-Type": "application/json", "Idempotency-Key": "k"}, servicetest.Body(), 401, "UNAUTHORIZED"},
		{"unknown secret", map[string]string{"Authorization": "Bearer sk_nope", "Content-Type": "application/json", "Idempotency-Key": "k"}, servicetest.Body(), 401, "UNAUTHORIZED"},
		{"no key", map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "application/json"}, servicetest.Body(), 400, "IDEMPOTENCY_KEY_MISSING"},
		{"long key", map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "application/json", "Idempotency-Key": strings.Repeat("k", 256)}, servicetest.Body(), 400, "IDEMPOTENCY_KEY_INVALID"},
		{"wrong media type", map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "text/plain", "Idempotency-Key": "k"}, servicetest.Body(), 415, "UNSUPPORTED_MEDIA_TYPE"},
		{"too large", map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "application/json", "Idempotency-Key": "k"}, big, 413, "PAYLOAD_TOO_LARGE"},
		{"malformed", map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "application/json", "Idempotency-Key": "k"}, `{"accountId":`, 400, "MALFORMED_JSON"},
		{"two objects", map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "application/json", "Idempotency-Key": "k"}, servicetest.Body() + servicetest.Body(), 400, "MALFORMED_JSON"},
		{"amount as number", map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "application/json", "Idempotency-Key": "k"}, servicetest.Body("amount", "10.00"), 400, "VALIDATION_FAILED"},
		{"unknown field", map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "application/json", "Idempotency-Key": "k"}, servicetest.Body("extra", `"x"`), 400, "VALIDATION_FAILED"},
		{"too many decimals", map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "application/json", "Idempotency-Key": "k"}, servicetest.Body("amount", `"10.001"`), 400, "VALIDATION_FAILED"},
		{"JPY fraction", map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "application/json", "Idempotency-Key": "k"}, servicetest.Body("currency", `"JPY"`), 400, "VALIDATION_FAILED"},
		{"zero", map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "application/json", "Idempotency-Key": "k"}, servicetest.Body("amount", `"0.00"`), 400, "VALIDATION_FAILED"},
		{"missing fields", map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "application/json", "Idempotency-Key": "k"}, `{}`, 400, "VALIDATION_FAILED"},
		{"bad channel", map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": "application/json", "Idempotency-Key": "k"}, servicetest.Body("channel", `"fax"`), 400, "VALIDATION_FAILED"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.Do("POST", "/payments", []byte(c.body), c.header)
			if r.Status != c.status || r.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("got %d %s %s", r.Status, r.Header.Get("Content-Type"), r.Body)
			}
			p := r.JSON(t)
			if p["code"] != c.code || p["type"] == "" || p["title"] == "" || p["detail"] == "" || int(p["status"].(float64)) != c.status {
				t.Errorf("problem %s", r.Body)
			}
		})
	}
	for _, table := range []string{"payments", "idempotency_keys", "outbox_events", "payment_transitions"} {
		if n := e.Count(table); n != 0 {
			t.Errorf("%s has %d rows after rejected requests", table, n)
		}
	}
	if r := e.Post("k", servicetest.Body()); r.Status != http.StatusCreated {
		t.Errorf("the key is not usable after rejections: %d %s", r.Status, r.Body)
	}
}

func TestValidationNamesEveryField(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	r := e.Post("k", `{"amount":"-1","currency":"XYZ"}`)
	p := r.JSON(t)
	fields := map[string]bool{}
	for _, fe := range p["errors"].([]any) {
		fields[fe.(map[string]any)["field"].(string)] = true
	}
	for _, f := range []string{"accountId", "merchantReference", "paymentMethod", "currency"} {
		if !fields[f] {
			t.Errorf("no error for %s: %s", f, r.Body)
		}
	}
}

func TestDuplicateMerchantReferenceUnderANewKey(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	first := e.Post("k-1", servicetest.Body())
	second := e.Post("k-2", servicetest.Body("amount", `"12.00"`))
	if second.Status != http.StatusConflict {
		t.Fatalf("got %d %s", second.Status, second.Body)
	}
	p := second.JSON(t)
	if p["code"] != "DUPLICATE_MERCHANT_REFERENCE" || p["paymentId"] != first.JSON(t)["paymentId"] {
		t.Errorf("problem %s", second.Body)
	}
	if n := e.Count("idempotency_keys"); n != 1 {
		t.Errorf("the refused key was stored: %d keys", n)
	}
	// Another account may use the same reference.
	if r := e.Post("k-3", servicetest.Body("accountId", `"acc_2"`)); r.Status != http.StatusCreated {
		t.Errorf("other account: %d %s", r.Status, r.Body)
	}
}

// flakyProvider refuses the first n charges, as a provider answering 503 would.
type flakyProvider struct {
	provider.Provider
	mu      sync.Mutex
	refuse  int
	charges []string
}

func (f *flakyProvider) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Charge, error) {
	f.mu.Lock()
	f.charges = append(f.charges, req.IdempotencyKey)
	refuse := f.refuse > 0
	f.refuse--
	f.mu.Unlock()
	if refuse {
		return provider.Charge{}, fmt.Errorf("injected: %w", provider.ErrUnavailable)
	}
	return f.Provider.Charge(ctx, req)
}

func TestProviderUnavailableIs503AndTheRetryResumesTheSamePayment(t *testing.T) {
	t.Parallel()
	flaky := &flakyProvider{refuse: 1}
	e := servicetest.New(t, servicetest.WithProvider(func(p provider.Provider) provider.Provider { flaky.Provider = p; return flaky }))
	first := e.Post("k-503", servicetest.Body())
	if first.Status != http.StatusServiceUnavailable || first.JSON(t)["code"] != "PROVIDER_UNAVAILABLE" || first.Header.Get("Retry-After") == "" {
		t.Fatalf("got %d %v %s", first.Status, first.Header, first.Body)
	}
	// The problem names the payment the retry resumes.
	var id string
	if err := e.Pool.QueryRow(t.Context(), `SELECT id FROM payments`).Scan(&id); err != nil || first.JSON(t)["paymentId"] != id {
		t.Fatalf("503 names payment %v, want %s (%v)", first.JSON(t)["paymentId"], id, err)
	}
	if n := e.Count("payments WHERE state = 'FAILED_RETRYABLE'"); n != 1 {
		t.Fatalf("payment not FAILED_RETRYABLE")
	}
	second := e.Post("k-503", servicetest.Body())
	if second.Status != http.StatusCreated || second.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry: %d %s", second.Status, second.Body)
	}
	if n := e.Count("payments"); n != 1 {
		t.Errorf("payments = %d, want 1", n)
	}
	if len(flaky.charges) != 2 || flaky.charges[0] != flaky.charges[1] {
		t.Errorf("provider keys %v: want the same derived key twice", flaky.charges)
	}
	if n := len(e.Sim.Charges()); n != 1 {
		t.Errorf("charges = %d", n)
	}
}

func TestSimulatorUnavailableMethodIs503(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	r := e.Post("k", servicetest.Body("paymentMethod", `"pm_sim_unavailable"`))
	if r.Status != http.StatusServiceUnavailable || r.JSON(t)["code"] != "PROVIDER_UNAVAILABLE" {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
	g := e.Get(servicetest.SecretA, "/payments?accountId=acc_1").JSON(t)
	if s := g["items"].([]any)[0].(map[string]any)["status"]; s != "FAILED" {
		t.Errorf("status %v, want FAILED", s)
	}
}

func TestLostProviderAnswerIs202ThenResolvedOnRetry(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithProviderTimeout(300*time.Millisecond))
	first := e.Post("k-lost", servicetest.Body("paymentMethod", `"pm_sim_timeout_after_success"`))
	if first.Status != http.StatusAccepted || first.Header.Get("Retry-After") == "" || first.Header.Get("Location") == "" {
		t.Fatalf("got %d %v %s", first.Status, first.Header, first.Body)
	}
	p := first.JSON(t)
	if p["status"] != "PROCESSING" {
		t.Fatalf("status %v", p["status"])
	}
	if n := e.Count("payments WHERE state = 'UNKNOWN_REQUIRES_RECOVERY'"); n != 1 {
		t.Fatalf("payment not UNKNOWN_REQUIRES_RECOVERY")
	}
	second := e.Post("k-lost", servicetest.Body("paymentMethod", `"pm_sim_timeout_after_success"`))
	if second.Status != http.StatusCreated || second.JSON(t)["status"] != "SUCCEEDED" {
		t.Fatalf("retry: %d %s", second.Status, second.Body)
	}
	third := e.Post("k-lost", servicetest.Body("paymentMethod", `"pm_sim_timeout_after_success"`))
	if !bytes.Equal(third.Body, second.Body) || third.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the resolved answer is not replayed: %s", third.Body)
	}
	charges := e.ChargesFor(p["paymentId"].(string))
	if len(charges) != 1 || charges[0].RequestCount != 1 {
		t.Errorf("charges %+v: the retry must look up, not charge again", charges)
	}
}

func TestListIsNewestFirstAndPaginated(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	var ids []string
	for i := range 5 {
		r := e.Post(fmt.Sprintf("k-%d", i), servicetest.Body("merchantReference", fmt.Sprintf(`"inv-%d"`, i)))
		ids = append(ids, r.JSON(t)["paymentId"].(string))
		e.Clock.Advance(time.Second)
	}
	e.Post("k-other", servicetest.Body("accountId", `"acc_9"`))
	var got []string
	cursor := ""
	for pages := 0; pages < 10; pages++ {
		path := "/payments?accountId=acc_1&limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := e.Get(servicetest.SecretA, path)
		if r.Status != http.StatusOK {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		page := r.JSON(t)
		for _, it := range page["items"].([]any) {
			got = append(got, it.(map[string]any)["paymentId"].(string))
		}
		next, ok := page["nextCursor"].(string)
		if !ok {
			break
		}
		cursor = next
	}
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pages gave %v, want %v", got, want)
	}
	for _, bad := range []string{"limit=0", "limit=101", "limit=x", "cursor=nope"} {
		if r := e.Get(servicetest.SecretA, "/payments?"+bad); r.Status != http.StatusBadRequest || r.JSON(t)["code"] != "VALIDATION_FAILED" {
			t.Errorf("%s: %d %s", bad, r.Status, r.Body)
		}
	}
}

// Each key that reaches its final answer is counted once, by operation and
// outcome, whoever finished it; a replay is not a new result.
func TestOperationResultsAreCountedOncePerKey(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	for range 2 {
		if r := e.Post("k-count", servicetest.Body()); r.Status != http.StatusCreated {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	}
	if r := e.Post("k-count-declined", servicetest.Body("paymentMethod", `"pm_card_declined"`, "merchantReference", `"inv-declined"`)); r.Status != http.StatusPaymentRequired {
		t.Fatalf("declined: %d %s", r.Status, r.Body)
	}
	for outcome, want := range map[string]float64{"succeeded": 1, "declined": 1} {
		if n := e.Metric("paymentsapi_operation_results_total", map[string]string{"operation": "create_payment", "outcome": outcome}); n != want {
			t.Errorf("payments %s: %v, want %v", outcome, n, want)
		}
	}
}
