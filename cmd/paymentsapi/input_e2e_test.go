package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/config"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/proctest"
)

// transcript keeps everything a server wrote, and lets a test wait for a
// line of it.
type transcript struct {
	*proctest.LineWatcher
	mu  sync.Mutex
	all bytes.Buffer
}

func newTranscript() *transcript { return &transcript{LineWatcher: proctest.NewLineWatcher()} }

func (t *transcript) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.all.Write(p)
	t.mu.Unlock()
	return t.LineWatcher.Write(p)
}

func (t *transcript) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.all.String()
}

// startRecorded runs the server in-process on env and returns its URL,
// its stdout (the banner, and the log publisher's events) and its stderr
// (its log), whole.
func startRecorded(t *testing.T, env map[string]string) (base string, stdout, stderr *transcript) {
	t.Helper()
	stdout, stderr = newTranscript(), newTranscript()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-http-addr", "127.0.0.1:0"}, func(k string) string { return env[k] }, nil, stdout, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	base, _ = stdout.Await(t, proctest.ListeningRE, 90*time.Second)
	return base, stdout, stderr
}

// inputEnv is a server's configuration outside dev mode for these tests.
func inputEnv(t *testing.T, extra ...string) map[string]string {
	env := map[string]string{
		"DATABASE_URL": pgtest.NewURL(t), "PROVIDER": "sim", "PROVIDER_SIM_IN_PROCESS": "true",
		"API_KEY_PEPPER": "a-pepper-of-at-least-thirty-two-characters", "API_KEYS": "demo:" + inputSecret,
		"SECRETS_KEY": e2eSecretsKey,
	}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

const inputSecret = "sk_test_input_rules_of_more_than_24"

// A card number sent in any string of any operation's command (a payment,
// a refund, a capture, a cancel, a webhook endpoint, a resend), bare,
// printed with spaces or dashes, or beside an expiry date and a CVC, is
// answered 400 CARD_DATA_REFUSED naming the field, and nothing of it is
// kept: after all of them, no text of any row of any table, no line the
// log publisher wrote and no line of the debug log holds its digits. A
// request id holding one is replaced, since every log line carries it.
// (Before, a card number in a description or a reference was stored,
// published and sent to the provider.)
func TestCardDataIsNeverKept(t *testing.T) {
	t.Parallel()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer receiver.Close()
	env := inputEnv(t, "LOG_LEVEL", "debug", "WEBHOOK_ALLOW_HTTP", "true", "WEBHOOK_ALLOW_PRIVATE", "true")
	base, stdout, stderr := startRecorded(t, env)
	post := func(path, key, body string) httpResult {
		t.Helper()
		return call(t, "POST", base+path, inputSecret, key, body)
	}

	// What the service does keep, for the search below to find: a
	// payment, one waiting for its capture, and a webhook endpoint.
	paid := post("/payments", "pay-kept", `{"accountId":"acc_kept","amount":"10.00","currency":"EUR",`+
		`"merchantReference":"inv-kept-7781","paymentMethod":"pm_card_visa","description":"kept description"}`)
	held := post("/payments", "pay-held", `{"accountId":"acc_kept","amount":"10.00","currency":"EUR",`+
		`"merchantReference":"inv-held-7781","paymentMethod":"pm_card_visa","captureMethod":"manual"}`)
	hook := post("/webhook-endpoints", "hook-kept", `{"url":"`+receiver.URL+`/hook","description":"kept hook"}`)
	var p, h struct{ PaymentID string }
	if paid.status != http.StatusCreated || held.status != http.StatusCreated || hook.status != http.StatusCreated ||
		json.Unmarshal(paid.body, &p) != nil || json.Unmarshal(held.body, &h) != nil {
		t.Fatalf("the kept requests: %d %s / %d %s / %d %s", paid.status, paid.body, held.status, held.body, hook.status, hook.body)
	}
	stdout.Await(t, regexp.MustCompile(`inv-held-7781`), 30*time.Second) // both payments' events are published

	texts := []string{
		"4000056655665556",
		"4000 0566 5566 5556",
		"4000-0566-5566-5556",
		"card 4000056655665556 exp 03/30 cvc 737",
	}
	payment := map[string]string{"accountId": `"acc_1"`, "amount": `"10.00"`, "currency": `"EUR"`,
		"merchantReference": `"inv-card"`, "paymentMethod": `"pm_card_visa"`, "description": `"d"`, "channel": `"web"`}
	withField := func(fields map[string]string, field, v string) string {
		parts := []string{`"` + field + `":` + v}
		for k, fv := range fields {
			if k != field {
				parts = append(parts, `"`+k+`":`+fv)
			}
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	type attempt struct{ path, field, body string }
	var attempts []attempt
	for _, text := range texts {
		v := `"` + text + `"`
		for field := range payment {
			attempts = append(attempts, attempt{"/payments", field, withField(payment, field, v)})
		}
		attempts = append(attempts,
			attempt{"/payments/" + p.PaymentID + "/refunds", "amount", `{"amount":` + v + `}`},
			attempt{"/payments/" + p.PaymentID + "/refunds", "reason", `{"amount":"1.00","reason":` + v + `}`},
			attempt{"/payments/" + h.PaymentID + "/capture", "amount", `{"amount":` + v + `}`},
			attempt{"/payments/" + h.PaymentID + "/cancel", "reason", `{"reason":` + v + `}`},
			attempt{"/webhook-endpoints", "url", `{"url":` + v + `}`},
			attempt{"/webhook-endpoints", "description", `{"url":"` + receiver.URL + `/card","description":` + v + `}`},
			attempt{"/webhook-endpoints", "eventTypes[0]", `{"url":"` + receiver.URL + `/card","eventTypes":[` + v + `]}`},
			attempt{"/events/evt_none/resend", "endpointId", `{"endpointId":` + v + `}`},
		)
	}
	for i, a := range attempts {
		r := post(a.path, "card-"+strings.Repeat("k", 1+i%7)+"-"+a.field+"-"+string(rune('a'+i%26)), a.body)
		var prob struct {
			Code   string
			Errors []struct{ Field string }
		}
		if r.status != http.StatusBadRequest || json.Unmarshal(r.body, &prob) != nil || prob.Code != "CARD_DATA_REFUSED" ||
			len(prob.Errors) != 1 || prob.Errors[0].Field != a.field {
			t.Errorf("POST %s with %s: %d %s; want 400 CARD_DATA_REFUSED naming %s", a.path, a.body, r.status, r.body, a.field)
		}
	}

	// A request id is logged with every line of its request: one holding
	// a card number is replaced.
	req, _ := http.NewRequest(http.MethodGet, base+"/payments/pay_none", nil)
	req.Header.Set("Authorization", "Bearer "+inputSecret)
	req.Header.Set("X-Request-Id", "4000056655665556")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("X-Request-Id") == "4000056655665556" {
			t.Errorf("a request id holding a card number: %d, answered as %q", resp.StatusCode, resp.Header.Get("X-Request-Id"))
		}
	}

	// Whatever the relay and the workers would write has had its time.
	time.Sleep(2 * time.Second)
	ctx := context.Background()
	db, err := pgx.Connect(ctx, env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	rows, err := db.Query(ctx, `SELECT format('%I.%I', table_schema, table_name) FROM information_schema.tables
		WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) < 10 {
		t.Fatalf("the tables: %v %v", tables, err)
	}
	// Each row as text (bytea columns in hex), searched for the card
	// number's digits, in each of its spellings, and for the CVC.
	needles := []string{"4000056655665556", "0566 5566", "0566-5566", "cvc 737"}
	found := func(needle string) []string {
		var where []string
		for _, table := range tables {
			var n int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM `+table+` AS r WHERE r::text LIKE ANY($1)`, []string{
				"%" + needle + "%", "%" + hex.EncodeToString([]byte(needle)) + "%",
			}).Scan(&n); err != nil {
				t.Fatalf("search %s: %v", table, err)
			}
			if n > 0 {
				where = append(where, table)
			}
		}
		return where
	}
	// The search finds what was kept: it would find a card number.
	for _, kept := range []string{"inv-kept-7781", "kept description", "kept hook"} {
		if len(found(kept)) == 0 {
			t.Fatalf("the search of the tables does not find %q, which was kept", kept)
		}
	}
	if !strings.Contains(stdout.String(), "inv-kept-7781") || !strings.Contains(stderr.String(), p.PaymentID) {
		t.Fatalf("the publisher's output or the log does not hold what was kept")
	}
	for _, n := range needles {
		if where := found(n); len(where) > 0 {
			t.Errorf("%q is stored in %v", n, where)
		}
		if strings.Contains(stdout.String(), n) {
			t.Errorf("%q was published on stdout", n)
		}
		if strings.Contains(stderr.String(), n) {
			t.Errorf("%q is in the log", n)
		}
	}
}

// A request whose headers are larger than 32 KB is answered 431 before any
// handler runs; one of 31 KB is served. (Before, net/http's default let
// headers of up to 1 MB through.)
func TestHeadersLargerThan32KBAnswer431(t *testing.T) {
	t.Parallel()
	base, _, _ := startRecorded(t, inputEnv(t))
	for _, tc := range []struct {
		size int
		want int
	}{{40 << 10, http.StatusRequestHeaderFieldsTooLarge}, {33 << 10, http.StatusRequestHeaderFieldsTooLarge}, {31 << 10, http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, base+"/healthz", nil)
		req.Header.Set("X-Padding", strings.Repeat("p", tc.size))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%d bytes of headers: %v", tc.size, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%d bytes of headers: %d, want %d", tc.size, resp.StatusCode, tc.want)
		}
	}
}

