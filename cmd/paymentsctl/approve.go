package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/paymentsapi/paymentsapi/client"
)

// challengeTimeout bounds each request to the challenge page and to the
// service's return route.
const challengeTimeout = 30 * time.Second

// returnRoute is the path of the service's customer return
// (GET /payments/{paymentId}/return), where the provider sends the
// customer after the challenge.
var returnRoute = regexp.MustCompile(`^/payments/([^/]+)/return$`)

// challenge is `paymentsctl approve NEXT_ACTION_URL` (action approve, or
// fail with -fail) and `paymentsctl fail NEXT_ACTION_URL`: it does what a
// customer's browser does on the provider simulator's 3-D Secure challenge
// page. It loads the page, presses the button (POSTs the page's form), and
// follows the provider's redirect to the service's return route, which
// settles the payment, but no further: the merchant's returnUrl after it
// is the merchant's page, not the service's. It then prints the payment
// as the API answers it.
func challenge(action string) command {
	return func(ctx context.Context, c *client.Client, args []string, out *output) int {
		fs := subcommandFlags(action)
		failIt := action == "fail"
		if action == "approve" {
			fs.BoolVar(&failIt, "fail", false, "press Fail instead of Approve")
		}
		pageURL, err := parseWithID(fs, args, "NEXT_ACTION_URL (the payment's nextAction.url)")
		if err != nil {
			return out.usage(err)
		}
		choice := "approve"
		if failIt {
			choice = "fail"
		}
		id, err := pressButton(ctx, pageURL, choice, out)
		if err != nil {
			out.errorf("%v", err)
			return exitError
		}
		if id == "" {
			return exitOK // a charge the service did not make: the page said what became of it
		}
		p, err := c.GetPayment(ctx, id)
		if err != nil {
			return out.failure(err)
		}
		if code := out.resource(p); code != exitOK {
			return code
		}
		return settledStatus(p)
	}
}

// settledStatus is the exit status of a payment after its customer chose.
func settledStatus(p *client.Payment) int {
	switch p.Status {
	case client.PaymentSucceeded, client.PaymentRequiresCapture:
		return exitOK
	case client.PaymentDeclined:
		return exitDeclined
	case client.PaymentRequiresAction:
		return exitRequiresAction
	}
	return exitError
}

// browser stops at every redirect: pressButton decides which to follow.
var browser = &http.Client{
	Timeout:       challengeTimeout,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// pressButton loads the challenge page at pageURL, presses the button
// choice (approve or fail) and follows the redirect to the service's
// return route. It returns the payment's id ("" when the provider sent
// the customer elsewhere, or nowhere, which it tells on stderr).
func pressButton(ctx context.Context, pageURL, choice string, out *output) (string, error) {
	page, err := url.Parse(pageURL)
	if err != nil || (page.Scheme != "http" && page.Scheme != "https") || page.Host == "" {
		return "", fmt.Errorf("%q is not a challenge page's URL: pass the payment's nextAction.url", pageURL)
	}
	status, body, _, err := fetch(ctx, http.MethodGet, page.String(), nil)
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("the challenge page answered %d: %s", status, strings.TrimSpace(body))
	}
	if !strings.Contains(body, `<form method="post"`) || !strings.Contains(body, `name="action" value="`+choice+`"`) {
		return "", fmt.Errorf("the page at %s has no %s button: %s", pageURL, choice, pageState(body))
	}
	// The form has no action: a browser posts it to the page's own URL.
	status, body, location, err := fetch(ctx, http.MethodPost, page.String(), url.Values{"action": {choice}})
	if err != nil {
		return "", err
	}
	switch {
	case status == http.StatusOK:
		_, _ = fmt.Fprintf(out.stderr, "%s", body) // a charge without a return URL: the page says what became of it
		return "", nil
	case status != http.StatusSeeOther || location == "":
		return "", fmt.Errorf("pressing %s answered %d: %s", choice, status, strings.TrimSpace(body))
	}
	back, err := page.Parse(location)
	if err != nil {
		return "", fmt.Errorf("the provider sent the customer to %q: %v", location, err)
	}
	m := returnRoute.FindStringSubmatch(back.Path)
	if m == nil {
		_, _ = fmt.Fprintf(out.stderr, "the provider sent the customer to %s\n", back)
		return "", nil
	}
	// The customer's return settles the payment; should it fail, the
	// provider's webhook and the service's reconciler settle it too.
	if status, body, _, err := fetch(ctx, http.MethodGet, back.String(), nil); err != nil {
		out.errorf("the customer's return to %s failed (the service learns the outcome by other roads): %v", back, err)
	} else if status != http.StatusOK && status != http.StatusSeeOther {
		out.errorf("the customer's return to %s answered %d: %s", back, status, strings.TrimSpace(body))
	}
	return m[1], nil
}

// fetch sends one request to u (a form, when form is not nil), and returns
// the answer's status, body (its start) and Location.
func fetch(ctx context.Context, method, u string, form url.Values) (status int, body, location string, err error) {
	var rd io.Reader
	if form != nil {
		rd = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, "", "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := browser.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), resp.Header.Get("Location"), err
}

// pageStatus finds what a challenge page says of a decided charge.
var pageStatus = regexp.MustCompile(`<p id="status">([^<]*)</p>`)

// pageState is what the challenge page body says when it offers no
// button.
func pageState(body string) string {
	if m := pageStatus.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return "it is not a challenge page"
}
