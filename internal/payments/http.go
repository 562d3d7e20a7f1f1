package payments

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/query"
)

// This file is the payments' HTTP surface: routes, the answers a payment's
// key stores, and the problems of the payments' own errors.

// The problem codes of payments.
const (
	CodeDeclined           problem.Code = "PAYMENT_DECLINED"
	CodeCanceled           problem.Code = "PAYMENT_CANCELED"
	CodeDuplicateReference problem.Code = "DUPLICATE_MERCHANT_REFERENCE"
)

// Routes adds POST /payments, GET /payments and GET /payments/{paymentId}.
func (s *Service) Routes(r chi.Router, api operation.HTTP) {
	r.Post("/payments", func(w http.ResponseWriter, r *http.Request) {
		var req CreateRequest
		key, ok := api.Command(w, r, &req)
		if !ok {
			return
		}
		cmd, err := req.Validate()
		if err != nil {
			api.Error(w, r, err)
			return
		}
		reply, err := s.Create(r.Context(), api.Tenant(r), key, cmd, api.Wait(r))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		logging.Add(r.Context(), "payment_id", reply.Resource.ID)
		api.Reply(w, r, reply)
	})
	r.Method(http.MethodGet, "/payments", query.Declare(s.list(api),
		"accountId", "merchantReference", "status", "createdFrom", "createdTo", "currency", "amountMin", "amountMax",
		"limit", "cursor"))
	r.Get("/payments/{paymentId}", func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "paymentId")
		logging.Add(r.Context(), "payment_id", id)
		p, err := s.Get(r.Context(), api.Tenant(r), id)
		if err != nil {
			api.Error(w, r, err)
			return
		}
		api.JSON(w, http.StatusOK, p.View())
	})
}

// list handles GET /payments.
func (s *Service) list(api operation.HTTP) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		lq, err := readListQuery(query.Read(r))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		page, err := s.List(r.Context(), api.Tenant(r), lq)
		if err != nil {
			api.Error(w, r, err)
			return
		}
		resp := struct {
			Items      []View `json:"items"`
			NextCursor string `json:"nextCursor,omitempty"`
		}{Items: make([]View, 0, len(page.Items)), NextCursor: page.NextCursor}
		for _, p := range page.Items {
			resp.Items = append(resp.Items, p.View())
		}
		api.JSON(w, http.StatusOK, resp)
	}
}

// readListQuery reads the filters and the page of GET /payments: an
// account and a reference under the rules of a payment's own (the
// reference normalised as it is stored), statuses as a comma-separated
// list, and a creation range, from included, to excluded.
func readListQuery(q *query.Reader) (ListQuery, error) {
	lq := ListQuery{
		AccountID: q.Text("accountId"), MerchantReference: normalReference(q.Text("merchantReference")),
		Limit: q.Limit(), Cursor: q.Cursor(),
	}
	for _, id := range []struct{ name, v string }{{"accountId", lq.AccountID}, {"merchantReference", lq.MerchantReference}} {
		if msg := idProblem(id.v); id.v != "" && msg != "" {
			q.Add(id.name, msg)
		}
	}
	for _, st := range q.List("status", statusNames()) {
		lq.Statuses = append(lq.Statuses, Status(st))
	}
	lq.CreatedFrom, lq.CreatedTo = q.Range("createdFrom", "createdTo")
	lq.Currency, lq.AmountMin, lq.AmountMax = readAmountRange(q)
	return lq, q.Err()
}

// readAmountRange reads currency and the amount range amountMin..amountMax
// of a listing (ParseAmountRange).
func readAmountRange(q *query.Reader) (string, int64, int64) {
	r, field, msg := ParseAmountRange(q.Text("currency"), q.Text("amountMin"), q.Text("amountMax"))
	if msg != "" {
		q.Add(field, msg)
	}
	return r.Currency, r.Min, r.Max
}

// AmountRange is a listing's currency and amount range, in minor units of
// that currency, both ends included; zero where absent.
type AmountRange struct {
	Currency string
	Min, Max int64
}

