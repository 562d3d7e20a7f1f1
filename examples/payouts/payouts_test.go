package payouts_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/examples/payouts"
	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/ledger"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
	"github.com/paymentsapi/paymentsapi/internal/statemachine/statemachinetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// registered registers the payouts through app.Config.ExtraModules, as a
// fork registers them with one line in app.Modules, on a provider whose
// payout port is b.
func registered(b *bank) []servicetest.Option {
	return []servicetest.Option{
		servicetest.WithConfig(func(c *app.Config) { c.ExtraModules = append(c.ExtraModules, payouts.Module()) }),
		servicetest.WithProvider(func(p provider.Provider) provider.Provider {
			if b == nil {
				return withPayouts{p, newBank()}
			}
			return withPayouts{p, b}
		}),
	}
}

// body is a payout of amount EUR to destination.
func body(amount, destination string) string {
	return fmt.Sprintf(`{"accountId":"acc_1","amount":%q,"currency":"EUR","destination":%q}`, amount, destination)
}

func post(e *servicetest.Env, key, body string) servicetest.Response {
	e.T.Helper()
	return e.Do("POST", "/payouts", []byte(body), servicetest.CreateHeaders(servicetest.SecretA, key))
}

// events returns the outbox's events about payout id, in order.
func events(e *servicetest.Env, id string) []outbox.Event {
	e.T.Helper()
	rows, err := e.Pool.Query(context.Background(), `
		SELECT id::text, event_type, aggregate_type, aggregate_id, created_at, payload
		FROM outbox_events WHERE aggregate_id = $1 ORDER BY seq`, id)
	if err != nil {
		e.T.Fatal(err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outbox.Event, error) {
		var ev outbox.Event
		err := r.Scan(&ev.ID, &ev.Type, &ev.AggregateType, &ev.AggregateID, &ev.OccurredAt, &ev.Payload)
		return ev, err
	})
	if err != nil {
		e.T.Fatal(err)
	}
	return evs
}

func types(evs []outbox.Event) string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return fmt.Sprint(out)
}

// A payout keeps the contract every operation keeps (servicetest.Contract),
// its state machine included.
func TestPayoutsKeepTheOperationContract(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	servicetest.Contract(t, servicetest.Operation{
		Path:      func(*servicetest.Env, string) string { return "/payouts" },
		Body:      func(dest string) string { return body("3.00", dest) },
		OtherBody: func(dest string) string { return body("4.00", dest) },
		Method:    toBank, SlowMethod: toSlowBank, LostMethod: toLostAnswer,
		Options: registered(nil),
		Machine: statemachinetest.Bind(payouts.Machine(), payouts.States(), func(ctx context.Context, tx pgx.Tx, s payouts.State) (string, error) {
			id := payouts.NewID()
			_, err := tx.Exec(ctx, `INSERT INTO payouts (id, tenant_id, account_id, amount_minor, currency, destination, state, created_at, updated_at)
				VALUES ($1, 't', 'acc', 100, 'EUR', 'ba_x', $2, $3, $3)`, id, string(s), t0)
			return id, err
		}),
	})
}

