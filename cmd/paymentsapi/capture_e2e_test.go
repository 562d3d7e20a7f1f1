package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/proctest"
)

// The API process is killed (kill -9) while the provider holds a capture
// whose answer never came back; a retry of the capture with the same key on
// a restarted API waits out the dead owner's lease, takes the key over, asks
// the provider, and answers the captured payment: one capture, made by one
// request.
func TestKilledAPIMidCaptureThenRetryCapturesOnce(t *testing.T) {
	apiBin, simBin := proctest.Binaries(t)
	simURL, db, env := recStartBackends(t, simBin, nil,
		"PROVIDER_TIMEOUT=3s", "LEASE_DURATION=4s", "RECONCILE_INTERVAL=1h")
	apiA, urlA := proctest.Start(t, apiBin, env)

	pay, err := recPost(urlA, "pay-1", `{"accountId":"acc_kill","amount":"42.00","currency":"EUR",`+
		`"merchantReference":"order-kill-c","paymentMethod":"pm_sim_capture_timeout_after_success","captureMethod":"manual"}`, nil)
	if err != nil || pay.status != http.StatusCreated {
		t.Fatalf("payment: %v %d %s", err, pay.status, pay.body)
	}
	paymentID := recDecodePayment(t, pay.body).PaymentID
	captureURL := "/payments/" + paymentID + "/capture"
	const key, body = "capture-kill-1", `{"amount":"30.00"}`

	original := make(chan error, 1)
	go func() {
		r, err := recPostTo(urlA+captureURL, key, body, nil)
		if err == nil {
			err = fmt.Errorf("the original was answered before the kill: %d %s", r.status, r.body)
		}
		original <- err
	}()
	// In flight: the capture is recorded as sent, and the provider made it.
	recWaitFor(t, 15*time.Second, "capture in PROVIDER_REQUEST_SENT, captured at the provider", func(ctx context.Context) (bool, error) {
		var state string
		err := db.QueryRow(ctx, `SELECT state FROM payment_actions WHERE kind = 'capture'`).Scan(&state)
		if err != nil || state != "PROVIDER_REQUEST_SENT" {
			return false, nil //nolint:nilerr // not there yet
		}
		charges, err := recSimCharges(simURL)
		return len(charges) == 1 && charges[0].Status == "succeeded", err
	})
	if err := apiA.Process.Kill(); err != nil { // kill -9
		t.Fatal(err)
	}
	_ = apiA.Wait()
	if err := <-original; err != nil {
		t.Logf("the original request ended without an answer, as expected: %v", err)
	}

	_, urlB := proctest.Start(t, apiBin, env)
	final, conflicts := recRetryWhileInUse(t, urlB+captureURL, key, body, http.StatusOK)
	if conflicts == 0 {
		t.Error("no retry was refused while the dead owner's lease ran")
	}
	var v struct{ PaymentID, Status, CapturedAmount string }
	if err := json.Unmarshal(final.body, &v); err != nil || v.PaymentID != paymentID || v.Status != "SUCCEEDED" || v.CapturedAmount != "30.00" {
		t.Errorf("final answer %s, want %s SUCCEEDED captured 30.00", final.body, paymentID)
	}
	charges, err := recSimCharges(simURL)
	if err != nil {
		t.Fatal(err)
	}
	if len(charges) != 1 || charges[0].CaptureRequestCount != 1 || charges[0].AmountCaptured != "30.00" {
		t.Errorf("provider charges %+v: want one, captured once by one request, 30.00", charges)
	}
	if n := recCount(t, db, "outbox_events WHERE event_type = 'PaymentSucceeded'"); n != 1 {
		t.Errorf("%d PaymentSucceeded events", n)
	}
	if n := recCount(t, db, "idempotency_keys WHERE idempotency_key = $1 AND fencing_token = 2", key); n != 1 {
		t.Error("the capture's key was not taken over exactly once")
	}
}

// Two API processes on one database and one provider: 20 captures and
// cancels of one authorization, each under its own key, split across both,
// at once. Exactly one wins (200); the others are refused (409); the
// provider shows one capture or one void, never both.
func TestTwoAPIProcessesCaptureOrCancelOnce(t *testing.T) {
	apiBin, simBin := proctest.Binaries(t)
	simURL, db, env := recStartBackends(t, simBin, nil,
		"PROVIDER_TIMEOUT=5s", "LEASE_DURATION=30s", "RECONCILE_INTERVAL=1h")
	_, urlA := proctest.Start(t, apiBin, env)
	_, urlB := proctest.Start(t, apiBin, env)
	targets := []string{urlA, urlB}

	pay, err := recPost(urlA, "pay-race", `{"accountId":"acc_race","amount":"50.00","currency":"EUR",`+
		`"merchantReference":"order-race","paymentMethod":"pm_card_visa","captureMethod":"manual"}`, nil)
	if err != nil || pay.status != http.StatusCreated {
		t.Fatalf("payment: %v %d %s", err, pay.status, pay.body)
	}
	paymentID := recDecodePayment(t, pay.body).PaymentID

	const n = 20
	answers := make([]httpResult, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		action := "/capture"
		if i%2 == 1 {
			action = "/cancel"
		}
		wg.Go(func() {
			<-start
			answers[i], errs[i] = recPostTo(targets[(i/2)%2]+"/payments/"+paymentID+action, fmt.Sprintf("race-%d", i), `{}`, nil)
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for i, r := range answers {
		switch {
		case errs[i] != nil:
			t.Fatalf("request %d: %v", i, errs[i])
		case r.status == http.StatusOK:
			won++
		case r.status != http.StatusConflict:
			t.Fatalf("request %d answered %d %s, want 200 or 409", i, r.status, r.body)
		}
	}
	if won != 1 {
		t.Fatalf("%d requests won, want exactly 1", won)
	}
	charges, err := recSimCharges(simURL)
	if err != nil {
		t.Fatal(err)
	}
	if len(charges) != 1 {
		t.Fatalf("provider charges %+v, want one", charges)
	}
	switch c := charges[0]; c.Status {
	case "succeeded":
		if c.CaptureRequestCount != 1 || c.VoidRequestCount != 0 {
			t.Errorf("captured, with %+v", c)
		}
	case "canceled":
		if c.CaptureRequestCount != 0 || c.VoidRequestCount != 1 {
			t.Errorf("voided, with %+v", c)
		}
	default:
		t.Errorf("the provider's charge is %q", c.Status)
	}
	if n := recCount(t, db, "payment_actions WHERE reason <> 'authorization_expired'"); n != 1 {
		t.Errorf("%d actions recorded, want 1", n)
	}
}
