package groupcommit_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// Payments created at the same moment share their transactions (package
// groupcommit), and their like batches are merged: each statement of the
// claims, and of the settles, sent once over all their rows (package
// rowset). Each payment ends as it would alone: its row in its final
// state, its creation and its two moves recorded, its two events, its
// key's answer, one charge; a retry among them writes nothing. The slow
// provider lines the settles up as the claims were.
func TestPaymentsCreatedTogetherAreWrittenByMergedStatements(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithSlowDelay(300*time.Millisecond), servicetest.WithCommitMode(idempotency.CommitGroup))
	const n, retries = 24, 6
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		firsts   = make([]servicetest.Response, n)
		repeated = make([]servicetest.Response, retries)
	)
	payment := func(i int) string {
		method := `"pm_sim_slow"`
		if i%6 == 5 {
			method = `"pm_card_insufficientFunds"`
		}
		return servicetest.Body("merchantReference", fmt.Sprintf(`"inv-merge-%d"`, i), "paymentMethod", method)
	}
	for i := range n {
		wg.Go(func() { <-start; firsts[i] = e.Post(fmt.Sprintf("k-merge-%d", i), payment(i)) })
	}
	for i := range retries {
		wg.Go(func() { <-start; repeated[i] = e.Post(fmt.Sprintf("k-merge-%d", i), payment(i)) })
	}
	close(start)
	wg.Wait()
	created := 0
	for i, r := range append(firsts, repeated...) {
		switch {
		case r.Status == http.StatusCreated && r.Header.Get("Idempotent-Replayed") != "true":
			created++
		case r.Status == http.StatusCreated, r.Status == http.StatusConflict:
			// a retry: the replay, or the original still in flight
		case r.Status == http.StatusPaymentRequired && i%n%6 == 5:
		default:
			t.Errorf("request %d: %d %s", i, r.Status, r.Body)
		}
	}
	declined := n / 6
	if created != n-declined {
		t.Errorf("%d payments created, want %d", created, n-declined)
	}
	for what, want := range map[string]int{
		"payments WHERE state = 'COMPLETED'":                                                n - declined,
		"payments WHERE state = 'DECLINED' AND decline_code = 'insufficient_funds'":         declined,
		"payments WHERE provider_reference IS NOT NULL":                                     n,
		"payment_transitions":                                                               3 * n,
		"outbox_events WHERE event_type = 'PaymentCreated'":                                 n,
		"outbox_events WHERE event_type IN ('PaymentSucceeded', 'PaymentDeclined')":         n,
		"idempotency_keys WHERE response_status IN (201, 402) AND completed_at IS NOT NULL": n,
	} {
		if got := e.Count(what); got != want {
			t.Errorf("%s: %d, want %d", what, got, want)
		}
	}
	if charges := e.Sim.Charges(); len(charges) != n {
		t.Errorf("%d charges, want %d", len(charges), n)
	}
	for _, kind := range []string{"claims", "steps"} {
		got := e.Metric("paymentsapi_group_commit_merged_batches_total", map[string]string{"kind": kind})
		if got == 0 {
			t.Errorf("no %s' batches merged: the test proved nothing", kind)
		}
		t.Logf("%s: %v batches merged", kind, got)
	}
	// A merge that PostgreSQL refused would have been sent again batch by
	// batch, each in a transaction of its own, and the answers would be
	// the same: the records of the creations and of the settles, each
	// written by fewer transactions than payments, say the merges
	// committed (a group of payments' batches is always merged).
	for what, from := range map[string]string{"creations": "IS NULL", "settles": "= 'PROVIDER_REQUEST_SENT'"} {
		if got := e.Count("(SELECT DISTINCT xmin::text FROM payment_transitions WHERE from_state " + from + ") AS x"); got >= n {
			t.Errorf("the %d payments' %s were written by %d transactions: no merge committed", n, what, got)
		}
	}
}
