package dashboard_test

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
)

var regexpKey = regexp.MustCompile(`dash_[0-9a-f]{24}`)

// mustStatus fails the test unless p answered status.
func mustStatus(t *testing.T, p page, status int) {
	t.Helper()
	if p.status != status {
		t.Fatalf("%s: %d, want %d:\n%.2000s", p.url, p.status, status, p.body)
	}
}

func TestAPageWithoutASessionSendsToTheLoginForm(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	b := e.browser()
	p := b.get("/dashboard/payments")
	mustStatus(t, p, 200)
	if !strings.Contains(p.url, "/dashboard/login?next=%2Fdashboard%2Fpayments") {
		t.Errorf("landed on %s, want the login form that comes back to the payments", p.url)
	}
	golden(t, "login", b.get("/dashboard/login"))
	// The session cookie: out of scripts' reach, never sent by another
	// site's page, for the dashboard only, 12 hours.
	p = b.login(secretA)
	mustStatus(t, p, 200)
	u, _ := url.Parse(e.url + "/dashboard/")
	if len(b.c.Jar.Cookies(u)) == 0 {
		t.Fatal("no session cookie")
	}
	req, _ := http.NewRequest("GET", e.url+"/dashboard/login", nil)
	b.do(req)
	form := url.Values{"secret": {secretA}, "csrf": {b.csrf()}}
	req, _ = http.NewRequest("POST", e.url+"/dashboard/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := (&http.Client{Jar: b.c.Jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var set string
	for _, c := range resp.Header.Values("Set-Cookie") {
		if strings.HasPrefix(c, "paymentsapi_dashboard=") {
			set = c
		}
	}
	for _, want := range []string{"Path=/dashboard", "Max-Age=43200", "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(set, want) {
			t.Errorf("session cookie %q lacks %s", set, want)
		}
	}
	if strings.Contains(set, "Secure") {
		t.Errorf("session cookie %q is Secure on a plain http request", set)
	}
}

func TestTheEmptyPagesOfATenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	b := e.browser()
	p := b.login(secretA)
	mustStatus(t, p, 200)
	golden(t, "overview-tenant-empty", p)
	if p := b.get("/dashboard"); p.status != 200 || !strings.Contains(p.body, "<h1>Overview</h1>") {
		t.Errorf("GET /dashboard: %d, not the Overview", p.status)
	}
	golden(t, "payments-empty", b.get("/dashboard/payments"))
	p = b.get("/dashboard/payments?accountId=acc_none")
	golden(t, "payments-filtered-empty", p)
	p = b.get("/dashboard/payments/pay_nosuch")
	mustStatus(t, p, 404)
	golden(t, "payment-not-found", p)
}

func TestPaymentsAndAPaymentsPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	paid := e.pay(secretA, "k-1", payment("acc_1", "inv-1", "10.00", "pm_card_visa", "automatic"))
	e.clock.Advance(time.Minute)
	held := e.pay(secretA, "k-2", payment("acc_2", "inv-2", "25.50", "pm_card_visa", "manual"))
	e.clock.Advance(time.Minute)
	declined := e.pay(secretA, "k-3", payment("acc_1", "inv-3", "7.00", "pm_card_chargeDeclined", "automatic"))
	e.pay(secretB, "k-1", payment("acc_1", "inv-b", "99.00", "pm_card_visa", "automatic"))

	b := e.browser()
	b.login(secretA)
	p := b.get("/dashboard/payments")
	mustStatus(t, p, 200)
	golden(t, "payments", p)
	if p = b.get("/dashboard/payments?accountId=acc_2"); strings.Contains(p.body, paid) || !strings.Contains(p.body, held) {
		t.Errorf("filtered by acc_2, the list shows:\n%s", p.body)
	}
	// The form's other filters reach the service's query as the API's do.
	for query, want := range map[string]string{
		"status=DECLINED": declined, "merchantReference=inv-1": paid, "status=REQUIRES_CAPTURE": held,
		"currency=eur&amountMin=20": held, "currency=EUR&amountMin=7.01&amountMax=10.00": paid,
	} {
		p = b.get("/dashboard/payments?" + query)
		for _, id := range []string{paid, held, declined} {
			if strings.Contains(p.body, id) != (id == want) {
				t.Errorf("filtered by %s, the list shows:\n%s", query, p.body)
				break
			}
		}
	}
	day := e.clock.Now().UTC().Format(time.DateOnly)
	if p = b.get("/dashboard/payments?createdFrom=" + day + "&createdTo=" + day); !strings.Contains(p.body, paid) {
		t.Errorf("filtered by today, the list shows:\n%s", p.body)
	}
	if p = b.get("/dashboard/payments?createdTo=2000-01-01"); strings.Contains(p.body, paid) {
		t.Errorf("filtered to before 2000, the list shows:\n%s", p.body)
	}
	if p = b.get("/dashboard/payments?status=EXPLODED"); p.status != http.StatusBadRequest {
		t.Errorf("an unknown status: %d", p.status)
	}
	if p = b.get("/dashboard/payments?amountMin=10"); p.status != http.StatusBadRequest || !strings.Contains(p.body, "needs currency") {
		t.Errorf("an amount without its currency: %d\n%s", p.status, p.body)
	}
	golden(t, "payment-succeeded", b.get("/dashboard/payments/"+paid))
	golden(t, "payment-authorized", b.get("/dashboard/payments/"+held))
	// A payment id in the filter goes to its page.
	if p = b.get("/dashboard/payments?paymentId=" + held); !strings.HasSuffix(p.url, "/dashboard/payments/"+held) {
		t.Errorf("the payment id filter landed on %s", p.url)
	}
}

