package app_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/backoff"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/relay"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgembed"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// privateCluster starts a PostgreSQL server for t alone (one a test may
// crash without harming the others), with a migrated database, and returns
// it and a pool on that database; both stop when t ends. Unlike the shared
// test server it keeps the default durability (fsync, synchronous commit):
// an immediate shutdown must not lose a commit the service was told of.
func privateCluster(t *testing.T) (*pgembed.Cluster, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "restart-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil { // as root, the server runs as postgres
		t.Fatal(err)
	}
	cluster, err := pgembed.Start(ctx, pgembed.Options{DataDir: filepath.Join(dir, "pg"), MaxConnections: 60})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err := cluster.EnsureDatabase(ctx, "payments"); err != nil {
		t.Fatal(err)
	}
	pool, err := database.Open(ctx, cluster.URL("payments"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := database.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return cluster, pool
}

// restartClient is one of the clients of TestDatabaseRestartUnderLoad: it
// creates payments one after the other and retries each with its key until
// it gets a final answer.
type restartClient struct {
	t    *testing.T
	urls []string
	http *http.Client

	unavailable *atomic.Int64 // 503s seen by all clients
	mu          *sync.Mutex
	finals      map[string]final // by key
}

// final is a key's final answer, and the payment method it was sent with.
type final struct{ paymentID, method string }

// create sends POST /payments with key and method until the answer is
// final (201), retrying after a 202 (outcome pending), a 409 (key in use)
// and a 503 (with Retry-After). Anything else, a 500 first, fails the test.
func (c *restartClient) create(key, method string) bool {
	body := fmt.Appendf(nil, `{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":%q,"paymentMethod":%q}`, key, method)
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		status, header, answer, err := c.post(c.urls[rand.IntN(len(c.urls))], key, body, "")
		if err != nil {
			c.t.Errorf("key %s: %v", key, err)
			return false
		}
		switch status {
		case http.StatusCreated:
			var p struct{ PaymentID, Status string }
			if err := json.Unmarshal(answer, &p); err != nil || p.Status != "SUCCEEDED" {
				c.t.Errorf("key %s: 201 %s", key, answer)
				return false
			}
			c.mu.Lock()
			c.finals[key] = final{p.PaymentID, method}
			c.mu.Unlock()
			return true
		case http.StatusServiceUnavailable:
			c.unavailable.Add(1)
			if header.Get("Retry-After") == "" {
				c.t.Errorf("key %s: 503 without Retry-After: %s", key, answer)
			}
		case http.StatusAccepted, http.StatusConflict:
		default:
			c.t.Errorf("key %s: %d %s", key, status, answer)
			return false
		}
		time.Sleep(50*time.Millisecond + rand.N(100*time.Millisecond))
	}
	c.t.Errorf("key %s: no final answer in 40 s", key)
	return false
}

