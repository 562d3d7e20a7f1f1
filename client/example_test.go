package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/paymentsapi/paymentsapi/client"
)

// exampleServer stands in for the API in the example.
func exampleServer() *fakeAPI {
	f, err := startFakeAPI(func(format string, args ...any) { panic(fmt.Sprintf(format, args...)) })
	if err != nil {
		log.Fatal(err)
	}
	return f
}

// Pay, handle every kind of answer, and refund part of the payment.
func Example() {
	server := exampleServer() // stands in for your API: use its URL, such as http://localhost:8080
	defer server.Close()

	c, err := client.New(client.Config{
		BaseURL:    server.URL,
		APIKey:     "sk_test_demo",
		PreferWait: 5 * time.Second, // a retry that finds the original in flight waits for it
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, method := range []string{"pm_card_visa", "pm_card_chargeDeclined"} {
		// One key per logical payment. Store it with the order before the
		// call: then even a crash of this program can be retried safely.
		key := client.NewIdempotencyKey()
		res, err := c.CreatePayment(ctx, client.CreatePaymentRequest{
			AccountID:         "acc_1",
			Amount:            "10.00", // a decimal string, never a float
			Currency:          "EUR",
			MerchantReference: "invoice-" + method,
			PaymentMethod:     method,
		}, client.WithIdempotencyKey(key))

		var declined *client.DeclinedError
		var problem *client.Error
		switch {
		case errors.As(err, &declined):
			fmt.Println("declined:", declined.Problem.DeclineCode)
			continue
		case errors.As(err, &problem):
			fmt.Println("refused:", problem.Code, problem.Detail) // or, after retries, unavailable
			continue
		case err != nil:
			fmt.Println("no answer; retry later with the same key:", err)
			continue
		case res.StillProcessing():
			fmt.Println("outcome not known yet; retry later with the same key")
			continue
		}
		fmt.Println(res.Payment.Status, res.Payment.Amount, res.Payment.Currency)

		refund, err := c.CreateRefund(ctx, res.Payment.PaymentID, client.CreateRefundRequest{
			Amount: "3.00",
			Reason: client.ReasonRequestedByCustomer,
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("refund", refund.Refund.Status, refund.Refund.Amount)
	}
	// Output:
	// SUCCEEDED 10.00 EUR
	// refund SUCCEEDED 3.00
	// declined: generic_decline
}