func TestThePagesOfAnOperator(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	idB := e.pay(secretB, "k-1", payment("acc_1", "inv-b", "99.00", "pm_card_visa", "automatic"))
	b := e.browser()
	p := b.login(secretOp)
	mustStatus(t, p, 200)
	golden(t, "overview-operator", p)
	golden(t, "payments-choose-tenant", b.get("/dashboard/payments"))
	golden(t, "tenants", b.get("/dashboard/tenants"))
	p = b.get("/dashboard/payments?tenant=tenant_b")
	if !strings.Contains(p.body, idB) {
		t.Errorf("the operator does not see tenant_b's payment %s:\n%s", idB, p.body)
	}
	if p = b.get("/dashboard/payments/" + idB + "?tenant=tenant_b"); p.status != 200 || !strings.Contains(p.body, "Timeline") {
		t.Errorf("the operator's page of %s: %d\n%s", idB, p.status, p.body)
	}
}

func TestATenantNeverSeesAnotherTenantsDataNorAnOperatorPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	idB := e.pay(secretB, "k-1", payment("acc_1", "inv-b", "99.00", "pm_card_visa", "automatic"))
	b := e.browser()
	b.login(secretA)
	for _, path := range []string{"/dashboard/payments", "/dashboard/payments?tenant=tenant_b", "/dashboard/?tenant=tenant_b"} {
		if p := b.get(path); p.status != 200 || strings.Contains(p.body, idB) || strings.Contains(p.body, "tenant_b") {
			t.Errorf("GET %s as tenant_a: %d, and it shows tenant_b's data", path, p.status)
		}
	}
	for _, path := range []string{"/dashboard/payments/" + idB, "/dashboard/payments/" + idB + "?tenant=tenant_b"} {
		if p := b.get(path); p.status != 404 || strings.Contains(p.body, "99.00") {
			t.Errorf("GET %s as tenant_a: %d, want 404", path, p.status)
		}
	}
	p := b.get("/dashboard/tenants")
	mustStatus(t, p, 403)
	golden(t, "operators-only", p)
	if strings.Contains(b.get("/dashboard/").body, `href="/dashboard/tenants"`) {
		t.Error("a tenant's navigation links to the operators' page")
	}
}

