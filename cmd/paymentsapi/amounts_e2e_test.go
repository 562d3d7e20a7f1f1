package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
)

// stored counts what a request may have written: payments, refunds,
// captures and cancels, idempotency keys and outbox events.
type stored struct{ payments, refunds, actions, keys, events int }

func countStored(t *testing.T, databaseURL string) stored {
	t.Helper()
	ctx := context.Background()
	db, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	var s stored
	err = db.QueryRow(ctx, `SELECT (SELECT count(*) FROM payments), (SELECT count(*) FROM refunds),
		(SELECT count(*) FROM payment_actions), (SELECT count(*) FROM idempotency_keys), (SELECT count(*) FROM outbox_events)`).
		Scan(&s.payments, &s.refunds, &s.actions, &s.keys, &s.events)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// problemOf decodes a problem's code and detail.
func problemOf(r httpResult) (code, detail string) {
	var p struct{ Code, Detail string }
	_ = json.Unmarshal(r.body, &p)
	return p.Code, p.Detail
}

func amountsBody(amount, currency, reference, method, capture string) string {
	return `{"accountId":"acc_1","amount":"` + amount + `","currency":"` + currency + `","merchantReference":"` + reference +
		`","paymentMethod":"` + method + `","captureMethod":"` + capture + `"}`
}

// With the simulator playing Stripe's currency rules, an amount Stripe
// would refuse (BHD not ending in 0), of a payment, a refund or a capture,
// answers 400 AMOUNT_NOT_SUPPORTED_BY_PROVIDER saying what it would take,
// and stores nothing: no payment, refund or capture, no key, no event. The
// key is not used up. ISK travels in Stripe's unit: ISK 150 is 15000 to the
// simulator (which refuses a fraction of a krona, so sent unconverted it
// would not be charged), and answered as 150.
func TestAnAmountTheProviderWouldRefuseStoresNothing(t *testing.T) {
	t.Parallel()
	env := inputEnv(t, "PROVIDER_SIM_CURRENCY_RULES", "stripe")
	base, _, _ := startRecorded(t, env)
	post := func(path, key, body string) httpResult {
		t.Helper()
		return call(t, "POST", base+path, inputSecret, key, body)
	}
	refused := func(what string, r httpResult, before stored, detail string) {
		t.Helper()
		code, got := problemOf(r)
		if r.status != http.StatusBadRequest || code != "AMOUNT_NOT_SUPPORTED_BY_PROVIDER" || got != detail {
			t.Errorf("%s: %d %s; want 400 AMOUNT_NOT_SUPPORTED_BY_PROVIDER, %q", what, r.status, r.body, detail)
		}
		if after := countStored(t, env["DATABASE_URL"]); after != before {
			t.Errorf("%s stored something: %+v, then %+v", what, before, after)
		}
	}

	r := post("/payments", "bhd-1", amountsBody("1.234", "BHD", "inv-bhd", "pm_card_visa", "automatic"))
	refused("a payment of BHD 1.234", r, stored{}, "BHD card amounts must end in 0: 1.230 or 1.240, not 1.234")
	r = post("/payments", "bhd-1", amountsBody("1.230", "BHD", "inv-bhd", "pm_card_visa", "automatic"))
	var paid struct{ PaymentID, Amount, Status string }
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &paid) != nil || paid.Amount != "1.230" {
		t.Fatalf("BHD 1.230 under the same key: %d %s, want 201", r.status, r.body)
	}

	before := countStored(t, env["DATABASE_URL"])
	r = post("/payments/"+paid.PaymentID+"/refunds", "re-bhd", `{"amount":"0.005"}`)
	refused("a refund of BHD 0.005", r, before, "BHD card amounts must end in 0: 0.010, not 0.005")

	r = post("/payments", "bhd-held", amountsBody("2.000", "BHD", "inv-bhd-held", "pm_card_visa", "manual"))
	var held struct{ PaymentID string }
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &held) != nil {
		t.Fatalf("an authorization of BHD 2.000: %d %s", r.status, r.body)
	}
	before = countStored(t, env["DATABASE_URL"])
	r = post("/payments/"+held.PaymentID+"/capture", "cap-bhd", `{"amount":"1.001"}`)
	refused("a capture of BHD 1.001", r, before, "BHD card amounts must end in 0: 1.000 or 1.010, not 1.001")

	r = post("/payments", "isk-1", amountsBody("150", "ISK", "inv-isk", "pm_card_visa", "automatic"))
	var isk struct{ Amount, Status string }
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &isk) != nil || isk.Amount != "150" || isk.Status != "SUCCEEDED" {
		t.Errorf("ISK 150: %d %s, want 201 SUCCEEDED for 150", r.status, r.body)
	}
}

