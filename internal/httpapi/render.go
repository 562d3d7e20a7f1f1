package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
)

// NewRenderer returns the engine's Renderer: how each operation's result is
// answered. The engine calls it once for a final result, in the transaction
// that stores the answer, and replays the stored bytes ever after; results
// that are not final (processing) are rendered for each request.
// retryAfter is the service's one advice to come back later.
func NewRenderer(retryAfter time.Duration) idempotency.Renderer {
	return func(r idempotency.Result) (idempotency.Response, error) {
		switch v := r.(type) {
		case payments.Payment:
			return renderPayment(v, retryAfter), nil
		case refunds.Refund:
			return renderRefund(v, retryAfter), nil
		default:
			return idempotency.Response{}, fmt.Errorf("no rendering for %T", r)
		}
	}
}

// renderPayment: 201 with the payment when it succeeded, 402 with a
// PAYMENT_DECLINED problem when declined, else 202 with the payment and
// Retry-After (the outcome is not known yet).
func renderPayment(p payments.Payment, retryAfter time.Duration) idempotency.Response {
	switch p.State.Status() {
	case payments.StatusSucceeded:
		return resourceResponse(http.StatusCreated, p.View(), paymentLocation(p.ID), 0)
	case payments.StatusDeclined:
		prob := problem.New(http.StatusPaymentRequired, problem.PaymentDeclined, "The payment provider declined the payment.")
		prob.PaymentID, prob.DeclineCode = p.ID, p.DeclineCode
		return problemResponse(prob)
	case payments.StatusCanceled:
		prob := problem.New(http.StatusConflict, problem.PaymentCanceled,
			"This payment was canceled: no money moved and nobody retried it within the replay window. Pay with a new Idempotency-Key.")
		prob.PaymentID = p.ID
		return problemResponse(prob)
	default:
		return resourceResponse(http.StatusAccepted, p.View(), paymentLocation(p.ID), retryAfter)
	}
}

func paymentLocation(id string) string { return "/payments/" + id }

// renderRefund: 201 with the refund when it succeeded, 402 with a
// REFUND_DECLINED problem when declined, else 202 with Retry-After.
func renderRefund(r refunds.Refund, retryAfter time.Duration) idempotency.Response {
	location := refundLocation(r.PaymentID, r.ID)
	switch r.State {
	case refunds.StateSucceeded:
		return resourceResponse(http.StatusCreated, r.View(), location, 0)
	case refunds.StateDeclined:
		prob := problem.New(http.StatusPaymentRequired, problem.RefundDeclined, "The payment provider declined the refund.")
		prob.RefundID, prob.PaymentID, prob.DeclineCode = r.ID, r.PaymentID, r.DeclineCode
		return problemResponse(prob)
	default:
		return resourceResponse(http.StatusAccepted, r.View(), location, retryAfter)
	}
}

func refundLocation(paymentID, id string) string { return "/payments/" + paymentID + "/refunds/" + id }

// resourceResponse is a JSON resource answer with its Location, and a
// Retry-After when retryAfter is set.
func resourceResponse(status int, view any, location string, retryAfter time.Duration) idempotency.Response {
	body, _ := json.Marshal(view) // views hold strings and times only
	h := map[string]string{"Content-Type": "application/json", "Location": location}
	if retryAfter > 0 {
		h["Retry-After"] = retryAfterValue(retryAfter)
	}
	return idempotency.Response{Status: status, Body: body, Headers: h}
}

func problemResponse(p *problem.Problem) idempotency.Response {
	return idempotency.Response{Status: p.Status, Body: p.JSON(), Headers: map[string]string{"Content-Type": problem.ContentType}}
}

// retryAfterValue is the one rule for the Retry-After header: whole
// seconds, rounded up, at least 1.
func retryAfterValue(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}

// writeReply sends an engine reply: the stored (or fresh) answer, marked when
// it is a replay.
func writeReply(w http.ResponseWriter, reply idempotency.Reply) {
	for k, v := range reply.Response.Headers {
		w.Header().Set(k, v)
	}
	if reply.Replayed {
		w.Header().Set(ReplayedHeader, "true")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(reply.Response.Status)
	_, _ = w.Write(reply.Response.Body)
}