func TestAFormPostedWithoutItsCSRFTokenIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	held := e.pay(secretA, "k-1", payment("acc_1", "inv-1", "10.00", "pm_card_visa", "manual"))
	b := e.browser()
	b.login(secretA)
	b.get("/dashboard/payments/" + held)
	key := regexpKey.FindString(b.got.body)
	for _, csrf := range []string{"", "forged"} {
		form := url.Values{"key": {key}}
		if csrf != "" {
			form.Set("csrf", csrf)
		}
		if p := b.post("/dashboard/payments/"+held+"/capture", form); p.status != 403 {
			t.Errorf("capture with csrf %q: %d, want 403", csrf, p.status)
		}
		if p := b.post("/dashboard/logout", form); p.status != 403 {
			t.Errorf("logout with csrf %q: %d, want 403", csrf, p.status)
		}
	}
	if p, _ := e.core.Payments.Get(context.Background(), "tenant_a", held); p.State != "AUTHORIZED" {
		t.Fatalf("a refused capture moved the payment to %s", p.State)
	}
	// The login form's own token: a login posted from elsewhere is refused,
	// with the form's cookie or without it.
	other := e.browser()
	if p := other.post("/dashboard/login", url.Values{"secret": {secretA}}); p.status != 403 {
		t.Errorf("login without the form's cookie and token: %d, want 403", p.status)
	}
	other.get("/dashboard/login")
	for _, csrf := range []string{"", "forged"} {
		if p := other.post("/dashboard/login", url.Values{"secret": {secretA}, "csrf": {csrf}}); p.status != 403 {
			t.Errorf("login with the form's cookie and the token %q: %d, want 403", csrf, p.status)
		}
	}
	// With it, the capture goes through.
	b.get("/dashboard/payments/" + held)
	p := b.post("/dashboard/payments/"+held+"/capture", url.Values{"key": {key}, "csrf": {b.csrf()}})
	mustStatus(t, p, 200)
	if !strings.Contains(p.body, "capture: 200 Done") {
		t.Errorf("the capture's answer is not shown:\n%s", p.body)
	}
}

func TestActionsAreIdempotentRequestsThroughTheServices(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	paid := e.pay(secretA, "k-1", payment("acc_1", "inv-1", "10.00", "pm_card_visa", "automatic"))
	b := e.browser()
	b.login(secretA)
	b.get("/dashboard/payments/" + paid)
	key := regexpKey.FindString(b.got.body)
	form := url.Values{"key": {key}, "csrf": {b.csrf()}, "amount": {"4.00"}, "reason": {"requested_by_customer"}}
	p := b.post("/dashboard/payments/"+paid+"/refund", form)
	mustStatus(t, p, 200)
	for _, want := range []string{"refund: 201 Done", "Idempotency-Key: " + key, "4.00 EUR", "requested_by_customer", "At most 6.00"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the page after the refund lacks %q:\n%s", want, p.body)
		}
	}
	// The same form again is a retry of the same request: replayed, one refund.
	p = b.post("/dashboard/payments/"+paid+"/refund", form)
	if !strings.Contains(p.body, "This answer is a replay") {
		t.Errorf("the form sent again was not replayed:\n%s", p.body)
	}
	list, err := e.core.Refunds.List(context.Background(), "tenant_a", paid)
	if err != nil || len(list) != 1 || list[0].Reason != "requested_by_customer" {
		t.Fatalf("refunds: %+v, %v; want one", list, err)
	}
	// The same key with another amount is another request: refused 422.
	form.Set("amount", "1.00")
	if p = b.post("/dashboard/payments/"+paid+"/refund", form); p.status != 422 {
		t.Errorf("the key reused for another amount: %d, want 422", p.status)
	}
	// An invalid amount is the API's validation failure.
	form.Set("key", "dash_other")
	form.Set("amount", "-1")
	if p = b.post("/dashboard/payments/"+paid+"/refund", form); p.status != 400 || !strings.Contains(p.body, "amount must be") {
		t.Errorf("an invalid amount: %d\n%s", p.status, p.body)
	}
}

