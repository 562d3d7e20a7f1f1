package main

// Failure and recovery, end to end: the real paymentsapi and providersim
// binaries run as separate OS processes on one real PostgreSQL database; the
// tests kill, restart and duplicate API processes while the provider keeps
// its memory, and prove from the provider's own books (GET /_sim/charges)
// and from the database that money moved exactly once.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/proctest"
)

const (
	recTenant = "recovery"
	recSecret = "sk_recovery"
)

// recAPIEnv is the environment of an API process of these tests.
func recAPIEnv(dbURL, simURL string, extra ...string) []string {
	return append([]string{
		"DATABASE_URL=" + dbURL, "PROVIDER=sim", "PROVIDER_URL=" + simURL,
		"API_KEYS=" + recTenant + ":" + recSecret, "HTTP_ADDR=127.0.0.1:0",
	}, extra...)
}

// recStartBackends starts what the API processes of a test run against: a
// providersim process (simBin with simArgs, on a loopback port) and a fresh
// database, with a pool on it. It returns the simulator's URL, the pool, and
// the environment of an API process on both, with extra added.
func recStartBackends(t *testing.T, simBin string, simArgs []string, extra ...string) (simURL string, db *pgxpool.Pool, env []string) {
	t.Helper()
	_, simURL = proctest.Start(t, simBin, nil, append([]string{"-addr", "127.0.0.1:0"}, simArgs...)...)
	dbURL := pgtest.NewURL(t)
	return simURL, recPool(t, dbURL), recAPIEnv(dbURL, simURL, extra...)
}

// recClient bounds every request, so that a hung server fails the test
// instead of hanging it.
var recClient = &http.Client{Timeout: 30 * time.Second}

// recPost sends POST /payments. Unlike call it does not fail the test, so
// goroutines may use it; header adds request headers (Prefer).
func recPost(baseURL, key, body string, header map[string]string) (httpResult, error) {
	return recPostTo(baseURL+"/payments", key, body, header)
}

// recPostTo is recPost to any create endpoint (a payment's refunds).
func recPostTo(url, key, body string, header map[string]string) (httpResult, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return httpResult{}, err
	}
	req.Header.Set("Authorization", "Bearer "+recSecret)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := recClient.Do(req)
	if err != nil {
		return httpResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return httpResult{resp.StatusCode, resp.Header, b}, err
}

// recCharge is a charge as the simulator lists it.
type recCharge struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotencyKey"`
	Status         string `json:"status"`
	Amount         string `json:"amount"`
	PaymentID      string `json:"paymentId"`
	RequestCount   int    `json:"requestCount"`
	LookupCount    int    `json:"lookupCount"`
	// A manual capture's
	AmountCaptured      string `json:"amountCaptured"`
	CaptureRequestCount int    `json:"captureRequestCount"`
	VoidRequestCount    int    `json:"voidRequestCount"`
}

func recSimCharges(simURL string) ([]recCharge, error) {
	resp, err := recClient.Get(simURL + "/_sim/charges")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list struct{ Charges []recCharge }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("decode /_sim/charges: %w", err)
	}
	return list.Charges, nil
}

