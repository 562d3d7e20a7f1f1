package client_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/client"
	"github.com/paymentsapi/paymentsapi/internal/apitest"
)

// The listings' filters reach the server as it reads them (a list of
// statuses or types comma-separated, times in RFC 3339, each parameter
// once), and each narrows the page to what meets it. A filter the server
// does not take would be refused, never ignored.
func TestServerListFilters(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	c, _ := serverClient(t, s.URL, s.Secret)
	ctx := context.Background()
	pay := func(reference, method, account string) string {
		t.Helper()
		req := payment(reference, method)
		req.AccountID = account
		res, err := c.CreatePayment(ctx, req)
		var declined *client.DeclinedError
		switch {
		case errors.As(err, &declined):
			return declined.Problem.PaymentID
		case err != nil:
			t.Fatal(err)
		}
		return res.Payment.PaymentID
	}
	first := pay("inv-1", "pm_card_visa", "acc_1")
	declined := pay("inv-2", "pm_card_chargeDeclined", "acc_2")
	third := pay("inv-3", "pm_card_visa", "acc_2")

	ids := func(params client.ListPaymentsParams) []string {
		t.Helper()
		page, err := c.ListPayments(ctx, params)
		if err != nil {
			t.Fatalf("%+v: %v", params, err)
		}
		var ids []string
		for _, p := range page.Items {
			ids = append(ids, p.PaymentID)
		}
		return ids
	}
	second, err := c.GetPayment(ctx, declined)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		params client.ListPaymentsParams
		want   []string
	}{
		{client.ListPaymentsParams{Statuses: []client.PaymentStatus{client.PaymentDeclined}}, []string{declined}},
		{client.ListPaymentsParams{Statuses: []client.PaymentStatus{client.PaymentDeclined, client.PaymentSucceeded}, AccountID: "acc_2"}, []string{third, declined}},
		{client.ListPaymentsParams{MerchantReference: "inv-3"}, []string{third}},
		{client.ListPaymentsParams{CreatedFrom: second.CreatedAt}, []string{third, declined}},
		{client.ListPaymentsParams{CreatedTo: second.CreatedAt}, []string{first}},
		{client.ListPaymentsParams{CreatedFrom: time.Now().Add(time.Hour)}, nil},
	} {
		if got := ids(tc.params); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.params, got, tc.want)
		}
	}

	page, err := c.ListEvents(ctx, client.ListEventsParams{PaymentID: declined, Types: []client.EventType{client.EventPaymentDeclined, client.EventPaymentCreated}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 2 {
		t.Errorf("the declined payment's created and declined events: %+v", page.Items)
	}
	for _, e := range page.Items {
		if p, err := e.Data.AsPayment(); err != nil || p.PaymentID != declined {
			t.Errorf("an event of another payment: %+v", e)
		}
	}
	if page, err := c.ListEvents(ctx, client.ListEventsParams{Type: client.EventPaymentSucceeded, Types: []client.EventType{client.EventPaymentDeclined}}); err != nil || len(page.Items) != 3 {
		t.Errorf("Type and Types together, any of them: %v %+v", err, page)
	}
	_, err = c.ListPayments(ctx, client.ListPaymentsParams{Statuses: []client.PaymentStatus{"EXPLODED"}})
	wantProblem(t, err, 400, client.CodeValidationFailed)
}