// ParseAmountRange reads a listing's currency and amount range as a client
// types them: amounts written as a payment's amount is ("10.00"), which
// need their currency, since 10.00 EUR and 10 JPY are different amounts.
// It names the field it refuses and says why ("" when it refuses none).
func ParseAmountRange(currency, lowest, highest string) (r AmountRange, field, msg string) {
	if currency != "" {
		c, err := money.NormalizeCurrency(currency)
		if err != nil {
			return AmountRange{}, "currency", "must be a supported ISO 4217 currency code, such as EUR"
		}
		r.Currency = c
	}
	for _, a := range []struct {
		name, typed string
		set         *int64
	}{{"amountMin", lowest, &r.Min}, {"amountMax", highest, &r.Max}} {
		if a.typed == "" {
			continue
		}
		if r.Currency == "" {
			return AmountRange{}, a.name, "needs currency: an amount means nothing without its currency"
		}
		minor, err := money.Parse(a.typed, r.Currency)
		if err != nil {
			return AmountRange{}, a.name, "must be an amount in " + r.Currency + " written as a payment's is, such as \"" + money.Format(1000, r.Currency) + "\""
		}
		*a.set = minor
	}
	if r.Min > 0 && r.Max > 0 && r.Max < r.Min {
		return AmountRange{}, "amountMax", "must not be below amountMin: the range is from amountMin to amountMax, both included"
	}
	return r, "", ""
}

// statusNames are the statuses a client may filter by.
func statusNames() []string {
	var names []string
	for _, s := range Statuses() {
		names = append(names, string(s))
	}
	return names
}

// Render answers a payment: 201 with the payment when it succeeded (or, for
// a manual capture, was authorized, or waits for its customer to
// authenticate: REQUIRES_ACTION with its nextAction), 402
// with a PAYMENT_DECLINED problem when declined, 409 PAYMENT_CANCELED when
// canceled, else 202 with the payment and Retry-After (the outcome is not
// known yet).
func (s *Service) Render(res idempotency.Result) (idempotency.Response, error) {
	p, ok := res.(Payment)
	if !ok {
		return idempotency.Response{}, fmt.Errorf("payments: cannot render a %T", res)
	}
	switch p.State.Status() {
	case StatusSucceeded, StatusRequiresCapture, StatusRequiresAction:
		return httpapi.ResourceResponse(http.StatusCreated, p.View(), Location(p.ID), 0), nil
	case StatusDeclined:
		prob := problem.Titled(http.StatusPaymentRequired, CodeDeclined, "Payment declined", "The payment provider declined the payment.")
		return httpapi.ProblemResponse(prob.Set("paymentId", p.ID).Set("declineCode", p.DeclineCode)), nil
	case StatusCanceled:
		prob := problem.Titled(http.StatusConflict, CodeCanceled, "Payment canceled",
			"This payment was canceled: no money moved (it was canceled, or nobody retried it within the replay window). Pay with a new Idempotency-Key.")
		return httpapi.ProblemResponse(prob.Set("paymentId", p.ID)), nil
	default:
		return httpapi.ResourceResponse(http.StatusAccepted, p.View(), Location(p.ID), s.d.Engine.RetryAfter()), nil
	}
}

// Location is the URL path of payment id.
func Location(id string) string { return "/payments/" + id }

// Problem is the problem of one of the payments' own errors, else nil.
func (s *Service) Problem(err error) *problem.Problem {
	var dup *DuplicateReferenceError
	switch {
	case errors.As(err, &dup):
		return problem.Titled(http.StatusConflict, CodeDuplicateReference, "Duplicate merchant reference", err.Error()).
			Set("paymentId", dup.PaymentID)
	case errors.Is(err, ErrNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such payment.")
	case errors.Is(err, ErrInvalidCursor):
		p := problem.New(http.StatusBadRequest, problem.ValidationFailed, "One or more parameters are invalid.")
		p.Errors = []problem.FieldError{{Field: "cursor", Message: "is not a cursor from this API"}}
		return p
	case errors.Is(err, ErrReferenceContended):
		return problem.New(http.StatusServiceUnavailable, problem.ServiceUnavailable, err.Error()).WithRetryAfter()
	}
	return nil
}

var _ operation.Instance = (*Service)(nil)