// With the simulator, a payment method token that is none of its test
// methods (a typo) answers 400 UNKNOWN_TEST_PAYMENT_METHOD listing them,
// and stores nothing; the corrected request may use the same key.
func TestAnUnknownTestPaymentMethodStoresNothing(t *testing.T) {
	t.Parallel()
	env := inputEnv(t)
	base, _, _ := startRecorded(t, env)
	r := call(t, "POST", base+"/payments", inputSecret, "typo-1", amountsBody("10.00", "EUR", "inv-typo", "pm_card_vsia", "automatic"))
	code, detail := problemOf(r)
	if r.status != http.StatusBadRequest || code != "UNKNOWN_TEST_PAYMENT_METHOD" {
		t.Fatalf("pm_card_vsia: %d %s; want 400 UNKNOWN_TEST_PAYMENT_METHOD", r.status, r.body)
	}
	for _, b := range sim.Behaviours {
		if !strings.Contains(detail, b.Method) {
			t.Errorf("the detail does not list %s: %s", b.Method, detail)
		}
	}
	if got := countStored(t, env["DATABASE_URL"]); got != (stored{}) {
		t.Errorf("pm_card_vsia stored %+v, want nothing", got)
	}
	r = call(t, "POST", base+"/payments", inputSecret, "typo-1", amountsBody("10.00", "EUR", "inv-typo", "pm_card_visa", "automatic"))
	if r.status != http.StatusCreated {
		t.Errorf("pm_card_visa under the same key: %d %s, want 201", r.status, r.body)
	}
}

// A provider at PROVIDER_URL that does not serve GET /_sim/methods gets
// no check: an unknown method reaches it (the simulator declines it).
func TestAProviderWithoutMethodsGetsNoCheck(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.Handle("GET /_sim/methods", http.NotFoundHandler())
	mux.Handle("/", sim.New(sim.Options{}))
	provider := httptest.NewServer(mux)
	t.Cleanup(provider.Close)
	env := inputEnv(t, "PROVIDER_URL", provider.URL)
	base, _, _ := startRecorded(t, env)
	r := call(t, "POST", base+"/payments", inputSecret, "typo-1", amountsBody("10.00", "EUR", "inv-typo", "pm_card_vsia", "automatic"))
	if code, _ := problemOf(r); r.status != http.StatusPaymentRequired || code != "PAYMENT_DECLINED" {
		t.Errorf("pm_card_vsia with a provider that lists no methods: %d %s; want 402 PAYMENT_DECLINED, from the provider", r.status, r.body)
	}
}

// A key recorded under yesterday's rules is answered from its record
// today: a payment of BHD 1.234 made while the provider took it, retried
// after the provider's rules changed (another instance, started with
// Stripe's rules, on the same database), is replayed, not refused; only a
// new key is refused.
func TestARecordedKeyIsReplayedWhateverTheProviderWouldRefuseNow(t *testing.T) {
	t.Parallel()
	before := inputEnv(t)
	after := map[string]string{}
	for k, v := range before {
		after[k] = v
	}
	after["PROVIDER_SIM_CURRENCY_RULES"] = "stripe"
	then, _, _ := startRecorded(t, before)
	body := amountsBody("1.234", "BHD", "inv-then", "pm_card_visa", "automatic")
	first := call(t, "POST", then+"/payments", inputSecret, "bhd-then", body)
	if first.status != http.StatusCreated {
		t.Fatalf("the payment under ISO rules: %d %s", first.status, first.body)
	}
	now, _, _ := startRecorded(t, after)
	again := call(t, "POST", now+"/payments", inputSecret, "bhd-then", body)
	if again.status != http.StatusCreated || string(again.body) != string(first.body) {
		t.Errorf("its retry under Stripe's rules: %d %s; want the first answer replayed", again.status, again.body)
	}
	fresh := call(t, "POST", now+"/payments", inputSecret, "bhd-now", amountsBody("1.234", "BHD", "inv-now", "pm_card_visa", "automatic"))
	if code, _ := problemOf(fresh); fresh.status != http.StatusBadRequest || code != "AMOUNT_NOT_SUPPORTED_BY_PROVIDER" {
		t.Errorf("a new key under Stripe's rules: %d %s; want 400 AMOUNT_NOT_SUPPORTED_BY_PROVIDER", fresh.status, fresh.body)
	}
}