func (c *restartClient) post(url, key string, body []byte, prefer string) (int, http.Header, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/payments", bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+servicetest.SecretA)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// TestDatabaseRestartUnderLoad: PostgreSQL crashes and
// restarts (immediate shutdown, as `pg_ctl restart -m immediate`, then 2 s
// down and crash recovery) while 8 clients create payments on two API
// instances and retry each with its key. Every payment ends with one final
// answer (its retries replay it) and one charge at the provider; during
// the outage the clients get 503 with Retry-After, never a 500; and without
// restarting the API, the pool serves new payments, both instances' LISTEN
// connections come back (a Prefer: wait duplicate on one instance is woken
// by the other's notification), and the relay publishes every event.
func TestDatabaseRestartUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, pool := privateCluster(t)
	if _, err := apikeys.Add(ctx, pool, apikeys.Hasher{}, []apikeys.Pair{{Tenant: "tenant_a", Secret: servicetest.SecretA}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	simSrv, err := sim.Start(ctx, "127.0.0.1:0", sim.Options{SlowDelay: time.Second, HangFor: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = simSrv.Close() })
	prov := simclient.New(simSrv.URL(), nil)
	// Real time, and a short lease: a request cut off by the crash keeps its
	// key until the lease runs out, and a retry takes over after that.
	cfg := app.Config{
		CommitMode: pgtest.CommitMode(),
		ReplayTTL:  24 * time.Hour, Lease: 4 * time.Second, ProviderTimeout: 2 * time.Second,
		ProviderKeyWindow: 24 * time.Hour, RetryAfter: time.Second,
		Recovery: idempotency.RecoveryPolicy{Backoff: backoff.Policy{Base: 500 * time.Millisecond}, MaxAttempts: 100},
	}
	urlA, coreA, regA := servicetest.StartInstance(t, pool, prov, clock.System{}, cfg, httpapi.RateLimit{})
	urlB, _, regB := servicetest.StartInstance(t, pool, prov, clock.System{}, cfg, httpapi.RateLimit{})
	// The first instance's workers, as cmd/paymentsapi runs them, with the
	// outbox reader OUTBOX_RELAY names (auto: the stream here). The crash
	// ends the relay's session, and it reconnects, after at most a
	// second's wait, to where it last confirmed (what it published but had
	// not confirmed comes again: at least once).
	reader, _, err := relay.Choose(ctx, pool, relay.Mode(cmp.Or(os.Getenv("OUTBOX_RELAY"), "auto")))
	if err != nil {
		t.Fatal(err)
	}
	published := &publishedSet{ids: map[string]int{}}
	rl, _, err := relay.New(reader, outbox.RelayDeps{ConnString: cluster.URL("payments"), DB: pool, Publisher: published, Clock: clock.System{}, Log: servicetest.TestLogger()},
		outbox.SendConfig{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	workers, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { rl.Run(workers) })
	wg.Go(func() { coreA.Reconciler.Run(workers, 500*time.Millisecond) })
	t.Cleanup(func() { stopWorkers(); wg.Wait() })

	var (
		unavailable atomic.Int64
		mu          sync.Mutex
		finals      = map[string]final{}
		done        atomic.Int64
		stop        = make(chan struct{})
		clients     sync.WaitGroup
	)
	httpClient := &http.Client{Timeout: 20 * time.Second}
	for i := range 8 {
		c := &restartClient{t: t, urls: []string{urlA, urlB}, http: httpClient, unavailable: &unavailable, mu: &mu, finals: finals}
		clients.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				// Every fourth payment takes a second at the provider: the
				// crash finds most clients between a charge and its record.
				method := "pm_card_visa"
				if n%4 == 3 {
					method = "pm_sim_slow"
				}
				if !c.create(fmt.Sprintf("restart-c%d-p%03d", i, n), method) {
					return
				}
				done.Add(1)
			}
		})
	}
	// Crash while payments flow; let them flow on a while after the restart.
	deadline := time.Now().Add(10 * time.Second)
	for done.Load() < 16 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// The crash must cut at least one payment between its charge and its
	// record. Wait until a slow payment has just been sent to the provider:
	// its row says PROVIDER_REQUEST_SENT, and its request left (last_sent_at,
	// written with the move, before the call) less than inFlight ago. The
	// simulator answers it SlowDelay (1 s) after it arrived, so it is still
	// at the provider when the database is killed right below, and its answer
	// comes while the database is down (2 s): the original request cannot
	// record it, and recovery has to look the charge up at the provider.
	const inFlight = 300 * time.Millisecond
	var slowKey string
	deadline = time.Now().Add(15 * time.Second)
	for {
		err := pool.QueryRow(ctx, `SELECT merchant_reference FROM payments
			WHERE state = 'PROVIDER_REQUEST_SENT' AND payment_method = $1 AND last_sent_at > $2
			ORDER BY last_sent_at DESC LIMIT 1`, sim.MethodSlow, time.Now().Add(-inFlight)).Scan(&slowKey)
		if err == nil {
			break
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			close(stop)
			clients.Wait()
			t.Fatal("no slow payment was at the provider in 15 s: nothing for the crash to cut")
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := done.Load()
	if err := cluster.Restart(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	restarted := done.Load()
	time.Sleep(2 * time.Second)
	close(stop)
	clients.Wait()
	lookups := 0.0
	for _, reg := range []*prometheus.Registry{regA, regB} {
		lookups += (&servicetest.Env{T: t, Registry: reg}).Metric("paymentsapi_provider_call_duration_seconds", map[string]string{"operation": "lookup"})
	}
	t.Logf("crash while %s was at the provider; %d payments before the crash, %d by the end of the outage, %d in all; %d answers 503; %v provider lookups",
		slowKey, before, restarted, done.Load(), unavailable.Load(), lookups)
	if t.Failed() {
		return
	}
	if unavailable.Load() == 0 {
		t.Error("no client saw the outage (no 503)")
	}
	if lookups == 0 {
		t.Error("the crash cut no payment between its charge and its record (no lookup at the provider)")
	}
	if done.Load() <= restarted {
		t.Error("no payment was made after the restart")
	}

	// One final answer per payment: a retry now replays it.
	client := &restartClient{t: t, urls: []string{urlB}, http: httpClient, unavailable: &unavailable, mu: &mu, finals: map[string]final{}}
	for key, f := range finals {
		if !client.create(key, f.method) || client.finals[key] != f {
			t.Errorf("key %s: answered %v, then %v", key, f, client.finals[key])
		}
	}
	// One payment and one charge per key.
	var stored int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	charges := map[string]int{}
	for _, c := range simSrv.Simulator().Charges() {
		charges[c.IdempotencyKey]++
	}
	if stored != len(finals) || len(charges) != len(finals) {
		t.Errorf("%d keys, %d payments stored, charges under %d provider keys", len(finals), stored, len(charges))
	}
	for key, f := range finals {
		if n := charges[payments.ProviderKey(f.paymentID)]; n != 1 {
			t.Errorf("key %s, payment %s: charged %d times", key, f.paymentID, n)
		}
	}
	// The payment the crash cut at the provider was charged by its one
	// request, and recovery found the charge by a lookup: it never sent it
	// again (a payment cut before its request left would be looked up too,
	// so the lookups counted above do not prove this alone).
	if f, ok := finals[slowKey]; !ok {
		t.Errorf("the payment cut at the provider (key %s) has no final answer", slowKey)
	} else {
		for _, c := range simSrv.Simulator().Charges() {
			if c.IdempotencyKey == payments.ProviderKey(f.paymentID) && (c.RequestCount != 1 || c.LookupCount < 1) {
				t.Errorf("the payment cut at the provider: %d requests and %d lookups at the provider, want 1 request, then lookups",
					c.RequestCount, c.LookupCount)
			}
		}
	}

	// Both LISTEN connections are back, by themselves.
	listening := func() int {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, "LISTEN "+idempotency.NotifyChannel).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline = time.Now().Add(15 * time.Second)
	for listening() < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := listening(); n < 2 {
		t.Fatalf("%d instances listen for notifications after the restart, want 2", n)
	}
	// A duplicate waiting on B is woken by A's notification.
	slow := []byte(`{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"restart-slow","paymentMethod":"pm_sim_slow"}`)
	original := make(chan []byte, 1)
	go func() {
		status, _, answer, err := client.post(urlA, "restart-slow", slow, "")
		if err != nil || status != http.StatusCreated {
			t.Errorf("slow original: %d %s %v", status, answer, err)
		}
		original <- answer
	}()
	deadline = time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM payments WHERE state = 'PROVIDER_REQUEST_SENT'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	status, _, waited, err := client.post(urlB, "restart-slow", slow, "wait=8")
	first := <-original
	if err != nil || status != http.StatusCreated || !bytes.Equal(waited, first) {
		t.Errorf("waiting duplicate: %d %s %v, want the original's %s", status, waited, err, first)
	}
	e := &servicetest.Env{T: t, Registry: regB}
	if n := e.Metric("paymentsapi_idempotency_waits_total", map[string]string{"result": "notified"}); n < 1 {
		t.Errorf("the wait on B was not ended by a notification (lease_expired %v, timeout %v)",
			e.Metric("paymentsapi_idempotency_waits_total", map[string]string{"result": "lease_expired"}),
			e.Metric("paymentsapi_idempotency_waits_total", map[string]string{"result": "timeout"}))
	}

	// The relay got through the outage too: every event in the outbox
	// reached the publisher (nothing on the rows says so: the stream relay
	// writes nothing per event), and none was parked.
	deadline = time.Now().Add(15 * time.Second)
	for {
		rows, err := pool.Query(ctx, `SELECT id::text FROM outbox_events`)
		if err != nil {
			t.Fatal(err)
		}
		all, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		missing := published.missing(all)
		if len(all) > 0 && len(missing) == 0 {
			t.Logf("%d events published, %d of them more than once", len(all), published.repeated())
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events still unpublished 15 s after the restart (e.g. %v)", len(missing), len(all), missing[:min(len(missing), 5)])
		}
		time.Sleep(50 * time.Millisecond)
	}
	var parked int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_parked`).Scan(&parked); err != nil || parked != 0 {
		t.Errorf("%d events parked (%v): a database outage must park nothing", parked, err)
	}
}

// publishedSet is a publisher that accepts every event and counts each
// event id it got.
type publishedSet struct {
	mu  sync.Mutex
	ids map[string]int
}

func (p *publishedSet) Publish(_ context.Context, e outbox.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids[e.ID]++
	return nil
}

// missing returns the ids of all that were never published.
func (p *publishedSet) missing(all []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, id := range all {
		if p.ids[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// repeated counts the events published more than once.
func (p *publishedSet) repeated() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.ids {
		if c > 1 {
			n++
		}
	}
	return n
}