// One registration gives the payout its route, its idempotency, its id
// derived from the key, one request to the bank under the payout's own key,
// its events, its ledger entry and its reads.
func TestAPayoutIsSentOnceAndBooked(t *testing.T) {
	t.Parallel()
	b := newBank()
	e := servicetest.New(t, registered(b)...)
	ctx := context.Background()

	created := post(e, "po-1", body("12.50", toBank))
	if created.Status != http.StatusCreated {
		t.Fatalf("POST /payouts: %d %s", created.Status, created.Body)
	}
	v := created.JSON(t)
	id, _ := v["payoutId"].(string)
	cmd, _ := payouts.CreateRequest{AccountID: "acc_1", Amount: "12.50", Currency: "EUR", Destination: toBank}.Validate()
	if id != payouts.DeriveID("tenant_a", "po-1", cmd) {
		t.Errorf("payout id %s is not derived from the tenant, the key and the command", id)
	}
	if v["status"] != "SUCCEEDED" || v["amount"] != "12.50" || v["providerReference"] == nil || created.Header.Get("Location") != "/payouts/"+id {
		t.Errorf("the 201: %v, Location %q", v, created.Header.Get("Location"))
	}
	if sent, looked := b.calls(id); sent != 1 || looked != 0 {
		t.Errorf("the bank was asked %d times and looked up %d times, want 1 and 0", sent, looked)
	}
	if got := e.Transitions("payout_transitions", "payout_id", id); len(got) != 3 || got[2].To != "SUCCEEDED" {
		t.Errorf("transitions %+v: want created, sent, succeeded", got)
	}
	if r := e.Get(servicetest.SecretA, "/payouts/"+id); r.Status != http.StatusOK || r.JSON(t)["payoutId"] != id {
		t.Errorf("GET: %d %s", r.Status, r.Body)
	}
	if r := e.Get(servicetest.SecretB, "/payouts/"+id); r.Status != http.StatusNotFound || r.JSON(t)["code"] != "NOT_FOUND" {
		t.Errorf("another tenant's read: %d %s", r.Status, r.Body)
	}

	evs := events(e, id)
	if got := types(evs); got != "[PayoutCreated PayoutSucceeded]" {
		t.Fatalf("events %s", got)
	}
	// A projector of the registered modules books the payout; one of the
	// production modules alone books nothing.
	without := ledger.NewProjector(ledger.Deps{DB: e.Pool, Clock: e.Clock, Modules: app.Modules(app.Config{})}, "ledger-without-payouts")
	if o, err := without.Apply(ctx, evs[1]); err != nil || o != ledger.OutcomeIgnored {
		t.Errorf("without the payouts: %s %v, want ignored", o, err)
	}
	proj := ledger.NewProjector(ledger.Deps{DB: e.Pool, Clock: e.Clock, Modules: e.Core.Modules}, "")
	if o, err := proj.Apply(ctx, evs[1]); err != nil || o != ledger.OutcomeApplied {
		t.Fatalf("PayoutSucceeded: %s %v, want applied", o, err)
	}
	if n := e.Count(`ledger_entries WHERE payment_id = $1 AND entry_type = 'PAYOUT_SUCCEEDED' AND amount_minor = 1250`, id); n != 1 {
		t.Errorf("%d ledger entries for the payout, want 1", n)
	}

	// Bad requests, each field named, none stored.
	r := post(e, "po-bad", `{"accountId":"","amount":"-1","currency":"EUR","destination":"iban"}`)
	if r.Status != http.StatusBadRequest || r.JSON(t)["code"] != "VALIDATION_FAILED" {
		t.Fatalf("a bad payout: %d %s", r.Status, r.Body)
	}
	if errs, _ := r.JSON(t)["errors"].([]any); len(errs) != 3 {
		t.Errorf("the fields at fault: %s, want accountId, amount, destination", r.Body)
	}
	if n := e.Count(`idempotency_keys WHERE idempotency_key = 'po-bad'`); n != 0 {
		t.Errorf("a bad request stored its key")
	}

	// Past the replay window the key is gone, the payout is not: a retry
	// is told so, with the payout's id.
	e.Clock.Advance(e.Config.ReplayTTL + time.Second)
	if r := post(e, "po-1", body("12.50", toBank)); r.Status != http.StatusConflict || r.JSON(t)["code"] != "IDEMPOTENCY_KEY_EXPIRED" ||
		r.JSON(t)["payoutId"] != id {
		t.Errorf("an expired key: %d %s, want 409 IDEMPOTENCY_KEY_EXPIRED naming the payout", r.Status, r.Body)
	}
	// Once clean-up deleted the key, the retry's claim is new, but the
	// payout its derived id names exists (Request.Exists): it is told so too.
	if tag, err := e.Pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE idempotency_key = 'po-1'`); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("deleting the key: %v %v", tag, err)
	}
	if r := post(e, "po-1", body("12.50", toBank)); r.Status != http.StatusConflict || r.JSON(t)["code"] != "IDEMPOTENCY_KEY_EXPIRED" ||
		r.JSON(t)["payoutId"] != id {
		t.Errorf("a deleted key: %d %s, want 409 IDEMPOTENCY_KEY_EXPIRED naming the payout", r.Status, r.Body)
	}
	if sent, _ := b.calls(id); sent != 1 {
		t.Errorf("the expired key's retry reached the bank: %d payouts", sent)
	}
}

// A payout the bank refuses is a 402 PAYOUT_DECLINED naming the payout,
// stored and replayed byte for byte.
func TestADeclinedPayoutIsStoredAndReplayed(t *testing.T) {
	t.Parallel()
	b := newBank()
	e := servicetest.New(t, registered(b)...)
	first := post(e, "po-closed", body("5.00", toClosed))
	p := first.JSON(t)
	if first.Status != http.StatusPaymentRequired || p["code"] != string(payouts.CodeDeclined) || p["declineCode"] != "account_closed" ||
		p["payoutId"] == nil || first.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("a refused payout: %d %s", first.Status, first.Body)
	}
	again := post(e, "po-closed", body("5.00", toClosed))
	if again.Status != first.Status || !bytes.Equal(again.Body, first.Body) || again.Header.Get(httpapi.ReplayedHeader) != "true" {
		t.Errorf("the retry: %d %s", again.Status, again.Body)
	}
	if got := types(events(e, p["payoutId"].(string))); got != "[PayoutCreated PayoutDeclined]" {
		t.Errorf("events %s", got)
	}
	// A bank that refuses before anything happened: 503, nothing moved, and
	// the retry with the key resumes the same payout.
	if r := post(e, "po-down", body("5.00", toUnavailable)); r.Status != http.StatusServiceUnavailable || r.JSON(t)["code"] != "PROVIDER_UNAVAILABLE" {
		t.Errorf("a bank that is down: %d %s", r.Status, r.Body)
	}
}

// The bank paid but its answer was lost: 202, then the reconciler asks the
// bank (never pays again), and the retry gets the payout.
func TestALostPayoutIsLookedUpNeverSentAgain(t *testing.T) {
	t.Parallel()
	b := newBank()
	e := servicetest.New(t, append(registered(b), servicetest.WithProviderTimeout(300*time.Millisecond))...)
	first := post(e, "po-lost", body("7.00", toLostAnswer))
	if first.Status != http.StatusAccepted || first.JSON(t)["status"] != "PROCESSING" || first.Header.Get("Retry-After") == "" {
		t.Fatalf("a lost answer: %d %s", first.Status, first.Body)
	}
	id := first.JSON(t)["payoutId"].(string)
	e.Clock.Advance(time.Hour)
	if stats := e.Reconcile(); stats["succeeded"] != 1 {
		t.Fatalf("reconciler: %v, want one succeeded", stats)
	}
	if sent, looked := b.calls(id); sent != 1 || looked != 1 {
		t.Errorf("recovery: %d payouts, %d lookups; want 1 and 1", sent, looked)
	}
	retry := post(e, "po-lost", body("7.00", toLostAnswer))
	if retry.Status != http.StatusCreated || retry.Header.Get(httpapi.ReplayedHeader) != "true" || retry.JSON(t)["payoutId"] != id {
		t.Errorf("the retry after recovery: %d %s", retry.Status, retry.Body)
	}
}

// The provider's webhook events about its payouts resolve a lost payout,
// whether they name it by its metadata or by its provider key.
func TestTheProvidersPayoutEventsResolveALostPayout(t *testing.T) {
	t.Parallel()
	b := newBank()
	e := servicetest.New(t, append(registered(b), servicetest.WithStripeWebhooks(), servicetest.WithProviderTimeout(300*time.Millisecond))...)
	for i, metadata := range []func(id string) string{
		func(id string) string { return fmt.Sprintf(`{%q:%q}`, payouts.MetadataID, id) },
		func(id string) string { return fmt.Sprintf(`{"idempotency_key":%q}`, payouts.ProviderKey(id)) },
	} {
		r := post(e, fmt.Sprintf("po-hook-%d", i), body("2.00", toLostAnswer))
		if r.Status != http.StatusAccepted {
			t.Fatalf("a lost answer: %d %s", r.Status, r.Body)
		}
		id := r.JSON(t)["payoutId"].(string)
		event := servicetest.StripeEvent(fmt.Sprintf("evt_%d", i), "payout.paid",
			fmt.Sprintf(`{"id":"tr_x%d","object":"payout","metadata":%s}`, i, metadata(id)))
		if a := e.Webhook(event, servicetest.StripeWebhookSecret, e.Clock.Now()); a.Status != http.StatusOK || a.JSON(t)["resolution"] != "succeeded" {
			t.Errorf("event %d: %d %s, want the payout resolved", i, a.Status, a.Body)
		}
		if g := e.Get(servicetest.SecretA, "/payouts/"+id).JSON(t); g["status"] != "SUCCEEDED" {
			t.Errorf("event %d left the payout %v", i, g["status"])
		}
		if sent, _ := b.calls(id); sent != 1 {
			t.Errorf("event %d: %d payouts, want 1", i, sent)
		}
	}
}

// A provider without the payout port does not stop the service: the
// payouts' routes answer 501 OPERATION_NOT_SUPPORTED_BY_PROVIDER and store
// nothing, and the reconciler of that instance leaves the payouts' keys to
// an instance whose provider pays out.
func TestAProviderWithoutPayoutsAnswers501AndItsKeysWait(t *testing.T) {
	t.Parallel()
	b := newBank()
	var plain provider.Provider
	e := servicetest.New(t, registered(b)[0], servicetest.WithProviderTimeout(300*time.Millisecond),
		servicetest.WithProvider(func(p provider.Provider) provider.Provider {
			plain = p
			return withPayouts{p, b}
		}))
	lost := post(e, "po-lost", body("7.00", toLostAnswer))
	if lost.Status != http.StatusAccepted {
		t.Fatalf("a lost answer: %d %s", lost.Status, lost.Body)
	}
	id := lost.JSON(t)["payoutId"].(string)

	url, core, _ := servicetest.StartInstance(t, e.Pool, plain, e.Clock, e.Config, httpapi.RateLimit{})
	for _, r := range []struct{ method, path, body string }{{"POST", "/payouts", body("1.00", toBank)}, {"GET", "/payouts/" + id, ""}} {
		req, _ := http.NewRequest(r.method, url+r.path, bytes.NewReader([]byte(r.body)))
		for k, v := range servicetest.CreateHeaders(servicetest.SecretA, "po-501") {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		got := servicetest.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
		if got.Status != http.StatusNotImplemented || got.Header.Get("Content-Type") != "application/problem+json" ||
			got.JSON(t)["code"] != "OPERATION_NOT_SUPPORTED_BY_PROVIDER" {
			t.Errorf("%s %s without the port: %d %s", r.method, r.path, got.Status, got.Body)
		}
	}
	if n := e.Count(`idempotency_keys WHERE idempotency_key = 'po-501'`); n != 0 {
		t.Errorf("the 501 stored its key")
	}

	e.Clock.Advance(time.Hour)
	stats, err := core.Reconciler.RunOnce(context.Background(), 10)
	if err != nil || len(stats) != 0 {
		t.Errorf("the reconciler without the port: %v %v, want nothing done", stats, err)
	}
	if _, looked := b.calls(id); looked != 0 {
		t.Errorf("the payout was looked up %d times by an instance that cannot", looked)
	}
	if stats := e.Reconcile(); stats["succeeded"] != 1 {
		t.Errorf("the reconciler with the port: %v, want the payout resolved", stats)
	}
}
