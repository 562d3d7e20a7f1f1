package authorizations_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// Twenty captures and cancels of one authorization, each under its own key,
// at once, through two API instances (each with its own pool, engine and
// reconciler) on one database: exactly one wins, the others are refused,
// and the provider shows exactly one capture or one void.
func TestConcurrentCapturesAndCancelsOneWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{instances: 2})
	for round := range 3 {
		id := e.authorized(fmt.Sprintf("pay-%d", round), "pm_card_visa")
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			got   = make([]response, 20)
		)
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				key := fmt.Sprintf("k-%d-%d", round, i)
				if i%2 == 0 {
					got[i] = e.capture(i%2, id, key, "")
				} else {
					got[i] = e.cancel(i/2%2, id, key, "")
				}
			}()
		}
		close(start)
		wg.Wait()
		won, codes := 0, map[string]int{}
		for _, r := range got {
			if r.status == http.StatusOK {
				won++
				continue
			}
			if r.status != http.StatusConflict {
				t.Fatalf("round %d: a rival got %s", round, r)
			}
			codes[r.json(t)["code"].(string)]++
		}
		if won != 1 {
			t.Fatalf("round %d: %d requests won, want 1 (refusals %v)", round, won, codes)
		}
		c := e.charge(id)
		switch c.Status {
		case provider.StatusSucceeded:
			if c.CaptureRequestCount != 1 || c.VoidRequestCount != 0 {
				t.Fatalf("round %d: captured, with %+v", round, c)
			}
		case provider.StatusCanceled:
			if c.CaptureRequestCount != 0 || c.VoidRequestCount != 1 {
				t.Fatalf("round %d: voided, with %+v", round, c)
			}
		default:
			t.Fatalf("round %d: the provider's charge is %s", round, c.Status)
		}
		if n := e.count("payment_actions WHERE payment_id = $1 AND reason <> 'authorization_expired'", id); n != 1 {
			t.Fatalf("round %d: %d actions recorded, want 1", round, n)
		}
	}
}

// A storm of one capture under one key, from many clients at once that are
// willing to wait: one capture at the provider, and every client gets the
// same 200.
func TestSameKeyCaptureStorm(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{instances: 2})
	id := e.authorized("pay", "pm_card_visa")
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		got   = make([]response, 40)
	)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i] = e.do(i%2, "POST", "/payments/"+id+"/capture", "storm", `{"amount":"7.00"}`, "Prefer", "wait=10")
		}()
	}
	close(start)
	wg.Wait()
	for _, r := range got {
		if r.status != http.StatusOK || string(r.body) != string(got[0].body) {
			t.Fatalf("a client got %s, another %s", r, got[0])
		}
	}
	if c := e.charge(id); c.CaptureRequestCount != 1 || c.AmountCapturedMinor != 700 {
		t.Fatalf("the provider's charge: %+v", c)
	}
}
