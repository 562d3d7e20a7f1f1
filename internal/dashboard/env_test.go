package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/dashboard"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/poll"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with the pages as they are now")

// The secrets of the environment's two tenants and its operator.
const (
	secretA  = servicetest.SecretA
	secretB  = servicetest.SecretB
	secretOp = servicetest.OperatorSecret
)

// env is the service (servicetest) with its dashboard mounted, on the
// test's fixed clock; with live, the outbox relay runs too (a poller), its
// publishes tapped for the dashboard as the server does.
type env struct {
	t      testing.TB
	url    string
	pool   *pgxpool.Pool
	clock  *clock.Fake
	core   *app.Core
	health *dashboard.Health
	live   *dashboard.Live
	// crashSent, while set, makes a payment's request fail after its send
	// is recorded and before it leaves (payments.Hooks.AfterRequestSent).
	crashSent *atomic.Bool
}

func newEnv(t testing.TB, live bool) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	e := &env{t: t, crashSent: &atomic.Bool{}}
	s := servicetest.New(t,
		servicetest.WithSlowDelay(100*time.Millisecond),
		servicetest.WithProviderTimeout(time.Second), // a lost answer (the simulator holds it 5 s) is unknown within 1 s
		servicetest.WithOperators(t),
		// A payment's outcome comes a second after its claim, so that its
		// events and moves have an order the pages show stably.
		servicetest.WithHooks(payments.Hooks{AfterClaim: func(context.Context, string) error { e.clock.Advance(time.Second); return nil },
			// A request "crashes" between recording its send and sending
			// it while crashSent is set: the provider never hears of the
			// payment.
			AfterRequestSent: func(context.Context, string) error {
				if e.crashSent.Load() {
					return errors.New("crashed before the request left")
				}
				return nil
			}}),
		servicetest.WithWiring(func(d *httpapi.Deps, in servicetest.Instance) {
			e.live, e.health = dashboard.NewLive(in.Clock, in.Log), dashboard.NewHealth(in.Registry, in.Clock, in.Log)
			running.Go(func() { e.live.Run(ctx) })
			audit := app.Auditor(in.Pool, in.Provider.(provider.Listing))
			if live {
				relay := poll.NewRelay(poll.RelayDeps{ConnString: in.Pool.Config().ConnConfig.ConnString(), DB: in.Pool,
					Publisher: e.live.Tap(in.Core.EventLog.Publisher(outbox.NewLogPublisher(io.Discard))), Clock: clock.System{}},
					poll.RelayConfig{Interval: 20 * time.Millisecond, Standby: 50 * time.Millisecond})
				running.Go(func() { relay.Run(ctx) })
			}
			d.Dashboard = in.Core.Dashboard(dashboard.Deps{DB: in.Pool, Live: e.live, Health: e.health, Clock: in.Clock, Log: in.Log, Orphans: &audit})
		}))
	// The pages' streams, which a browser may still hold open, end before
	// the server closes, and the relay's connections before the database
	// is dropped (cleanups run last first).
	t.Cleanup(func() {
		e.live.Stop()
		cancel()
		running.Wait()
	})
	e.url, e.pool, e.clock, e.core = s.URL, s.Pool, s.Clock, s.Core
	return e
}

// pay creates a payment through the API (a decline too), as tenant secret, and returns its
// id.
func (e *env) pay(secret, key, body string) string {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.url+"/payments", strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusPaymentRequired {
		e.t.Fatalf("POST /payments: %d %s", resp.StatusCode, b)
	}
	if id := strings.TrimPrefix(resp.Header.Get("Location"), "/payments/"); id != "" {
		return id
	}
	var p struct{ PaymentID string }
	_ = json.Unmarshal(b, &p)
	return p.PaymentID
}

// payment is a payment's body, for account acc and reference ref.
func payment(acc, ref, amount, method, capture string) string {
	return `{"accountId":"` + acc + `","amount":"` + amount + `","currency":"EUR","merchantReference":"` + ref +
		`","paymentMethod":"` + method + `","captureMethod":"` + capture + `"}`
}

// browser is a client of the dashboard with its own cookies.
type browser struct {
	e   *env
	c   *http.Client
	got page // the last page
}

// page is an answer read whole.
type page struct {
	status int
	header http.Header
	body   string
	url    string
}

func (e *env) browser() *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return &browser{e: e, c: &http.Client{Jar: jar}}
}

func (b *browser) do(req *http.Request) page {
	b.e.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.e.t.Fatal(err)
	}
	b.got = page{status: resp.StatusCode, header: resp.Header, body: string(body), url: resp.Request.URL.String()}
	return b.got
}

func (b *browser) get(path string) page {
	b.e.t.Helper()
	req, err := http.NewRequest("GET", b.e.url+path, nil)
	if err != nil {
		b.e.t.Fatal(err)
	}
	return b.do(req)
}

func (b *browser) post(path string, form url.Values) page {
	b.e.t.Helper()
	req, err := http.NewRequest("POST", b.e.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token of the last page's forms.
func (b *browser) csrf() string {
	b.e.t.Helper()
	m := csrfField.FindStringSubmatch(b.got.body)
	if m == nil {
		b.e.t.Fatalf("the page has no CSRF token:\n%s", b.got.body)
	}
	return m[1]
}

// login logs in with secret and returns the page it lands on.
func (b *browser) login(secret string) page {
	b.e.t.Helper()
	b.get("/dashboard/login")
	return b.post("/dashboard/login", url.Values{"secret": {secret}, "csrf": {b.csrf()}})
}

// The parts of a page that change from run to run, with what replaces
// them in its golden file.
var unstable = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`name="csrf" value="[^"]+"`), `name="csrf" value="CSRF"`},
	{regexp.MustCompile(`dash_[0-9a-f]{24}`), `dash_KEY`},
	{regexp.MustCompile(`key_[0-9a-f]{32}`), `key_ID`},
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), `UUID`},
	{regexp.MustCompile(`req_[0-9a-f]{24}`), `req_ID`},
	{regexp.MustCompile(`ch_[0-9a-f]{24}`), `ch_ID`},
	{regexp.MustCompile(`in [0-9]+ ms`), `in N ms`},
	{regexp.MustCompile(`we_[0-9a-z]{26}`), `we_ID`},
}

// golden compares the page's body with testdata/name.golden (with -update,
// writes it there).
func golden(t *testing.T, name string, p page) {
	t.Helper()
	got := p.body
	for _, u := range unstable {
		got = u.re.ReplaceAllString(got, u.with)
	}
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (go test -update rewrites it):\n%s", name, path, diff(string(want), got))
	}
}

// diff shows the first lines where want and got differ.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + itoa(i+1) + ":\n- " + wl + "\n+ " + gl
		}
	}
	return ""
}

func itoa(i int) string { return strconv.Itoa(i) }
