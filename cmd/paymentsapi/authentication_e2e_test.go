package main

// Customer authentication (3-D Secure) end to end, with the real binaries:
// the provider's webhook road with the in-process simulator and no
// configuration, and the customer's return and the webhook racing on two
// API processes that share one database and one providersim process.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/proctest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
)

// authPayment is what these tests read of a payment.
type authPayment struct {
	PaymentID   string `json:"paymentId"`
	Status      string `json:"status"`
	DeclineCode string `json:"declineCode"`
	NextAction  *struct {
		Type string `json:"type"`
		URL  string `json:"url"`
	} `json:"nextAction"`
}

// authCreate makes a payment that waits for its customer (201
// REQUIRES_ACTION with a nextAction URL) on the API at base.
func authCreate(t *testing.T, base, key string) authPayment {
	t.Helper()
	r, err := recPost(base, key, `{"accountId":"acc_3ds","amount":"25.00","currency":"EUR",`+
		`"merchantReference":"order-`+key+`","paymentMethod":"pm_card_threeDSecureRequired"}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p authPayment
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &p) != nil || p.Status != "REQUIRES_ACTION" ||
		p.NextAction == nil || p.NextAction.URL == "" {
		t.Fatalf("create answered %d %s, want 201 REQUIRES_ACTION with nextAction.url", r.status, r.body)
	}
	return p
}

// authNoRedirect is a browser that stops at the first redirect: the tests
// press a button on the challenge page and choose where the customer goes.
var authNoRedirect = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// authChoose presses action (approve or fail) on the challenge page at
// pageURL, as the page's form does, and returns the answer's status and
// Location, without following it.
func authChoose(pageURL, action string) (int, string, error) {
	resp, err := authNoRedirect.PostForm(pageURL, url.Values{"action": {action}})
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), nil
}

// authGet reads the payment id on the API at base.
func authGet(t *testing.T, base, id string) authPayment {
	t.Helper()
	r := call(t, "GET", base+"/payments/"+id, recSecret, "", "")
	var p authPayment
	if r.status != http.StatusOK || json.Unmarshal(r.body, &p) != nil {
		t.Fatalf("GET payment: %d %s", r.status, r.body)
	}
	return p
}

// authMoveActors lists who made each of the payment's moves, "FROM->TO by
// actor", oldest first.
func authMoveActors(t *testing.T, dbURL, id string) []string {
	t.Helper()
	db := recPool(t, dbURL)
	rows, err := db.Query(context.Background(), `
		SELECT COALESCE(from_state, '') || '->' || to_state || ' by ' || COALESCE(actor, '')
		FROM payment_transitions WHERE payment_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// With the in-process simulator and no STRIPE_WEBHOOK_SECRET, the service
// makes a secret at start, takes POST /webhooks/stripe with it and points
// the simulator's webhook there; with one, the simulator signs with it. The
// customer approves on the challenge page, nobody follows the redirect back
// to the service, the reconciler does not look for an hour, and the payment
// succeeds by the webhook alone. No secret is ever logged.
func TestInProcessSimulatorWebhookSettlesAnAuthenticatedPayment(t *testing.T) {
	apiBin, _ := proctest.Binaries(t)
	const configured = "whsec_configured_e2e_secret"
	for _, tc := range []struct {
		name   string
		secret string
	}{
		{"a secret made at start", ""},
		{"STRIPE_WEBHOOK_SECRET", configured},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dbURL := pgtest.NewURL(t)
			cmd, base := proctest.Start(t, apiBin, []string{
				"DATABASE_URL=" + dbURL, "PROVIDER=sim", "PROVIDER_SIM_IN_PROCESS=true", "API_KEYS=" + recTenant + ":" + recSecret,
				"HTTP_ADDR=127.0.0.1:0", "RECONCILE_INTERVAL=1h",
				"STRIPE_WEBHOOK_SECRET=" + tc.secret,
			})
			id := testWebhookAlone(t, cmd, base, dbURL)
			if tc.secret == "" {
				return
			}
			// Stripe's own webhooks are still verified with the configured
			// secret, which the simulator shares, not one of its own.
			body := []byte(`{"id":"evt_e2e","object":"event","type":"payment_intent.succeeded","created":` +
				strconv.FormatInt(time.Now().Unix(), 10) + `,"data":{"object":{"id":"pi_e2e","object":"payment_intent",` +
				`"status":"succeeded","metadata":{"payment_id":"` + id + `"}}}}`)
			req, err := http.NewRequest(http.MethodPost, base+"/webhooks/stripe", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Stripe-Signature", sim.StripeSignature(body, tc.secret, time.Now()))
			resp, err := recClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("a webhook signed with STRIPE_WEBHOOK_SECRET answered %d, want 200", resp.StatusCode)
			}
		})
	}
}

