package payments_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
	"github.com/paymentsapi/paymentsapi/internal/testio/headless"
)

// The customer in a real browser: the payment's nextAction.url opens the
// provider simulator's challenge page; a click on Approve (or Fail) ends on
// the merchant's returnUrl with the payment's id added, through the
// service's return route, which settled the payment: SUCCEEDED, or
// DECLINED authentication_failed.
func TestTheChallengePageInABrowser(t *testing.T) {
	ctx := headless.Chrome(t)
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><title>Shop</title><p id="done">Thank you.</p>`))
	}))
	defer shop.Close()
	// The service's own address is its PUBLIC_URL (servicetest's default):
	// the browser comes back to it. A merchant on plain http is allowed,
	// as in dev mode.
	e := servicetest.New(t, servicetest.WithConfig(func(c *app.Config) { c.AllowHTTPReturnURL = true }))
	returnURL := shop.URL + "/checkout/done?order=7781"

	for _, tc := range []struct {
		button      string
		status      string
		state       payments.State
		event       string
		declineCode string
	}{
		{"approve", "SUCCEEDED", payments.StateCompleted, payments.EventSucceeded, ""},
		{"fail", "DECLINED", payments.StateDeclined, payments.EventDeclined, payments.DeclineAuthenticationFailed},
	} {
		t.Run(tc.button, func(t *testing.T) {
			id, challenge, _ := requiresAction(t, e, "browser-"+tc.button, servicetest.Body(
				"merchantReference", `"browser-`+tc.button+`"`, "paymentMethod", `"pm_card_threeDSecureRequired"`,
				"returnUrl", `"`+returnURL+`"`))

			step, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			err := chromedp.Do(step,
				chromedp.Navigate(challenge),
				chromedp.WaitVisible(chromedp.ID(tc.button)),
				chromedp.Click(chromedp.ID(tc.button)),
				chromedp.WaitVisible(chromedp.ID("done")))
			var landed string
			if err == nil {
				landed, err = chromedp.Run(step, chromedp.Location())
			}
			if err != nil {
				body, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("body")))
				t.Fatalf("press %s: %v\n%.2000s", tc.button, err, body)
			}
			u, err := url.Parse(landed)
			if err != nil || u.Host != mustHost(t, shop.URL) || u.Path != "/checkout/done" ||
				u.Query().Get("order") != "7781" || u.Query().Get("paymentId") != id {
				t.Errorf("the browser landed on %s, want %s with paymentId=%s", landed, returnURL, id)
			}

			got := e.Get(servicetest.SecretA, "/payments/"+id).JSON(t)
			if got["status"] != tc.status || (tc.declineCode != "" && got["declineCode"] != tc.declineCode) {
				t.Errorf("payment %v, want %s %s", got, tc.status, tc.declineCode)
			}
			assertSettledOnce(t, e, id, tc.state, tc.event)
		})
	}
}

func mustHost(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}