// recChargesOf returns the simulator's charges for paymentID, and all of them.
func recChargesOf(t *testing.T, simURL, paymentID string) (mine, all []recCharge) {
	t.Helper()
	all, err := recSimCharges(simURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range all {
		if c.PaymentID == paymentID {
			mine = append(mine, c)
		}
	}
	return mine, all
}

// recAssertChargedOnce checks the provider's books: exactly one charge for
// the payment, under the key derived from it, created by one request.
func recAssertChargedOnce(t *testing.T, simURL, paymentID string, wantLookups bool) recCharge {
	t.Helper()
	mine, all := recChargesOf(t, simURL, paymentID)
	if len(mine) != 1 {
		t.Fatalf("provider holds %d charges for %s, want exactly 1: %+v", len(mine), paymentID, all)
	}
	c := mine[0]
	if c.IdempotencyKey != "paymentsapi:"+paymentID || c.Status != "succeeded" || c.RequestCount != 1 {
		t.Errorf("provider charge %+v: want key paymentsapi:%s, succeeded, requestCount 1 (recovery must look up, never create again)", c, paymentID)
	}
	if wantLookups && c.LookupCount < 1 {
		t.Errorf("provider charge %+v was never looked up: the recovery did not ask the provider", c)
	}
	return c
}

func recPool(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after pgtest.NewURL's clean-up, so it runs first: the
	// database can only be dropped once its connections are closed.
	t.Cleanup(pool.Close)
	return pool
}

func recCount(t *testing.T, db *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), "SELECT count(*) FROM "+query, args...).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", query, err)
	}
	return n
}

// recKeyState is what the database says about a key and its payment.
type recKeyState struct {
	PaymentID      string
	State          string
	FencingToken   int64
	LeaseExpiresAt *time.Time
	ResponseStatus *int
	ResponseBody   []byte
}

// recLoadKey returns the state of the tenant's key, ok=false if not claimed.
func recLoadKey(ctx context.Context, db *pgxpool.Pool, key string) (recKeyState, bool, error) {
	var s recKeyState
	err := db.QueryRow(ctx, `
		SELECT p.id, p.state, k.fencing_token, k.lease_expires_at, k.response_status, k.response_body
		FROM idempotency_keys k JOIN payments p ON p.id = k.resource_id
		WHERE k.tenant_id = $1 AND k.idempotency_key = $2`, recTenant, key).
		Scan(&s.PaymentID, &s.State, &s.FencingToken, &s.LeaseExpiresAt, &s.ResponseStatus, &s.ResponseBody)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	return s, err == nil, err
}

func recMustLoadKey(t *testing.T, db *pgxpool.Pool, key string) recKeyState {
	t.Helper()
	s, ok, err := recLoadKey(context.Background(), db, key)
	if err != nil || !ok {
		t.Fatalf("load key %s: found=%v err=%v", key, ok, err)
	}
	return s
}

// recTransitions lists the recorded moves of a payment, "FROM->TO", oldest first.
func recTransitions(t *testing.T, db *pgxpool.Pool, paymentID string) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `
		SELECT COALESCE(from_state, ''), to_state FROM payment_transitions
		WHERE payment_id = $1 ORDER BY id`, paymentID)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var from, to string
		if err := rows.Scan(&from, &to); err != nil {
			t.Fatal(err)
		}
		out = append(out, from+"->"+to)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// recEvents counts the outbox events of a payment by type.