// testWebhookAlone pays on the API at base with a card that asks for
// authentication, approves on the challenge page without coming back, and
// checks that the webhook settled the payment and that cmd logged no
// secret. It returns the payment's id.
func testWebhookAlone(t *testing.T, cmd *exec.Cmd, base, dbURL string) string {
	p := authCreate(t, base, "3ds-webhook")
	status, location, err := authChoose(p.NextAction.URL, "approve")
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusSeeOther || !strings.HasSuffix(location, "/payments/"+p.PaymentID+"/return") {
		t.Fatalf("Approve answered %d to %q, want 303 to the service's return route", status, location)
	}
	// The simulator announces the choice before it answers: the payment
	// has moved by the time the customer would be sent back.
	var got authPayment
	recWaitFor(t, 5*time.Second, "the payment settled by the webhook", func(context.Context) (bool, error) {
		got = authGet(t, base, p.PaymentID)
		return got.Status != "REQUIRES_ACTION", nil
	})
	if got.Status != "SUCCEEDED" {
		t.Fatalf("payment %+v, want SUCCEEDED", got)
	}
	moves := authMoveActors(t, dbURL, p.PaymentID)
	if len(moves) != 4 || moves[3] != "REQUIRES_ACTION->COMPLETED by provider-webhook" {
		t.Errorf("moves %q, want the last one REQUIRES_ACTION->COMPLETED by provider-webhook", moves)
	}

	lines := cmd.Stderr.(*proctest.LineWatcher).Lines()
	for read := true; read; {
		select {
		case line := <-lines:
			if strings.Contains(line, "whsec_") {
				t.Errorf("a log line holds the webhook secret: %s", line)
			}
		default:
			read = false
		}
	}
	return p.PaymentID
}

// Two API processes on one database and one providersim process, whose
// webhook goes to process B; the customer's return lands on process A. The
// webhook is held until the customer has chosen, then it and several
// returns race: the payment settles exactly once (one final move, one
// PaymentSucceeded event) and the provider holds one charge, made once.
func TestTwoAPIProcessesSettleAnAuthenticationOnce(t *testing.T) {
	apiBin, simBin := proctest.Binaries(t)
	const secret = "whsec_two_processes_e2e"

	// The webhook goes to B through a gate: B's address is known only once
	// B runs, on the simulator's address, and the test holds the webhook
	// to make the roads race.
	var (
		mu       sync.Mutex
		urlB     string
		arrived  = make(chan struct{})
		release  = make(chan struct{})
		answered = make(chan int, 1)
	)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		close(arrived)
		<-release
		mu.Lock()
		target := urlB + r.URL.Path
		mu.Unlock()
		req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(string(body)))
		if err != nil {
			t.Error(err)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := recClient.Do(req)
		if err != nil {
			t.Errorf("forward the webhook to B: %v", err)
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
		w.WriteHeader(resp.StatusCode)
	}))
	defer gate.Close()

	_, simURL := proctest.Start(t, simBin, []string{"PROVIDERSIM_WEBHOOK_SECRET=" + secret},
		"-addr", "127.0.0.1:0", "-webhook-url", gate.URL+"/webhooks/stripe")
	dbURL := pgtest.NewURL(t)
	db := recPool(t, dbURL)
	env := recAPIEnv(dbURL, simURL, "STRIPE_WEBHOOK_SECRET="+secret, "RECONCILE_INTERVAL=1h")
	_, urlA := proctest.Start(t, apiBin, env)
	_, b := proctest.Start(t, apiBin, env)
	mu.Lock()
	urlB = b
	mu.Unlock()

	p := authCreate(t, urlA, "3ds-two")
	chose := make(chan error, 1)
	go func() {
		status, location, err := authChoose(p.NextAction.URL, "approve")
		if err == nil && (status != http.StatusSeeOther || !strings.HasSuffix(location, "/payments/"+p.PaymentID+"/return")) {
			t.Errorf("Approve answered %d to %q, want 303 to the service's return route", status, location)
		}
		chose <- err
	}()
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the simulator sent no webhook")
	}

	// The customer has approved (the simulator announces after deciding):
	// the returns on A and the webhook to B now race.
	const returns = 4
	var wg sync.WaitGroup
	statuses := make([]int, returns)
	start := make(chan struct{})
	for i := range returns {
		wg.Go(func() {
			<-start
			resp, err := authNoRedirect.Get(urlA + "/payments/" + p.PaymentID + "/return")
			if err != nil {
				t.Errorf("return %d: %v", i, err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
			if !strings.Contains(string(body), "SUCCEEDED") {
				t.Errorf("return %d answered %d %q, want the payment SUCCEEDED", i, resp.StatusCode, body)
			}
		})
	}
	close(start)
	close(release)
	wg.Wait()
	if err := <-chose; err != nil {
		t.Fatal(err)
	}
	if code := <-answered; code != http.StatusOK {
		t.Errorf("B answered the webhook %d, want 200", code)
	}
	for i, s := range statuses {
		if s != http.StatusOK {
			t.Errorf("return %d answered %d, want 200 (a page: the payment has no returnUrl)", i, s)
		}
	}

	for _, base := range []string{urlA, urlB} {
		if got := authGet(t, base, p.PaymentID); got.Status != "SUCCEEDED" {
			t.Errorf("payment on %s: %+v, want SUCCEEDED", base, got)
		}
	}
	want := []string{"->RECEIVED", "RECEIVED->PROVIDER_REQUEST_SENT", "PROVIDER_REQUEST_SENT->REQUIRES_ACTION", "REQUIRES_ACTION->COMPLETED"}
	if moves := recTransitions(t, db, p.PaymentID); !reflect.DeepEqual(moves, want) {
		t.Errorf("moves %q, want %q: the authentication settled other than once", moves, want)
	}
	t.Logf("moves: %q", authMoveActors(t, dbURL, p.PaymentID))
	wantEvents := map[string]int{"PaymentCreated": 1, "PaymentRequiresAction": 1, "PaymentSucceeded": 1}
	if ev := recEvents(t, db, p.PaymentID); !reflect.DeepEqual(ev, wantEvents) {
		t.Errorf("events %v, want %v", ev, wantEvents)
	}
	recAssertChargedOnce(t, simURL, p.PaymentID, true)
}
