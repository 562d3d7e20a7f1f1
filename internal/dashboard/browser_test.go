package dashboard_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/paymentsapi/paymentsapi/internal/testio"
	"github.com/paymentsapi/paymentsapi/internal/testio/headless"
)

// newChrome starts headless Chromium at a desktop's size, its scrollbars
// hidden so that screenshots show the pages alone.
func newChrome(t *testing.T) context.Context {
	t.Helper()
	return headless.Chrome(t, chromedp.Flag("hide-scrollbars", true), chromedp.WindowSize(1280, 800))
}

// run runs steps in the browser, each within a minute, failing the test
// with what.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	step, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(step, steps...); err != nil {
		body, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("body")))
		t.Fatalf("%s: %v\n%.3000s", what, err, body)
	}
}

// value runs one step that returns a value.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	step, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(step, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// text is the visible text of the page's main part.
func text(t *testing.T, ctx context.Context) string {
	t.Helper()
	return value(t, ctx, "read the page", chromedp.Text(chromedp.CSS("body")))
}

// fits checks that the page needs no horizontal scrolling at the window's
// width.
func fits(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	overflow := value(t, ctx, "measure "+where, chromedp.Evaluate[int](`document.documentElement.scrollWidth - window.innerWidth`))
	if overflow > 0 {
		t.Errorf("%s is %dpx wider than the window", where, overflow)
	}
}

// screenshot saves the page to DASHBOARD_SCREENSHOTS/dashboard-name.png,
// when that directory is set (make dashboard-screenshots).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("DASHBOARD_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := value(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(dir, "dashboard-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s", path)
}