func TestARevokedKeysSessionEndsWithinTheAPIsCacheLife(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	b := e.browser()
	b.login(secretA)
	keys, err := apikeys.List(context.Background(), e.pool, "tenant_a")
	if err != nil || len(keys) != 1 {
		t.Fatal(keys, err)
	}
	if _, err := apikeys.Revoke(context.Background(), e.pool, keys[0].ID, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(apikeys.MaxCacheTTL)
	p := b.get("/dashboard/payments")
	if !strings.Contains(p.url, "/dashboard/login") || !strings.Contains(p.body, "revoked") {
		t.Fatalf("after the revocation, the session still works: %s\n%s", p.url, p.body)
	}
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_sessions`).Scan(&n); err != nil || n != 0 {
		t.Errorf("sessions left: %d, %v", n, err)
	}
}

func TestLoggingOutEndsTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	b := e.browser()
	b.login(secretA)
	u, _ := url.Parse(e.url + "/dashboard/")
	stolen := b.c.Jar.Cookies(u)
	p := b.post("/dashboard/logout", url.Values{"csrf": {b.csrf()}})
	if !strings.Contains(p.url, "/dashboard/login") {
		t.Fatalf("logout landed on %s", p.url)
	}
	// The cookie kept from before the logout opens nothing.
	thief := e.browser()
	thief.c.Jar.SetCookies(u, stolen)
	if p := thief.get("/dashboard/payments"); !strings.Contains(p.url, "/dashboard/login") {
		t.Errorf("the session's cookie still works after its logout: %s", p.url)
	}
}

func TestFailedLoginsShareTheAPIsThrottle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	b := e.browser()
	var p page
	for range 20 {
		if p = b.login("sk_wrong"); p.status != 401 {
			t.Fatalf("a wrong secret: %d, want 401", p.status)
		}
	}
	if p = b.login(secretA); p.status != 429 || p.header.Get("Retry-After") == "" {
		t.Errorf("the right secret after 20 failures: %d, want 429 with Retry-After", p.status)
	}
	req, _ := http.NewRequest("GET", e.url+"/payments", nil)
	req.Header.Set("Authorization", "Bearer "+secretA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 {
		t.Errorf("the API after 20 failed logins from the address: %d, want 429", resp.StatusCode)
	}
}

func TestTheStreamBringsANewPaymentsRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	b := e.browser()
	b.login(secretA)
	lines := openStream(t, b, "topic=payments")
	other := e.pay(secretB, "k-1", payment("acc_1", "inv-b", "1.00", "pm_card_visa", "automatic"))
	id := e.pay(secretA, "k-1", payment("acc_1", "inv-1", "12.34", "pm_card_visa", "automatic"))
	for lines.Scan() {
		line := lines.Text()
		if strings.Contains(line, other) {
			t.Fatalf("tenant_a's stream carries tenant_b's payment: %s", line)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, id) && strings.Contains(line, "SUCCEEDED") {
			return
		}
	}
	t.Fatalf("the stream ended without the payment %s: %v", id, lines.Err())
}

func TestTheStreamOfARevokedKeysPageEndsBeforeItSendsMore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	b := e.browser()
	b.login(secretA)
	lines := openStream(t, b, "topic=payments")
	ctx := context.Background()
	keys, err := apikeys.List(ctx, e.pool, "tenant_a")
	if err != nil || len(keys) != 1 {
		t.Fatal(keys, err)
	}
	if _, err := apikeys.Revoke(ctx, e.pool, keys[0].ID, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	_, other, err := apikeys.Create(ctx, e.pool, apikeys.Hasher{}, "tenant_a", true, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(apikeys.MaxCacheTTL)
	id := e.pay(other, "k-1", payment("acc_1", "inv-1", "12.34", "pm_card_visa", "automatic"))
	for lines.Scan() {
		switch line := lines.Text(); {
		case strings.Contains(line, id):
			t.Fatalf("the revoked key's page was sent the payment: %s", line)
		case line == "event: ended":
			return
		}
	}
	t.Fatalf("the stream ended without saying so: %v", lines.Err())
}

// A server that shuts down ends the pages' streams (Live.Stop, which
// http.Server.RegisterOnShutdown calls), rather than wait for them.
func TestStopEndsTheStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	b := e.browser()
	b.login(secretA)
	lines := openStream(t, b, "topic=payments")
	ended := make(chan struct{})
	go func() {
		for lines.Scan() {
		}
		close(ended)
	}()
	e.live.Stop()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream goes on after Stop")
	}
}

// openStream opens the page's stream of query as b, and reads its first
// event; the stream ends with the test, or after 20 seconds.
func openStream(t *testing.T, b *browser, query string) *bufio.Scanner {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", b.e.url+"/dashboard/live?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /dashboard/live: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || lines.Text() != "event: hello" {
		t.Fatalf("the stream starts with %q", lines.Text())
	}
	return lines
}
