package dashboard

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/paymentsapi/paymentsapi/internal/authorizations"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// actionResult is what an action's request was answered, as the API would
// have answered it.
type actionResult struct {
	Action string
	Key    string
	Status int    // the API's status for the same request
	Title  string // of the answer: "Captured", or the problem's title
	Detail string
	OK     bool
}

// act sends a payment's capture, cancel or refund through the same
// services the API's handlers call, under the idempotency key the page
// made: the engine answers it as it answers an API request, and a form
// sent again replays its answer. The payment's page is shown again, with
// the answer.
func (s *server) act(w http.ResponseWriter, r *http.Request) {
	action, id, tenant := chi.URLParam(r, "action"), chi.URLParam(r, "paymentId"), tenantOf(r)
	if tenant == "" || !validate.StorableText(id) {
		s.problem(w, r, http.StatusNotFound, "No such payment.")
		return
	}
	key, err := idempotency.ParseKey([]string{r.PostFormValue("key")})
	if err != nil {
		s.showPayment(w, r, http.StatusBadRequest, &actionResult{Action: action, Status: http.StatusBadRequest,
			Title: "No idempotency key", Detail: err.Error()})
		return
	}
	logging.Add(r.Context(), "payment_id", id)
	ctx := r.Context()
	var (
		reply idempotency.Reply
		op    operation.Instance
	)
	amount, reason := strings.TrimSpace(r.PostFormValue("amount")), strings.TrimSpace(r.PostFormValue("reason"))
	switch action {
	case "capture":
		op = s.Captures
		req := authorizations.CaptureRequest{}
		if amount != "" {
			a := money.Amount(amount)
			req.Amount = &a
		}
		var cmd authorizations.Command
		if cmd, err = s.Captures.PrepareCapture(ctx, tenant, id, req); err == nil {
			reply, err = s.Captures.Create(ctx, tenant, key, cmd, 0)
		}
	case "cancel":
		op = s.Cancels
		req := authorizations.CancelRequest{}
		if reason != "" {
			req.Reason = &reason
		}
		var cmd authorizations.Command
		if cmd, err = s.Cancels.PrepareCancel(ctx, tenant, id, req); err == nil {
			reply, err = s.Cancels.Create(ctx, tenant, key, cmd, 0)
		}
	case "refund":
		op = s.Refunds
		req := refunds.CreateRequest{Amount: money.Amount(amount)}
		if reason != "" {
			req.Reason = &reason
		}
		cmd, perr := s.Refunds.Prepare(ctx, tenant, id, req)
		if err = perr; err == nil {
			reply, err = s.Refunds.Create(ctx, tenant, key, cmd, 0)
		}
	}
	result := &actionResult{Action: action, Key: key}
	if err != nil {
		if !describe(result, op, err) {
			s.fail(w, r, err)
			return
		}
		s.showPayment(w, r, result.Status, result)
		return
	}
	answered(result, reply)
	s.showPayment(w, r, http.StatusOK, result)
}

// answered fills result from the engine's answer: its status, and for a
// problem its title and detail.
func answered(result *actionResult, reply idempotency.Reply) {
	result.Status = reply.Response.Status
	result.OK = reply.Response.Status < 300
	switch {
	case reply.Response.Status == http.StatusAccepted:
		result.Title, result.Detail = "Accepted", "The provider has not answered yet: the service finishes it, and this page shows the outcome."
	case result.OK:
		result.Title = "Done"
	default:
		var p struct{ Title, Detail string }
		_ = json.Unmarshal(reply.Response.Body, &p)
		result.Title, result.Detail = p.Title, p.Detail
	}
	if reply.Replayed {
		result.Detail = strings.TrimSpace(result.Detail + " This answer is a replay: the key was used before.")
	}
}

// describe fills result from err, the operation's own error or a
// validation failure, as the API's problem would say it; false for any
// other error.
func describe(result *actionResult, op operation.Instance, err error) bool {
	var (
		invalid *validate.Error
		inUse   *idempotency.KeyInUseError
		expired *idempotency.KeyExpiredError
	)
	switch {
	case errors.Is(err, idempotency.ErrKeyReused):
		result.Status, result.Title, result.Detail = http.StatusUnprocessableEntity, "Key used for another request", err.Error()
		return true
	case errors.As(err, &inUse):
		result.Status, result.Title, result.Detail = http.StatusConflict, "Still in progress", err.Error()
		return true
	case errors.As(err, &expired):
		result.Status, result.Title, result.Detail = http.StatusConflict, "Answer expired", err.Error()
		return true
	}
	if errors.As(err, &invalid) {
		result.Status, result.Title = http.StatusBadRequest, "Invalid"
		var msgs []string
		for _, f := range invalid.Fields {
			msgs = append(msgs, f.Field+" "+f.Message)
		}
		result.Detail = strings.Join(msgs, "; ")
		return true
	}
	if p := op.Problem(err); p != nil {
		result.Status, result.Title, result.Detail = p.Status, p.Title, p.Detail
		return true
	}
	return false
}
