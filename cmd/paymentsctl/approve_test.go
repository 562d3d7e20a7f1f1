package main

import (
	"context"
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/apitest"
)

// requiresAction pays with a method that makes the customer authenticate:
// exit 4, the payment REQUIRES_ACTION on stdout, its nextAction URL on
// stderr. It returns the payment's id and the URL.
func requiresAction(t *testing.T, s *apitest.Server, reference, method string) (id, nextAction string) {
	t.Helper()
	r := ctl(context.Background(), nil, flags(s, payArgs(reference, method, "-idempotency-key", reference)...)...)
	r.want(t, exitRequiresAction)
	p := r.json(t)
	id, _ = p["paymentId"].(string)
	na, _ := p["nextAction"].(map[string]any)
	nextAction, _ = na["url"].(string)
	if p["status"] != "REQUIRES_ACTION" || nextAction == "" {
		t.Fatalf("pay printed %v, want REQUIRES_ACTION with nextAction.url", p)
	}
	if line := lineWith(r.stderr, "nextAction: "); line != "nextAction: "+nextAction+"\n" {
		t.Errorf("stderr %q, want the line nextAction: %s", r.stderr, nextAction)
	}
	return id, nextAction
}

func TestPayRequiresActionThenApprove(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	id, next := requiresAction(t, s, "inv-3ds-1", "pm_card_threeDSecureRequired")

	a := ctl(ctx, nil, flags(s, "approve", next)...)
	a.want(t, exitOK)
	if p := a.json(t); p["paymentId"] != id || p["status"] != "SUCCEEDED" || p["nextAction"] != nil {
		t.Errorf("approve printed %v, want payment %s SUCCEEDED without nextAction", p, id)
	}
	if c := s.Charges(id); len(c) != 1 || c[0].Status != "succeeded" {
		t.Errorf("the provider's charges %+v, want one succeeded", c)
	}

	// The page has no button left: the charge is decided.
	again := ctl(ctx, nil, flags(s, "approve", next)...)
	again.want(t, exitError)
	if !strings.Contains(again.stderr, "no approve button") || !strings.Contains(again.stderr, "succeeded") {
		t.Errorf("approve of a decided charge: stderr %q", again.stderr)
	}
}

func TestFailAndApproveFailDecline(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	for _, args := range [][]string{{"fail"}, {"approve", "-fail"}} {
		id, next := requiresAction(t, s, "inv-3ds-"+strings.Join(args, ""), "pm_card_threeDSecureRequired")
		r := ctl(ctx, nil, flags(s, append(args, next)...)...)
		r.want(t, exitDeclined)
		if p := r.json(t); p["paymentId"] != id || p["status"] != "DECLINED" || p["declineCode"] != "authentication_failed" {
			t.Errorf("%v printed %v, want DECLINED authentication_failed", args, p)
		}
	}
}

func TestApproveUsageErrorsExit1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, args := range [][]string{{"approve"}, {"fail"}, {"approve", "not a url"}, {"fail", "-fail", "http://127.0.0.1:1/challenge/x"}} {
		r := ctl(ctx, nil, args...)
		r.want(t, exitError)
		if r.stdout != "" {
			t.Errorf("%v printed %q on stdout", args, r.stdout)
		}
	}
}
