//go:build failover

package failover_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/client"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/pgcluster"
	"github.com/paymentsapi/paymentsapi/internal/proctest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

// The tenant of the API processes, and its key.
const (
	tenant = "failover"
	secret = "sk_failover"
)

// apiEnv is the environment of an API process on the database at dbURL
// with the simulator at simURL: a short reconcile interval and provider
// timeout, so that the service resolves quickly what a failover left open.
func apiEnv(dbURL, simURL string) []string {
	return []string{
		"DATABASE_URL=" + dbURL, "PROVIDER=sim", "PROVIDER_URL=" + simURL,
		"API_KEYS=" + tenant + ":" + secret, "HTTP_ADDR=127.0.0.1:0",
		"RECONCILE_INTERVAL=1s", "LEASE_DURATION=15s", "PROVIDER_TIMEOUT=3s",
	}
}

// simCharges lists the simulator's charges: its own books.
func simCharges(simURL string) ([]sim.ChargeRecord, error) {
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(simURL + "/_sim/charges")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list struct{ Charges []sim.ChargeRecord }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("decode /_sim/charges: %w", err)
	}
	return list.Charges, nil
}

// openPool opens a pool on dbURL, closed when the test ends.
func openPool(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// waitFor checks cond every 20 ms, each time with 5 s to answer, until it
// holds; it fails the test if cond does not hold within limit. An error
// is not fatal: a server that is going away may answer one.
func waitFor(t *testing.T, limit time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	testio.Eventually(t, what, limit, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ok, err := cond(ctx)
		return ok && err == nil, fmt.Sprintf("not within %s; last error: %v", limit, err)
	})
}

// statusRecorder counts every status an API answered a client attempt.
type statusRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen map[int]int
}

func (s *statusRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if err == nil {
		s.mu.Lock()
		s.seen[resp.StatusCode]++
		s.mu.Unlock()
	}
	return resp, err
}

func (s *statusRecorder) counts() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]int, len(s.seen))
	for k, v := range s.seen {
		out[k] = v
	}
	return out
}

