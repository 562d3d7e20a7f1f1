package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/proctest"
)

// recSimRefund is a refund as the simulator lists it.
type recSimRefund struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotencyKey"`
	ChargeID       string `json:"chargeId"`
	Status         string `json:"status"`
	RequestCount   int    `json:"requestCount"`
}

func recSimRefunds(simURL string) ([]recSimRefund, error) {
	resp, err := recClient.Get(simURL + "/_sim/refunds")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list struct{ Refunds []recSimRefund }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("decode /_sim/refunds: %w", err)
	}
	return list.Refunds, nil
}

// The API process is killed (kill -9) while the provider holds a refund
// whose answer never came back; a retry with the same key on a restarted API
// waits out the dead owner's lease, takes the key over, asks the provider,
// and answers the refund: one refund at the provider, created by one request.
func TestKilledAPIMidRefundThenRetryRefundsOnce(t *testing.T) {
	apiBin, simBin := proctest.Binaries(t)
	simURL, db, env := recStartBackends(t, simBin, nil,
		"PROVIDER_TIMEOUT=3s", "LEASE_DURATION=4s", "RECONCILE_INTERVAL=1h")
	apiA, urlA := proctest.Start(t, apiBin, env)

	pay, err := recPost(urlA, "pay-1", `{"accountId":"acc_kill","amount":"42.00","currency":"EUR",`+
		`"merchantReference":"order-kill-r","paymentMethod":"pm_sim_refund_timeout_after_success"}`, nil)
	if err != nil || pay.status != http.StatusCreated {
		t.Fatalf("payment: %v %d %s", err, pay.status, pay.body)
	}
	paymentID := recDecodePayment(t, pay.body).PaymentID
	refundsURL := "/payments/" + paymentID + "/refunds"
	const key, body = "refund-kill-1", `{"amount":"12.50"}`

	original := make(chan error, 1)
	go func() {
		r, err := recPostTo(urlA+refundsURL, key, body, nil)
		if err == nil {
			err = fmt.Errorf("the original was answered before the kill: %d %s", r.status, r.body)
		}
		original <- err
	}()
	// In flight: the refund is recorded as sent, and the provider holds it.
	var refundID string
	recWaitFor(t, 15*time.Second, "refund in PROVIDER_REQUEST_SENT with a refund at the provider", func(ctx context.Context) (bool, error) {
		var state string
		err := db.QueryRow(ctx, `SELECT id, state FROM refunds`).Scan(&refundID, &state)
		if err != nil || state != "PROVIDER_REQUEST_SENT" {
			return false, nil //nolint:nilerr // not there yet
		}
		refunds, err := recSimRefunds(simURL)
		return len(refunds) == 1, err
	})
	if err := apiA.Process.Kill(); err != nil { // kill -9
		t.Fatal(err)
	}
	_ = apiA.Wait()
	if err := <-original; err != nil {
		t.Logf("the original request ended without an answer, as expected: %v", err)
	}

	_, urlB := proctest.Start(t, apiBin, env)
	final, conflicts := recRetryWhileInUse(t, urlB+refundsURL, key, body, http.StatusCreated)
	if conflicts == 0 {
		t.Error("no retry was refused while the dead owner's lease ran")
	}
	var v struct{ RefundID, Status, Amount string }
	if err := json.Unmarshal(final.body, &v); err != nil || v.RefundID != refundID || v.Status != "SUCCEEDED" || v.Amount != "12.50" {
		t.Errorf("final refund %s, want %s SUCCEEDED 12.50", final.body, refundID)
	}
	refunds, err := recSimRefunds(simURL)
	if err != nil {
		t.Fatal(err)
	}
	if len(refunds) != 1 || refunds[0].RequestCount != 1 || refunds[0].IdempotencyKey != "paymentsapi:"+refundID {
		t.Errorf("provider refunds %+v: want one, keyed by the refund, created by one request", refunds)
	}
	if n := recCount(t, db, "refunds"); n != 1 {
		t.Errorf("%d refunds stored", n)
	}
	if n := recCount(t, db, "outbox_events WHERE event_type = 'RefundSucceeded'"); n != 1 {
		t.Errorf("%d RefundSucceeded events", n)
	}
	if n := recCount(t, db, "idempotency_keys WHERE idempotency_key = $1 AND fencing_token = 2", key); n != 1 {
		t.Error("the refund's key was not taken over exactly once")
	}
}

// recRetryWhileInUse retries a command at url with key until it gets an
// answer other than 409 IDEMPOTENCY_KEY_IN_USE, which must be want (the
// dead owner's lease runs meanwhile), within 25 s; conflicts counts the
// 409s.
func recRetryWhileInUse(t *testing.T, url, key, body string, want int) (final httpResult, conflicts int) {
	t.Helper()
	deadline := time.Now().Add(25 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no final answer by the deadline (%d conflicts)", conflicts)
		}
		r, err := recPostTo(url, key, body, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch r.status {
		case http.StatusConflict:
			conflicts++
			time.Sleep(max(recCheckInUse(t, r)/2, 200*time.Millisecond))
		case want:
			return r, conflicts
		default:
			t.Fatalf("retry answered %d %s, want 409 while the lease runs, then %d", r.status, r.body, want)
		}
	}
}