// With OPS_ADDR, /metrics is served on the operations listener and not on
// the public one, and start-up does not warn of it; shutdown closes both.
// Without, it stays on the public listener and start-up, outside dev mode,
// warns of it, and of RATE_LIMIT being off.
func TestMetricsMoveToTheOperationsListener(t *testing.T) {
	t.Parallel()
	get := func(url string) int {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	t.Run("OPS_ADDR set", func(t *testing.T) {
		t.Parallel()
		env := inputEnv(t, "OPS_ADDR", "127.0.0.1:0", "RATE_LIMIT", "100")
		stdout, stderr := newTranscript(), newTranscript()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, []string{"-http-addr", "127.0.0.1:0"}, func(k string) string { return env[k] }, nil, stdout, stderr)
		}()
		base, _ := stdout.Await(t, proctest.ListeningRE, 90*time.Second)
		ops, _ := stderr.Await(t, regexp.MustCompile(`"msg":"operations listening".*"url":"(http://[^"]+)"`), 10*time.Second)
		if s := get(ops + "/metrics"); s != http.StatusOK {
			t.Errorf("GET /metrics on the operations listener: %d", s)
		}
		if s := get(base + "/metrics"); s != http.StatusNotFound {
			t.Errorf("GET /metrics on the public listener: %d, want 404", s)
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			if s := get(ops + path); s != http.StatusOK {
				t.Errorf("GET %s on the operations listener: %d", path, s)
			}
		}
		if s := get(ops + "/payments"); s != http.StatusNotFound {
			t.Errorf("GET /payments on the operations listener: %d, want 404", s)
		}
		stopRun(t, cancel, done)
		for _, url := range []string{base, ops} {
			if resp, err := http.Get(url + "/healthz"); err == nil {
				resp.Body.Close()
				t.Errorf("%s still answers after shutdown", url)
			}
		}
		if log := stderr.String(); strings.Contains(log, "OPS_ADDR is not set") || strings.Contains(log, "RATE_LIMIT is off") {
			t.Errorf("start-up warned with OPS_ADDR and RATE_LIMIT set:\n%s", log)
		}
	})
	t.Run("OPS_ADDR unset", func(t *testing.T) {
		t.Parallel()
		base, _, stderr := startRecorded(t, inputEnv(t))
		if s := get(base + "/metrics"); s != http.StatusOK {
			t.Errorf("GET /metrics on the public listener: %d", s)
		}
		log := stderr.String()
		for _, warning := range []string{`"level":"WARN","msg":"OPS_ADDR is not set`, `"level":"WARN","msg":"RATE_LIMIT is off`} {
			if !strings.Contains(log, warning) {
				t.Errorf("start-up did not warn %s:\n%s", warning, log)
			}
		}
	})
}

// In dev mode neither default is worth a warning: they are what a
// developer wants.
func TestDevModeDoesNotWarnOfItsOpenDefaults(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	warnExposure(config.Config{}, log)
	if out.Len() != 0 {
		t.Errorf("dev mode warned: %s", out.String())
	}
	warnExposure(config.Config{DatabaseURL: "postgres://x"}, log)
	if !strings.Contains(out.String(), "OPS_ADDR") || !strings.Contains(out.String(), "RATE_LIMIT") {
		t.Errorf("outside dev mode: %s", out.String())
	}
}