// TestTheDashboardInABrowser drives the dashboard in headless Chromium:
// logging in through the form, a payment made through the API appearing on
// Payments without a reload, a form posted without its CSRF token refused,
// a tenant kept from another's data and from an operator's page, and every
// page fitting 1280×800 and a phone's width. With DASHBOARD_SCREENSHOTS set
// it saves a screenshot of each page there.
func TestTheDashboardInABrowser(t *testing.T) {
	ctx := newChrome(t)
	e := newEnv(t, true)
	base := e.url + "/dashboard"

	// Log in as tenant_a through the form the dashboard sends to.
	run(t, ctx, "open the dashboard", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("secret")))
	fits(t, ctx, "the login form")
	screenshot(t, ctx, "login")
	run(t, ctx, "log in", chromedp.SendKeys(chromedp.ID("secret"), secretA), chromedp.Submit(chromedp.ID("secret")),
		chromedp.WaitVisible(chromedp.ID("chart-outcomes")))
	if !strings.Contains(text(t, ctx), "tenant tenant_a") {
		t.Fatal("logged in, the page does not name tenant_a")
	}

	// A payment made through the API appears on Payments without a reload.
	run(t, ctx, "open the payments", chromedp.Navigate(base+"/payments"),
		chromedp.WaitVisible(chromedp.ID("payments-empty")),
		evaluate(`window.notReloaded = true`))
	waitLive(t, ctx)
	id := e.pay(secretA, "b-1", payment("acc_1", "order-1001", "42.00", "pm_card_visa", "automatic"))
	run(t, ctx, "see the new payment", chromedp.WaitVisible(chromedp.ID("row-"+id)))
	if !value(t, ctx, "check the page stayed", chromedp.Evaluate[bool](`window.notReloaded === true`)) {
		t.Error("the page was reloaded to show the payment")
	}
	for i := range 4 { // a few more, across minutes, for the Overview
		e.clock.Advance(time.Minute)
		e.health.Sample()
		method := "pm_card_visa"
		if i == 2 {
			method = "pm_card_chargeDeclined"
		}
		e.pay(secretA, "b-more-"+string(rune('a'+i)), payment("acc_2", "order-20"+string(rune('0'+i)), "15.00", method, "manual"))
	}
	run(t, ctx, "see the others", chromedp.WaitVisible(chromedp.CSS(`#payment-rows tr:nth-child(5)`)))
	fits(t, ctx, "Payments at 1280×800")
	screenshot(t, ctx, "payments")

	run(t, ctx, "open the payment", chromedp.Navigate(base+"/payments/"+id), chromedp.WaitVisible(chromedp.ID("refund-amount")))
	fits(t, ctx, "a payment's page at 1280×800")
	screenshot(t, ctx, "payment")

	// A form sent without its CSRF token is refused.
	run(t, ctx, "post the refund without its token",
		evaluate(`document.querySelector('form[action$="/refund"] input[name=csrf]').remove()`),
		chromedp.SetValue(chromedp.ID("refund-amount"), "1.00"),
		chromedp.Submit(chromedp.ID("refund-amount")),
		chromedp.WaitReady(chromedp.CSS("body")))
	waitText(t, ctx, "CSRF token is missing or wrong")

	run(t, ctx, "open the Overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("chart-outcomes")))
	fits(t, ctx, "the Overview at 1280×800")
	screenshot(t, ctx, "overview")

	// A phone's width: the same pages in one column.
	run(t, ctx, "narrow the window", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile),
		chromedp.Navigate(base+"/payments"), chromedp.WaitVisible(chromedp.ID("row-"+id)))
	fits(t, ctx, "Payments on a phone")
	screenshot(t, ctx, "phone")
	run(t, ctx, "open the payment on a phone", chromedp.Navigate(base+"/payments/"+id), chromedp.WaitVisible(chromedp.ID("refund-amount")))
	fits(t, ctx, "a payment's page on a phone")
	run(t, ctx, "open the Overview on a phone", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("chart-outcomes")))
	fits(t, ctx, "the Overview on a phone")
	run(t, ctx, "widen the window", chromedp.EmulateViewport(1280, 800))

	// Another tenant sees none of it, and no operator's page.
	run(t, ctx, "log out", chromedp.Click(chromedp.CSS(`.logout button`)), chromedp.WaitVisible(chromedp.ID("secret")))
	run(t, ctx, "log in as tenant_b", chromedp.SendKeys(chromedp.ID("secret"), secretB), chromedp.Submit(chromedp.ID("secret")),
		chromedp.WaitVisible(chromedp.ID("chart-outcomes")), chromedp.Navigate(base+"/payments"), chromedp.WaitVisible(chromedp.ID("payments-empty")))
	if s := text(t, ctx); strings.Contains(s, id) || strings.Contains(s, "order-1001") {
		t.Error("tenant_b's payments show tenant_a's payment")
	}
	run(t, ctx, "open tenant_a's payment", chromedp.Navigate(base+"/payments/"+id+"?tenant=tenant_a"), chromedp.WaitReady(chromedp.CSS("main")))
	if s := text(t, ctx); !strings.Contains(s, "No such payment") || strings.Contains(s, "42.00") {
		t.Errorf("tenant_b opened tenant_a's payment:\n%s", s)
	}
	run(t, ctx, "open the operators' page", chromedp.Navigate(base+"/tenants"), chromedp.WaitReady(chromedp.CSS("main")))
	if s := text(t, ctx); !strings.Contains(s, "for operators only") {
		t.Errorf("tenant_b opened the operators' page:\n%s", s)
	}
	run(t, ctx, "open Needs attention", chromedp.Navigate(base+"/attention"), chromedp.WaitReady(chromedp.CSS("main")))
	if s := text(t, ctx); !strings.Contains(s, "for operators only") || strings.Contains(s, "manual review") {
		t.Errorf("tenant_b opened Needs attention:\n%s", s)
	}

	// An operator sees every tenant.
	run(t, ctx, "log out", chromedp.Click(chromedp.CSS(`.logout button`)), chromedp.WaitVisible(chromedp.ID("secret")))
	run(t, ctx, "log in as an operator", chromedp.SendKeys(chromedp.ID("secret"), secretOp), chromedp.Submit(chromedp.ID("secret")),
		chromedp.WaitVisible(chromedp.ID("chart-outcomes")))
	screenshot(t, ctx, "operator-overview")
	run(t, ctx, "open the tenants", chromedp.Navigate(base+"/tenants"), chromedp.WaitVisible(chromedp.CSS(`table.list`)))
	fits(t, ctx, "Tenants at 1280×800")
	screenshot(t, ctx, "tenants")

	// A payment whose answer was lost: its page shows the unknown outcome,
	// then, live, the reconciler's resolution.
	lost := e.payAnyhow(secretA, "b-lost", payment("acc_1", "order-lost", "30.00", "pm_sim_timeout_after_success", "automatic"))
	run(t, ctx, "open the lost payment", chromedp.Navigate(base+"/payments/"+lost+"?tenant=tenant_a"),
		chromedp.WaitVisible(chromedp.ID("timeline-title")))
	waitText(t, ctx, "outcome unknown")
	waitLive(t, ctx)
	e.clock.Advance(10 * time.Minute)
	if _, err := e.core.Reconciler.RunOnce(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, "provider confirmed")
	screenshot(t, ctx, "payment-reconciled")

	// A key in manual review: resolving it against the provider's answer is
	// refused; with it, the payment settles and the audit log names the
	// operator.
	review := e.payAnyhow(secretA, "b-review", payment("acc_1", "order-review", "18.00", "pm_sim_timeout_after_success", "automatic"))
	e.leaveForReview(review)
	run(t, ctx, "open Needs attention", chromedp.Navigate(base+"/attention"), chromedp.WaitVisible(chromedp.ID("review-"+review)))
	fits(t, ctx, "Needs attention at 1280×800")
	screenshot(t, ctx, "attention")
	resolveAs := func(outcome, reason string) {
		sel := `#review-` + review
		run(t, ctx, "resolve as "+outcome,
			chromedp.Click(chromedp.CSS(sel+` input[value=`+outcome+`]`)),
			chromedp.SendKeys(chromedp.CSS(sel+` input[name=reason]`), reason),
			chromedp.Submit(chromedp.CSS(sel+` input[name=reason]`)),
			chromedp.WaitVisible(chromedp.ID("result-title")))
	}
	resolveAs("declined", "the customer says it failed")
	waitText(t, ctx, "contradicts the provider, which reports it succeeded")
	if len(e.resolutions()) != 0 {
		t.Error("a refused resolution was audited")
	}
	resolveAs("succeeded", "the provider's dashboard shows the charge")
	waitText(t, ctx, "Resolved: succeeded")
	if got := e.resolutions(); len(got) != 1 || got[0].Actor != "operator:alice" || got[0].Details["reason"] != "the provider's dashboard shows the charge" {
		t.Errorf("the audit log's resolutions: %+v", got)
	}

	// A webhook resend, from the tenant's Webhooks page.
	e.endpoint(secretA, "b-we", "http://127.0.0.1:9/hooks")
	run(t, ctx, "open the webhooks", chromedp.Navigate(base+"/webhooks?tenant=tenant_a"), chromedp.WaitVisible(chromedp.ID("endpoints")))
	fits(t, ctx, "Webhooks at 1280×800")
	screenshot(t, ctx, "webhooks")
	run(t, ctx, "resend the latest event", chromedp.Click(chromedp.CSS(`.inline-form button`)), chromedp.WaitVisible(chromedp.ID("result-title")))
	waitText(t, ctx, "202 Accepted")

	run(t, ctx, "narrow the window again", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile),
		chromedp.Navigate(base+"/attention"), chromedp.WaitVisible(chromedp.ID("review-title")))
	fits(t, ctx, "Needs attention on a phone")
	run(t, ctx, "open the webhooks on a phone", chromedp.Navigate(base+"/webhooks?tenant=tenant_a"), chromedp.WaitVisible(chromedp.ID("endpoints")))
	fits(t, ctx, "Webhooks on a phone")
}

// evaluate runs a script whose value does not matter.
func evaluate(script string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](script+`; null`)(ctx, t)
		if errors.Is(err, chromedp.ErrJSNull) {
			return nil
		}
		return err
	})
}

// waitLive waits until the page's stream is open.
func waitLive(t *testing.T, ctx context.Context) {
	t.Helper()
	waitText(t, ctx, "Live: changes appear")
}

// waitText waits until the page shows s.
func waitText(t *testing.T, ctx context.Context, s string) {
	t.Helper()
	testio.Eventually(t, "the page to show "+s, 20*time.Second, func() (bool, string) {
		page := text(t, ctx)
		return strings.Contains(page, s), page
	})
}
