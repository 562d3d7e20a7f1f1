package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/paymentsapi/paymentsapi/client"
)

// fakeClient is a Client of the fake API that retries at once.
func fakeClient(t *testing.T, f *fakeAPI) *client.Client {
	t.Helper()
	return fakeClientWithSecret(t, f, fakeSecret)
}

// paid creates a payment with method on the fake API.
func paid(t *testing.T, c *client.Client, method string) client.Payment {
	t.Helper()
	req := payReq()
	req.PaymentMethod = method
	res, err := c.CreatePayment(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res.Payment
}

func TestCreateRefundRetriesALostAnswerUnderOneKey(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t)
	c := fakeClient(t, f)
	ctx := context.Background()
	p := paid(t, c, "pm_card_visa")

	f.drop(1) // the fake refunds, then the answer is lost
	res, err := c.CreateRefund(ctx, p.PaymentID, client.CreateRefundRequest{Amount: "3.00", Reason: client.ReasonRequestedByCustomer})
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 201 || !res.Replayed || res.Attempts != 2 {
		t.Errorf("outcome %+v, want the replayed 201 on the second attempt", res.Outcome)
	}
	if r := res.Refund; r.Status != client.RefundSucceeded || r.Amount != "3.00" || r.PaymentID != p.PaymentID || r.Reason != client.ReasonRequestedByCustomer {
		t.Errorf("refund %+v", r)
	}
	if want := "/payments/" + p.PaymentID + "/refunds/" + res.Refund.RefundID; res.Location != want {
		t.Errorf("Location %q, want %q", res.Location, want)
	}
	keys := f.keys()
	if got := keys[len(keys)-2:]; got[0] != res.IdempotencyKey || got[1] != res.IdempotencyKey {
		t.Errorf("the two attempts carried keys %q, want %q twice", got, res.IdempotencyKey)
	}

	list, err := c.ListRefunds(ctx, p.PaymentID)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].RefundID != res.Refund.RefundID {
		t.Errorf("refunds %+v, want exactly the one refund", list.Items)
	}
	got, err := c.GetRefund(ctx, p.PaymentID, res.Refund.RefundID)
	if err != nil {
		t.Fatal(err)
	}
	if got.RefundID != res.Refund.RefundID || got.Status != client.RefundSucceeded {
		t.Errorf("GetRefund: %+v", got)
	}
	payment, err := c.GetPayment(ctx, p.PaymentID)
	if err != nil {
		t.Fatal(err)
	}
	if payment.RefundedAmount != "3.00" {
		t.Errorf("refundedAmount %q, want 3.00", payment.RefundedAmount)
	}
}

func TestRefundRefusalsAreFinal(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t)
	c := fakeClient(t, f)
	ctx := context.Background()
	ok := paid(t, c, "pm_card_visa")
	refundDeclines := paid(t, c, "pm_sim_refund_declined")
	_, err := c.CreatePayment(ctx, func() client.CreatePaymentRequest {
		r := payReq()
		r.PaymentMethod, r.MerchantReference = "pm_card_chargeDeclined", "inv-2"
		return r
	}())
	var paymentDeclined *client.DeclinedError
	if !errors.As(err, &paymentDeclined) || paymentDeclined.Problem.Code != client.CodePaymentDeclined {
		t.Fatalf("payment with pm_card_chargeDeclined: %v, want a DeclinedError", err)
	}
	declinedPayment := paymentDeclined.Problem.PaymentID

	for _, tc := range []struct {
		name      string
		paymentID string
		amount    string
		status    int
		code      client.Code
		check     func(t *testing.T, p *client.Error)
	}{
		{"declined", refundDeclines.PaymentID, "1.00", 402, client.CodeRefundDeclined, func(t *testing.T, p *client.Error) {
			if p.RefundID == "" {
				t.Error("REFUND_DECLINED without refundId")
			}
		}},
		{"more than is left", ok.PaymentID, "10.01", 409, client.CodeRefundExceedsRefundable, func(t *testing.T, p *client.Error) {
			if p.RefundableAmount != "10.00" {
				t.Errorf("refundableAmount %q, want 10.00", p.RefundableAmount)
			}
		}},
		{"payment not succeeded", declinedPayment, "1.00", 409, client.CodePaymentNotRefundable, nil},
		{"unknown payment", "pay_unknown", "1.00", 404, client.CodeNotFound, nil},
		{"invalid amount", ok.PaymentID, "1.5.0", 400, client.CodeValidationFailed, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.keys())
			res, err := c.CreateRefund(ctx, tc.paymentID, client.CreateRefundRequest{Amount: tc.amount})
			var p *client.Error
			if !errors.As(err, &p) || p.Status != tc.status || p.Code != tc.code {
				t.Fatalf("result %+v, error %v: want %d %s", res, err, tc.status, tc.code)
			}
			var declined *client.DeclinedError
			if errors.As(err, &declined) != (tc.status == 402) {
				t.Errorf("DeclinedError only for 402: %v", err)
			}
			if n := len(f.keys()) - before; n != 1 {
				t.Errorf("%d attempts, want 1: the answer is final", n)
			}
			if tc.check != nil {
				tc.check(t, p)
			}
		})
	}
}