func recEvents(t *testing.T, db *pgxpool.Pool, paymentID string) map[string]int {
	t.Helper()
	rows, err := db.Query(context.Background(), `
		SELECT event_type, count(*) FROM outbox_events WHERE aggregate_id = $1 GROUP BY event_type`, paymentID)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var typ string
		var n int
		if err := rows.Scan(&typ, &n); err != nil {
			t.Fatal(err)
		}
		out[typ] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// recWaitFor polls cond every 20ms until it holds; it fails the test when
// cond errs or timeout passes.
func recWaitFor(t *testing.T, timeout time.Duration, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		ok, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %s within %s", what, timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// recStop stops an API process gracefully (SIGTERM), killing it if it does
// not exit in time.
func recStop(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("API did not exit cleanly on SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("API did not exit within 30s of SIGTERM")
	}
}

func recProblemCode(body []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Code
}

// recCheckInUse checks a 409 IDEMPOTENCY_KEY_IN_USE answer and returns its
// Retry-After.
func recCheckInUse(t *testing.T, r httpResult) time.Duration {
	t.Helper()
	if code := recProblemCode(r.body); r.status != http.StatusConflict || code != "IDEMPOTENCY_KEY_IN_USE" {
		t.Fatalf("got %d %s, want 409 IDEMPOTENCY_KEY_IN_USE", r.status, r.body)
	}
	secs, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || secs < 1 {
		t.Fatalf("409 without a valid Retry-After (%q): %s", r.header.Get("Retry-After"), r.body)
	}
	return time.Duration(secs) * time.Second
}

type recPaymentBody struct {
	PaymentID         string `json:"paymentId"`
	Status            string `json:"status"`
	Amount            string `json:"amount"`
	ProviderReference string `json:"providerReference"`
}

func recDecodePayment(t *testing.T, b []byte) recPaymentBody {
	t.Helper()
	var p recPaymentBody
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("payment body %s: %v", b, err)
	}
	return p
}

// recMetric reports whether the API's /metrics has the sample line.
func recMetric(t *testing.T, apiURL, sample string) bool {
	t.Helper()
	m := call(t, "GET", apiURL+"/metrics", "", "", "")
	return bytes.Contains(m.body, []byte("\n"+sample+"\n"))
}

// The API is killed (SIGKILL) after it committed PROVIDER_REQUEST_SENT and
// the provider recorded the charge, but before the provider answered. A new
// API process on the same database must respect the dead owner's lease
// (409), then resume the payment by asking the provider, never by charging
// again.
//
// Two variants, because two mechanisms may resume the payment and each must
// be proved on its own:
//   - RetryTakesOver: RECONCILE_INTERVAL=1h, so the reconciler's only pass
//     (at start-up) runs while the dead owner's lease is live and finds
//     nothing; the client's retry is what takes the key over. This is the
//     stronger test of the takeover path: the 201 the client gets is the
//     original answer produced by its own retry, not a replay.
//   - ReconcilerResolves: RECONCILE_INTERVAL=1s; the client retries while the
//     lease is live (409), then stops; the reconciler alone must take the key
//     over and store the answer, which the next retry gets as a replay.
func TestKilledAPIMidFlightThenRetryChargesOnce(t *testing.T) {
	apiBin, simBin := proctest.Binaries(t)
	for _, v := range []struct {
		name     string
		interval string
		byRetry  bool
	}{
		{"RetryTakesOver", "1h", true},
		{"ReconcilerResolves", "1s", false},
	} {
		t.Run(v.name, func(t *testing.T) {
			testKilledMidFlight(t, apiBin, simBin, v.interval, v.byRetry)
		})
	}
}

func testKilledMidFlight(t *testing.T, apiBin, simBin, reconcileInterval string, byRetry bool) {
	simURL, db, env := recStartBackends(t, simBin, []string{"-slow", "2s"},
		"PROVIDER_TIMEOUT=3s", "LEASE_DURATION=4s", "RECONCILE_INTERVAL="+reconcileInterval)
	apiA, urlA := proctest.Start(t, apiBin, env)

	const key = "kill-mid-flight-1"
	body := `{"accountId":"acc_kill","amount":"42.00","currency":"EUR","merchantReference":"order-kill-1","paymentMethod":"pm_sim_slow"}`
	original := make(chan error, 1)
	go func() {
		r, err := recPost(urlA, key, body, nil)
		if err == nil {
			err = fmt.Errorf("the original was answered before the kill: %d %s", r.status, r.body)
		}
		original <- err
	}()

	// In flight: PROVIDER_REQUEST_SENT is committed and the provider holds
	// the charge, but (slow: 2s) has not answered yet.
	var inFlight recKeyState
	recWaitFor(t, 15*time.Second, "payment in PROVIDER_REQUEST_SENT with a charge at the provider", func(ctx context.Context) (bool, error) {
		s, ok, err := recLoadKey(ctx, db, key)
		if err != nil || !ok {
			return false, err
		}
		if s.State != "RECEIVED" && s.State != "PROVIDER_REQUEST_SENT" {
			return false, fmt.Errorf("payment already %s: the test was too slow to kill the API mid-flight", s.State)
		}
		if s.State != "PROVIDER_REQUEST_SENT" {
			return false, nil
		}
		charges, err := recSimCharges(simURL)
		if err != nil {
			return false, err
		}
		inFlight = s
		return len(charges) == 1 && charges[0].PaymentID == s.PaymentID, nil
	})
	if err := apiA.Process.Kill(); err != nil { // kill -9
		t.Fatal(err)
	}
	_ = apiA.Wait()
	paymentID := inFlight.PaymentID
	select {
	case err := <-original:
		t.Logf("the original request ended without an answer, as expected: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the original request did not end after the API was killed")
	}
	// The kill really was mid-flight: nothing after PROVIDER_REQUEST_SENT
	// was written, and the dead owner's lease still runs.
	after := recMustLoadKey(t, db, key)
	if after.State != "PROVIDER_REQUEST_SENT" || after.ResponseStatus != nil || after.FencingToken != 1 || after.LeaseExpiresAt == nil {
		t.Fatalf("after the kill: %+v, want PROVIDER_REQUEST_SENT, no answer, token 1, a lease", after)
	}
	leaseExpires := *after.LeaseExpiresAt
	t.Logf("API killed mid-flight; payment %s, the dead owner's lease runs until %s (in %s)",
		paymentID, leaseExpires.Format(time.RFC3339Nano), time.Until(leaseExpires).Round(time.Millisecond))

	_, urlB := proctest.Start(t, apiBin, env)

	// Retry while the dead owner's lease runs: every answer is 409.
	deadline := time.Now().Add(25 * time.Second)
	var (
		final         httpResult
		liveConflicts int
	)
	for final.status == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no final answer by the deadline (%d conflicts while the lease ran)", liveConflicts)
		}
		if !byRetry && !time.Now().Before(leaseExpires.Add(-500*time.Millisecond)) {
			break // the reconciler alone must resolve the payment now
		}
		r, err := recPost(urlB, key, body, nil)
		if err != nil {
			t.Fatal(err)
		}
		answered := time.Now()
		if answered.Before(leaseExpires) && r.status != http.StatusConflict {
			t.Fatalf("answered %d while the dead owner's lease was still live (until %s): %s",
				r.status, leaseExpires.Format(time.RFC3339Nano), r.body)
		}
		switch r.status {
		case http.StatusConflict:
			retryAfter := recCheckInUse(t, r)
			if answered.Before(leaseExpires) {
				liveConflicts++
			}
			pause := min(retryAfter, time.Until(deadline))
			if !byRetry {
				pause = min(pause, time.Until(leaseExpires.Add(-500*time.Millisecond)))
			}
			time.Sleep(max(pause, 50*time.Millisecond))
		case http.StatusCreated:
			final = r
		default:
			t.Fatalf("retry answered %d %s, want 409 while the lease runs, then 201", r.status, r.body)
		}
	}
	if liveConflicts == 0 {
		t.Fatal("no retry was answered while the dead owner's lease was live: the test did not observe the lease " +
			"(the restarted API came up too late?)")
	}

	if byRetry {
		if final.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("the final 201 is a replay: something other than the retry resumed the payment")
		}
	} else {
		// No request touches the key now: the reconciler must take it over
		// and store the answer.
		recWaitFor(t, 15*time.Second, "the reconciler storing the final answer", func(ctx context.Context) (bool, error) {
			s, _, err := recLoadKey(ctx, db, key)
			return s.ResponseStatus != nil, err
		})
		r, err := recPost(urlB, key, body, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry after the reconciler resolved the payment: %d %v %s, want a 201 replay", r.status, r.header, r.body)
		}
		final = r
	}
	t.Logf("final answer %d after %d conflicts while the lease ran", final.status, liveConflicts)

	p := recDecodePayment(t, final.body)
	if p.PaymentID != paymentID || p.Status != "SUCCEEDED" || p.Amount != "42.00" {
		t.Errorf("final payment %s, want %s SUCCEEDED 42.00", final.body, paymentID)
	}
	if loc := final.header.Get("Location"); loc != "/payments/"+paymentID {
		t.Errorf("Location %q", loc)
	}
	// Later retries replay the stored answer byte for byte.
	replay, err := recPost(urlB, key, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	if replay.status != http.StatusCreated || !bytes.Equal(replay.body, final.body) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %d %v %s, want the final answer byte for byte", replay.status, replay.header, replay.body)
	}
	if g := call(t, "GET", urlB+"/payments/"+paymentID, recSecret, "", ""); g.status != http.StatusOK ||
		recDecodePayment(t, g.body).Status != "SUCCEEDED" {
		t.Errorf("GET payment: %d %s", g.status, g.body)
	}

	// Money moved exactly once, as the provider itself reports, and the
	// recovery asked the provider.
	charge := recAssertChargedOnce(t, simURL, paymentID, true)
	if _, all := recChargesOf(t, simURL, paymentID); len(all) != 1 {
		t.Errorf("provider holds %d charges in all, want 1: %+v", len(all), all)
	}
	if p.ProviderReference != charge.ID {
		t.Errorf("providerReference %q, want the provider's charge %q", p.ProviderReference, charge.ID)
	}

	// The database: one payment, one key taken over exactly once, one
	// PaymentSucceeded, every move recorded.
	if n := recCount(t, db, "payments"); n != 1 {
		t.Errorf("%d payments, want 1", n)
	}
	if n := recCount(t, db, "idempotency_keys WHERE idempotency_key = $1", key); n != 1 {
		t.Errorf("%d key rows, want 1", n)
	}
	if k := recMustLoadKey(t, db, key); k.State != "COMPLETED" || k.FencingToken != 2 ||
		k.ResponseStatus == nil || *k.ResponseStatus != http.StatusCreated || !bytes.Equal(k.ResponseBody, final.body) {
		t.Errorf("key after recovery: state %s token %d status %v, want COMPLETED, token 2 (one takeover), stored 201",
			k.State, k.FencingToken, k.ResponseStatus)
	}
	if ev := recEvents(t, db, paymentID); !reflect.DeepEqual(ev, map[string]int{"PaymentCreated": 1, "PaymentSucceeded": 1}) {
		t.Errorf("outbox events %v, want one PaymentCreated and one PaymentSucceeded", ev)
	}
	want := []string{"->RECEIVED", "RECEIVED->PROVIDER_REQUEST_SENT", "PROVIDER_REQUEST_SENT->COMPLETED"}
	if got := recTransitions(t, db, paymentID); !reflect.DeepEqual(got, want) {
		t.Errorf("transitions %v, want %v", got, want)
	}

	// Who resumed the payment: one takeover either way (the retry's, or
	// the reconciler's, counted alike), and with the reconciler the retries
	// got only 409s and then the replay of what it stored.
	if !recMetric(t, urlB, "paymentsapi_idempotency_takeovers_total 1") {
		t.Error("the restarted API does not report exactly one takeover")
	}
	if !byRetry && !recMetric(t, urlB, `paymentsapi_reconciler_outcomes_total{outcome="succeeded"} 1`) {
		t.Error("the restarted API's reconciler does not report the payment it resolved")
	}
}

