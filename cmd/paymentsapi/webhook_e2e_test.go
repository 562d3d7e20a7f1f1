package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/paymentsapi/paymentsapi/internal/proctest"
)

// The API process is killed (kill -9) while it sends a webhook; another API
// process on the same database sends it again once the dead one's lease
// ran out: every event of a payment reaches the merchant's endpoint at
// least once, each delivery verified with the Standard Webhooks library.
func TestKilledAPIMidWebhookThenAnotherDelivers(t *testing.T) {
	apiBin, simBin := proctest.Binaries(t)
	var (
		mu       sync.Mutex
		secret   string
		received = map[string]int{} // webhook-id -> deliveries answered 200
		blocked  = make(chan struct{})
		first    sync.Once
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		mu.Lock()
		s := secret
		mu.Unlock()
		wh, werr := standardwebhooks.NewWebhook(s)
		if err != nil || werr != nil || wh.Verify(body, r.Header) != nil {
			t.Errorf("a delivery that does not verify: %v %v", err, werr)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		hang := false
		first.Do(func() { hang = true })
		if hang { // the first delivery hangs until its sender dies
			close(blocked)
			<-r.Context().Done()
			return
		}
		mu.Lock()
		received[r.Header.Get("webhook-id")]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer receiver.Close()

	_, db, env := recStartBackends(t, simBin, nil, "WEBHOOK_TIMEOUT=5s", "WEBHOOK_ALLOW_HTTP=true", "WEBHOOK_ALLOW_PRIVATE=true",
		"SECRETS_KEY="+e2eSecretsKey)
	apiA, urlA := proctest.Start(t, apiBin, env)
	reg := call(t, "POST", urlA+"/webhook-endpoints", recSecret, "hook-1", `{"url":"`+receiver.URL+`/hook"}`)
	var ep struct{ Secret string }
	if reg.status != http.StatusCreated || json.Unmarshal(reg.body, &ep) != nil {
		t.Fatalf("register: %d %s", reg.status, reg.body)
	}
	mu.Lock()
	secret = ep.Secret
	mu.Unlock()
	pay, err := recPost(urlA, "pay-hook", `{"accountId":"acc_hook","amount":"12.00","currency":"EUR",`+
		`"merchantReference":"order-hook","paymentMethod":"pm_card_visa"}`, nil)
	if err != nil || pay.status != http.StatusCreated {
		t.Fatalf("payment: %v %d %s", err, pay.status, pay.body)
	}
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("no webhook was sent")
	}
	if err := apiA.Process.Kill(); err != nil { // kill -9, mid-delivery
		t.Fatal(err)
	}
	_ = apiA.Wait()

	proctest.Start(t, apiBin, env)
	// The payment's two events are in the log (the outbox: the second one
	// perhaps written by the second process's reconciler).
	var events []string
	recWaitFor(t, 30*time.Second, "the payment's two events", func(ctx context.Context) (bool, error) {
		rows, err := db.Query(ctx, `SELECT id::text FROM outbox_events`)
		if err != nil {
			return false, err
		}
		events, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return len(events) == 2, err
	})
	// The dead process's lease (2 × WEBHOOK_TIMEOUT + 10 s) runs out, then
	// the second process sends what the first one was sending.
	recWaitFor(t, 60*time.Second, "every event delivered", func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range events {
			if received[id] == 0 {
				return false, nil
			}
		}
		return true, nil
	})
}