// foClient is a Client of the API at url that retries as long as a
// failover takes: more attempts and a budget that does not run dry, short
// waits (the server's Retry-After still wins).
func foClient(t *testing.T, url string, rec *statusRecorder) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{
		BaseURL:    url,
		APIKey:     secret,
		HTTPClient: &http.Client{Transport: rec},
		Retry: client.RetryPolicy{
			MaxAttempts: 40, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second,
			MaxRetryAfter: 5 * time.Second, AttemptTimeout: 20 * time.Second,
			Budget: client.Budget{Ratio: 1, Burst: 10000},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// foOrder is one payment a client asked for: its key, and the payment
// the service acknowledged (201) under it, if it did.
type foOrder struct {
	key, reference string
	paymentID      string
}

func foRequest(o *foOrder) client.CreatePaymentRequest {
	return client.CreatePaymentRequest{AccountID: "acc_failover", Amount: "12.34", Currency: "EUR",
		MerchantReference: o.reference, PaymentMethod: "pm_card_visa"}
}

// foCreate creates o's payment with its key until the service acknowledges
// it or ctx ends; it records the acknowledged paymentId (and fails the test
// if a retry acknowledged another one).
func foCreate(ctx context.Context, t *testing.T, c *client.Client, o *foOrder) error {
	for ctx.Err() == nil {
		res, err := c.CreatePayment(ctx, foRequest(o), client.WithIdempotencyKey(o.key))
		if err != nil || res.StatusCode != http.StatusCreated {
			// The client's own retries ran out (or the outcome was still
			// unknown): a real client keeps the key and tries again later.
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if o.paymentID != "" && o.paymentID != res.Payment.PaymentID {
			t.Errorf("key %s: acknowledged %s, then %s on retry", o.key, o.paymentID, res.Payment.PaymentID)
		}
		o.paymentID = res.Payment.PaymentID
		return nil
	}
	return ctx.Err()
}

// foStart starts the simulator, a pair and two API processes on the
// pair's multi-host URL, and returns the simulator's URL and a client per
// API process with their recorder.
func foStart(t *testing.T, apiBin, simBin string, sync bool) (*pgcluster.Pair, string, []*client.Client, *statusRecorder) {
	t.Helper()
	_, simURL := proctest.Start(t, simBin, nil, "-addr", "127.0.0.1:0")
	pair := pgcluster.Start(t, pgcluster.Options{Synchronous: sync})
	env := apiEnv(pair.URL(), simURL)
	_, urlA := proctest.Start(t, apiBin, env)
	_, urlB := proctest.Start(t, apiBin, env)
	rec := &statusRecorder{next: http.DefaultTransport, seen: map[int]int{}}
	return pair, simURL, []*client.Client{foClient(t, urlA, rec), foClient(t, urlB, rec)}, rec
}

// foCheck checks the database (on the promoted standby) and the
// provider's books against what the clients were acknowledged.
func foCheck(t *testing.T, db *pgxpool.Pool, simURL string, orders []*foOrder) {
	t.Helper()
	charges, err := simCharges(simURL)
	if err != nil {
		t.Fatal(err)
	}
	byPayment := map[string]int{}
	for _, c := range charges {
		byPayment[c.PaymentID]++
	}
	rows, err := db.Query(context.Background(), `SELECT id FROM payments`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	for _, id := range ids {
		stored[id] = true
	}
	for _, o := range orders {
		if o.paymentID == "" {
			t.Errorf("key %s was never acknowledged", o.key)
			continue
		}
		if !stored[o.paymentID] {
			t.Errorf("acknowledged payment %s (key %s) is not in the database", o.paymentID, o.key)
		}
		if byPayment[o.paymentID] != 1 {
			t.Errorf("payment %s has %d charges at the provider, want 1", o.paymentID, byPayment[o.paymentID])
		}
	}
	if got := len(ids); got != len(orders) {
		t.Errorf("%d payments in the database for %d keys", got, len(orders))
	}
	if len(charges) != len(orders) {
		t.Errorf("%d charges at the provider for %d keys: someone was charged twice", len(charges), len(orders))
	}
}

// foWaitResumed waits until the relays reached every event and the
// reconciler left no key unfinished. Every event is reached once the
// database's slot has confirmed a record written after the last key
// finished (the relay on the old primary reached some, the new one's slot,
// created after the failover, catches up the rest), or, with the poller
// (OUTBOX_RELAY=poll), once no event is after its position.
func foWaitResumed(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	var mark string // written once no key is open
	waitFor(t, 30*time.Second, "every outbox event published and every key finished", func(ctx context.Context) (bool, error) {
		var open int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE completed_at IS NULL`).Scan(&open); err != nil {
			return false, err
		}
		if open != 0 {
			mark = ""
			return false, nil
		}
		if mark == "" {
			if err := db.QueryRow(ctx, `SELECT pg_logical_emit_message(false, 'paymentsapi.test.mark', '')::text`).Scan(&mark); err != nil {
				return false, err
			}
		}
		var behind *int64 // null: no slot (nor poller's position) yet
		err := db.QueryRow(ctx, `
			SELECT CASE WHEN EXISTS (SELECT FROM outbox_poll_position) THEN
			           (SELECT count(*) FROM outbox_events e, outbox_poll_position p
			            WHERE e.order_xid >= p.order_xid AND (e.order_xid, e.seq) > (p.order_xid, p.seq))
			       ELSE (SELECT pg_wal_lsn_diff($1::pg_lsn, confirmed_flush_lsn)::bigint
			             FROM pg_replication_slots WHERE slot_name = $2 AND database = current_database()) END`,
			mark, stream.SlotFor(db.Config().ConnConfig.Database)).Scan(&behind)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return false, err
		}
		return behind != nil && *behind <= 0, nil
	})
}

// foCheckWaitWakes checks that the `Prefer: wait` listeners follow the
// failover: a duplicate on the second instance, waiting for an original in
// flight on the first, is woken by the original's notification on the new
// primary, well before its wait runs out.
func foCheckWaitWakes(t *testing.T, db *pgxpool.Pool, clients []*client.Client) {
	t.Helper()
	o := &foOrder{key: "fo-wait-" + t.Name(), reference: "order-wait"}
	req := foRequest(o)
	req.PaymentMethod = "pm_sim_slow" // the simulator takes 2 s
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	orig := make(chan error, 1)
	go func() {
		_, err := clients[0].CreatePayment(ctx, req, client.WithIdempotencyKey(o.key))
		orig <- err
	}()
	waitFor(t, 15*time.Second, "the slow payment in flight on the first instance", func(ctx context.Context) (bool, error) {
		var state string
		err := db.QueryRow(ctx, `
			SELECT p.state FROM idempotency_keys k JOIN payments p ON p.id = k.resource_id
			WHERE k.tenant_id = $1 AND k.idempotency_key = $2`, tenant, o.key).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return state == "PROVIDER_REQUEST_SENT", err
	})
	sent := time.Now()
	res, err := clients[1].CreatePayment(ctx, req, client.WithIdempotencyKey(o.key), client.WithPreferWait(10*time.Second))
	waited := time.Since(sent)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-orig; err != nil {
		t.Fatal(err)
	}
	if !res.Replayed || res.Attempts != 1 || waited >= 9*time.Second {
		t.Errorf("the duplicate with Prefer: wait=10 answered %d (replayed %v) after %d attempts and %s: its listener was not woken",
			res.StatusCode, res.Replayed, res.Attempts, waited.Round(time.Millisecond))
	}
}

// Synchronous standby: under load, the primary crashes (or freezes), the
// standby is promoted. Every acknowledged payment is there, charged once,
// nothing answered 500, and the relay and the reconciler carry on.
func TestFailoverToSynchronousStandbyUnderLoad(t *testing.T) {
	if pgcluster.BinDir() == "" {
		t.Skip("no PostgreSQL server binaries")
	}
	apiBin, simBin := proctest.Binaries(t)
	for _, mode := range []string{"crash", "freeze"} {
		t.Run(mode, func(t *testing.T) {
			began := time.Now()
			pair, simURL, clients, rec := foStart(t, apiBin, simBin, true)

			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var (
				mu      sync.Mutex
				orders  []*foOrder
				stop    atomic.Bool
				wg      sync.WaitGroup
				serial  atomic.Int64
				workers = 6
			)
			for w := range workers {
				wg.Go(func() {
					c := clients[w%2]
					for !stop.Load() {
						n := serial.Add(1)
						o := &foOrder{key: fmt.Sprintf("fo-%s-%d", mode, n), reference: fmt.Sprintf("order-%d", n)}
						mu.Lock()
						orders = append(orders, o)
						mu.Unlock()
						if err := foCreate(ctx, t, c, o); err != nil {
							return
						}
					}
				})
			}
			time.Sleep(2 * time.Second)
			before := serial.Load()
			if mode == "crash" {
				pair.Primary.Crash()
			} else {
				pair.Primary.Freeze()
			}
			time.Sleep(time.Second)
			pair.Promote()
			promoted := time.Now()
			// Load goes on until the service has acknowledged payments made
			// after the promotion, then a little longer.
			waitFor(t, 45*time.Second, "payments acknowledged after the promotion", func(context.Context) (bool, error) {
				return serial.Load() > before+int64(3*workers), nil
			})
			firstAfter := time.Since(promoted)
			time.Sleep(time.Second)
			stop.Store(true)
			wg.Wait()
			if ctx.Err() != nil {
				t.Fatalf("the clients did not finish: %v", ctx.Err())
			}
			t.Logf("%s: %d payments; load resumed %s after the promotion; statuses %v",
				mode, len(orders), firstAfter.Round(100*time.Millisecond), rec.counts())

			if n := rec.counts()[http.StatusInternalServerError]; n > 0 {
				t.Errorf("%d answers 500 during the failover", n)
			}
			db := openPool(t, pair.Standby.URL())
			foCheck(t, db, simURL, orders)
			foWaitResumed(t, db)
			foCheckWaitWakes(t, db, clients)
			t.Logf("%s: done in %s", mode, time.Since(began).Round(100*time.Millisecond))
		})
	}
}

// Asynchronous standby, lost tail: the standby stops receiving, payments
// are acknowledged, the primary crashes, the standby is promoted without
// them. Every client retries with its key: the retry recreates the same
// paymentId (ids derive from tenant, operation, key and fingerprint) and
// the same provider key, so the provider answers the original charge.
func TestFailoverToAsynchronousStandbyLosesTheTailWithoutChargingTwice(t *testing.T) {
	if pgcluster.BinDir() == "" {
		t.Skip("no PostgreSQL server binaries")
	}
	apiBin, simBin := proctest.Binaries(t)
	pair, simURL, clients, rec := foStart(t, apiBin, simBin, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	create := func(from, to int) []*foOrder {
		var orders []*foOrder
		for i := from; i < to; i++ {
			o := &foOrder{key: fmt.Sprintf("fo-async-%d", i), reference: fmt.Sprintf("order-async-%d", i)}
			if err := foCreate(ctx, t, clients[i%2], o); err != nil {
				t.Fatal(err)
			}
			orders = append(orders, o)
		}
		return orders
	}
	kept := create(0, 5)
	// Let the standby replay them before cutting it off, so that exactly
	// the later ones are lost.
	standby := openPool(t, pair.Standby.URL())
	waitFor(t, 15*time.Second, "the standby to have the first payments", func(ctx context.Context) (bool, error) {
		var n int
		err := standby.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&n)
		return n == len(kept), err
	})
	pair.Detach()
	lost := create(5, 10)
	// Each is retried once through both instances before the crash: with
	// REPLAY_CACHE=memory, each instance then holds their answers, which
	// the new primary will not have (make test-failover runs this test
	// with it too).
	for _, o := range lost {
		for _, c := range clients {
			again := *o
			if err := foCreate(ctx, t, c, &again); err != nil {
				t.Fatal(err)
			}
		}
	}
	pair.Primary.Crash()
	pair.Promote()

	var missing int
	for _, o := range lost {
		var n int
		if err := standby.QueryRow(ctx, `SELECT count(*) FROM payments WHERE id = $1`, o.paymentID).Scan(&n); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		if n == 0 {
			missing++
		}
	}
	if missing != len(lost) {
		t.Fatalf("%d of the %d payments acknowledged after the standby was cut off are missing, want all: the test lost no tail", missing, len(lost))
	}

	// The operator's view of the lost tail: the provider holds exactly the
	// lost payments' charges, which no local row explains.
	if code, ids := foOrphans(t, apiBin, pair.Standby.URL(), simURL); code != 4 || !sameIDs(ids, lost) {
		t.Fatalf("orphans before the retries: exit %d, %v; want 4 and the lost payments", code, ids)
	}

	// Every client retries with its key, as a client whose answer was lost
	// would (and one that got it may: the retry must not charge again).
	acknowledged := map[string]string{}
	for _, o := range append(kept, lost...) {
		acknowledged[o.key] = o.paymentID
		if err := foCreate(ctx, t, clients[0], o); err != nil {
			t.Fatal(err)
		}
		if o.paymentID != acknowledged[o.key] {
			t.Errorf("key %s: paymentId %s after the failover, %s before", o.key, o.paymentID, acknowledged[o.key])
		}
	}
	if n := rec.counts()[http.StatusInternalServerError]; n > 0 {
		t.Errorf("%d answers 500", n)
	}
	t.Logf("statuses %v", rec.counts())
	foCheck(t, standby, simURL, append(kept, lost...))
	if code, ids := foOrphans(t, apiBin, pair.Standby.URL(), simURL); code != 0 || len(ids) != 0 {
		t.Fatalf("orphans after the retries: exit %d, %v; want 0 and none", code, ids)
	}
}

// foOrphans runs `paymentsapi orphans -since 1h` on the database at dbURL
// and the simulator at simURL, and returns its exit status and the
// resource ids it lists.
func foOrphans(t *testing.T, apiBin, dbURL, simURL string) (int, []string) {
	t.Helper()
	cmd := exec.Command(apiBin, "orphans", "-since", "1h")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "PROVIDER_URL="+simURL, "LOG_LEVEL=error")
	out, err := cmd.Output()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var o struct {
			ResourceID string `json:"resourceId"`
		}
		if line != "" && json.Unmarshal([]byte(line), &o) == nil {
			ids = append(ids, o.ResourceID)
		}
	}
	return code, ids
}

// sameIDs reports whether ids are exactly the orders' payment ids.
func sameIDs(ids []string, orders []*foOrder) bool {
	want := map[string]bool{}
	for _, o := range orders {
		want[o.paymentID] = true
	}
	if len(ids) != len(want) {
		return false
	}
	for _, id := range ids {
		if !want[id] {
			return false
		}
	}
	return true
}