// Two API processes on one database and one provider: 30 concurrent
// requests with one key and one body, split across both, make one payment
// and one charge; the duplicates get 409 (in flight) or a replay. Then a
// duplicate sent to the other instance with Prefer: wait gets the original's
// answer, which only LISTEN/NOTIFY across processes can tell it about.
func TestTwoAPIProcessesOneDatabaseChargeOnce(t *testing.T) {
	apiBin, simBin := proctest.Binaries(t)
	simURL, db, env := recStartBackends(t, simBin, []string{"-slow", "1s"},
		"PROVIDER_TIMEOUT=5s", "LEASE_DURATION=30s", "RECONCILE_INTERVAL=5s")
	_, urlA := proctest.Start(t, apiBin, env)
	_, urlB := proctest.Start(t, apiBin, env)
	targets := []string{urlA, urlB}

	const n = 30
	const key = "two-instances-1"
	body := `{"accountId":"acc_two","amount":"19.99","currency":"EUR","merchantReference":"order-two-1","paymentMethod":"pm_sim_slow"}`
	type answer struct {
		target int
		r      httpResult
		err    error
	}
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		answers[i].target = i % 2
		wg.Go(func() {
			<-start
			answers[i].r, answers[i].err = recPost(targets[i%2], key, body, nil)
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	t.Logf("%d concurrent requests answered in %s", n, time.Since(began).Round(time.Millisecond))

	var (
		originals, replays int
		conflicts          = [2]int{}
		original           answer
	)
	for i, a := range answers {
		if a.err != nil {
			t.Fatalf("request %d: %v", i, a.err)
		}
		switch {
		case a.r.status == http.StatusCreated && a.r.header.Get("Idempotent-Replayed") == "":
			originals++
			original = a
		case a.r.status == http.StatusCreated && a.r.header.Get("Idempotent-Replayed") == "true":
			replays++
		case a.r.status == http.StatusConflict:
			recCheckInUse(t, a.r)
			conflicts[a.target]++
		default:
			t.Fatalf("request %d answered %d %v %s", i, a.r.status, a.r.header, a.r.body)
		}
	}
	t.Logf("originals %d, replays %d, conflicts %d on A and %d on B", originals, replays, conflicts[0], conflicts[1])
	if originals != 1 {
		t.Fatalf("%d original (non-replayed) 201 answers, want exactly 1", originals)
	}
	if conflicts[0]+conflicts[1] == 0 {
		t.Fatal("no 409 IDEMPOTENCY_KEY_IN_USE: no duplicate met the original in flight, the test proved nothing")
	}
	if other := 1 - original.target; conflicts[other] == 0 {
		t.Errorf("the instance that did not serve the original answered no 409: the key's owner on the other process was never seen")
	}
	for i, a := range answers {
		if a.r.status == http.StatusCreated && !bytes.Equal(a.r.body, original.r.body) {
			t.Errorf("answer %d differs from the original:\n%s\n%s", i, a.r.body, original.r.body)
		}
	}
	p := recDecodePayment(t, original.r.body)
	if p.Status != "SUCCEEDED" {
		t.Errorf("original %s", original.r.body)
	}
	if c := recAssertChargedOnce(t, simURL, p.PaymentID, false); c.ID != p.ProviderReference {
		t.Errorf("providerReference %q, want %q", p.ProviderReference, c.ID)
	}
	if n := recCount(t, db, "payments"); n != 1 {
		t.Errorf("%d payments, want 1", n)
	}
	if k := recMustLoadKey(t, db, key); k.PaymentID != p.PaymentID || k.FencingToken != 1 || k.State != "COMPLETED" {
		t.Errorf("key %+v, want payment %s COMPLETED by its first owner (token 1, no takeover)", k, p.PaymentID)
	}
	if ev := recEvents(t, db, p.PaymentID); !reflect.DeepEqual(ev, map[string]int{"PaymentCreated": 1, "PaymentSucceeded": 1}) {
		t.Errorf("outbox events %v", ev)
	}

	// Prefer: wait across instances. The original runs on A; a duplicate on
	// B waits for it and gets its answer.
	const key2 = "two-instances-wait"
	body2 := `{"accountId":"acc_two","amount":"7.50","currency":"EUR","merchantReference":"order-two-2","paymentMethod":"pm_sim_slow"}`
	type timed struct {
		r   httpResult
		err error
		at  time.Time
	}
	origCh := make(chan timed, 1)
	go func() {
		r, err := recPost(urlA, key2, body2, nil)
		origCh <- timed{r, err, time.Now()}
	}()
	recWaitFor(t, 15*time.Second, "the second payment in flight on A", func(ctx context.Context) (bool, error) {
		s, ok, err := recLoadKey(ctx, db, key2)
		return ok && s.State == "PROVIDER_REQUEST_SENT", err
	})
	sentB := time.Now()
	waited, err := recPost(urlB, key2, body2, map[string]string{"Prefer": "wait=10"})
	elapsed := time.Since(sentB)
	if err != nil {
		t.Fatal(err)
	}
	var orig timed
	select {
	case orig = <-origCh:
	case <-time.After(30 * time.Second):
		t.Fatal("the original on A did not answer")
	}
	if orig.err != nil {
		t.Fatal(orig.err)
	}
	t.Logf("Prefer: wait=10 on B answered %d after %s", waited.status, elapsed.Round(time.Millisecond))
	if orig.r.status != http.StatusCreated || orig.r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("original on A: %d %v %s", orig.r.status, orig.r.header, orig.r.body)
	}
	if !orig.at.After(sentB) {
		t.Fatal("the original finished before the duplicate was sent: the test did not exercise waiting")
	}
	if waited.status != orig.r.status || !bytes.Equal(waited.body, orig.r.body) || waited.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("duplicate on B with Prefer: wait=10 answered %d %v %s\nwant the original's %d %s byte for byte, replayed",
			waited.status, waited.header, waited.body, orig.r.status, orig.r.body)
	}
	if waited.header.Get("Location") != orig.r.header.Get("Location") {
		t.Errorf("Location %q, want %q", waited.header.Get("Location"), orig.r.header.Get("Location"))
	}
	if elapsed >= 9*time.Second {
		t.Errorf("the duplicate waited %s: it was not woken by the original's notification", elapsed)
	}
	p2 := recDecodePayment(t, orig.r.body)
	recAssertChargedOnce(t, simURL, p2.PaymentID, false)
	if n := recCount(t, db, "payments"); n != 2 {
		t.Errorf("%d payments, want 2", n)
	}
}

// A payment whose outcome is unknown (the provider charged, its answer was
// lost) is resolved by the operator's command `paymentsapi reconcile -once`,
// run as its own process while the API is down: it asks the provider, never
// charges again, and stores the answer that later retries replay.
func TestReconcileOnceCommand(t *testing.T) {
	apiBin, simBin := proctest.Binaries(t)
	// RECONCILE_INTERVAL=1h: the API's own reconciler runs once at start-up,
	// before the payment exists, so only the command can resolve it.
	simURL, db, env := recStartBackends(t, simBin, []string{"-hang", "60s"},
		"PROVIDER_TIMEOUT=500ms", "LEASE_DURATION=2s", "RECONCILE_INTERVAL=1h")
	api, apiURL := proctest.Start(t, apiBin, env)

	// A settled payment, which the reconciler must leave alone.
	settled := call(t, "POST", apiURL+"/payments", recSecret, "reconcile-settled",
		`{"accountId":"acc_rec","amount":"3.00","currency":"EUR","merchantReference":"order-rec-0","paymentMethod":"pm_card_visa"}`)
	if settled.status != http.StatusCreated {
		t.Fatalf("settled payment: %d %s", settled.status, settled.body)
	}

	const key = "reconcile-unknown-1"
	body := `{"accountId":"acc_rec","amount":"12.34","currency":"EUR","merchantReference":"order-rec-1","paymentMethod":"pm_sim_timeout_after_success"}`
	first := call(t, "POST", apiURL+"/payments", recSecret, key, body)
	if first.status != http.StatusAccepted {
		t.Fatalf("outcome unknown: got %d %s, want 202", first.status, first.body)
	}
	p := recDecodePayment(t, first.body)
	if p.Status != "PROCESSING" || first.header.Get("Location") != "/payments/"+p.PaymentID || first.header.Get("Retry-After") == "" {
		t.Fatalf("202: %v %s, want PROCESSING with Location and Retry-After", first.header, first.body)
	}
	if k := recMustLoadKey(t, db, key); k.State != "UNKNOWN_REQUIRES_RECOVERY" || k.ResponseStatus != nil {
		t.Fatalf("after the 202: %+v, want UNKNOWN_REQUIRES_RECOVERY without a stored answer", k)
	}
	// The provider did charge; only its answer was lost.
	if mine, all := recChargesOf(t, simURL, p.PaymentID); len(mine) != 1 || mine[0].Status != "succeeded" || mine[0].RequestCount != 1 {
		t.Fatalf("provider charges %+v", all)
	}

	recStop(t, api)

	reconcileOnce := func() map[string]int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, apiBin, "reconcile", "-once")
		cmd.Env = append(os.Environ(), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("paymentsapi reconcile -once: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
		}
		var out struct {
			Reconciled map[string]int `json:"reconciled"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || out.Reconciled == nil {
			t.Fatalf("reconcile -once stdout is not {\"reconciled\": {...}}: %v\n%s", err, &stdout)
		}
		t.Logf("reconcile -once: %s", bytes.TrimSpace(stdout.Bytes()))
		return out.Reconciled
	}
	if got := reconcileOnce(); !reflect.DeepEqual(got, map[string]int{"succeeded": 1}) {
		t.Fatalf("reconcile -once reported %v, want exactly one succeeded", got)
	}

	k := recMustLoadKey(t, db, key)
	if k.State != "COMPLETED" || k.ResponseStatus == nil || *k.ResponseStatus != http.StatusCreated || k.FencingToken != 2 {
		t.Errorf("after reconcile: state %s status %v token %d, want COMPLETED with a stored 201, token 2",
			k.State, k.ResponseStatus, k.FencingToken)
	}
	want := []string{"->RECEIVED", "RECEIVED->PROVIDER_REQUEST_SENT",
		"PROVIDER_REQUEST_SENT->UNKNOWN_REQUIRES_RECOVERY", "UNKNOWN_REQUIRES_RECOVERY->COMPLETED"}
	if got := recTransitions(t, db, p.PaymentID); !reflect.DeepEqual(got, want) {
		t.Errorf("transitions %v, want %v", got, want)
	}
	if ev := recEvents(t, db, p.PaymentID); !reflect.DeepEqual(ev, map[string]int{"PaymentCreated": 1, "PaymentSucceeded": 1}) {
		t.Errorf("outbox events %v", ev)
	}
	charge := recAssertChargedOnce(t, simURL, p.PaymentID, true)

	// Nothing is left to do: a second pass reports nothing.
	if got := reconcileOnce(); len(got) != 0 {
		t.Errorf("second reconcile -once reported %v, want nothing", got)
	}

	// The restarted API serves the resolved payment, and a retry replays the
	// answer the reconciler stored.
	_, apiURL = proctest.Start(t, apiBin, env)
	g := call(t, "GET", apiURL+"/payments/"+p.PaymentID, recSecret, "", "")
	got := recDecodePayment(t, g.body)
	if g.status != http.StatusOK || got.Status != "SUCCEEDED" || got.ProviderReference != charge.ID {
		t.Errorf("GET payment: %d %s, want SUCCEEDED with providerReference %s", g.status, g.body, charge.ID)
	}
	retry := call(t, "POST", apiURL+"/payments", recSecret, key, body)
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" ||
		!bytes.Equal(retry.body, k.ResponseBody) || recDecodePayment(t, retry.body).Status != "SUCCEEDED" {
		t.Errorf("retry after reconcile: %d %v %s, want the stored 201 replayed", retry.status, retry.header, retry.body)
	}
	recAssertChargedOnce(t, simURL, p.PaymentID, true)
	if _, all := recChargesOf(t, simURL, p.PaymentID); len(all) != 2 {
		t.Errorf("provider holds %d charges, want 2 (the settled payment and this one): %+v", len(all), all)
	}
}
