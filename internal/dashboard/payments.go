package dashboard

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/eventlog"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// pageSize is how many payments a page of the list shows.
const pageSize = 20

// filter is the Payments page's filter form, as typed.
type filter struct {
	Status            string
	CreatedFrom       string // a date, 2026-11-22
	CreatedTo         string
	MerchantReference string
	AccountID         string
	PaymentID         string
	Currency          string
	AmountMin         string // as a payment's amount is written, 10.00
	AmountMax         string
	Cursor            string
}

func filterOf(r *http.Request) filter {
	q := r.URL.Query()
	return filter{Status: q.Get("status"), CreatedFrom: q.Get("createdFrom"), CreatedTo: q.Get("createdTo"),
		MerchantReference: q.Get("merchantReference"), AccountID: q.Get("accountId"), PaymentID: q.Get("paymentId"),
		Currency: q.Get("currency"), AmountMin: q.Get("amountMin"), AmountMax: q.Get("amountMax"),
		Cursor: q.Get("cursor")}
}

// listQuery is where the filter form meets the service's query, the one
// the API's GET /payments sends. The dates are whole days: from the start
// of the first to the end of the last, in UTC. (A payment id is a lookup:
// the page goes straight to the payment.) It says which field it cannot
// read.
func (f filter) listQuery() (payments.ListQuery, string) {
	lq := payments.ListQuery{AccountID: f.AccountID, MerchantReference: f.MerchantReference, Cursor: f.Cursor, Limit: pageSize}
	if f.Status != "" {
		st := payments.Status(f.Status)
		if !slices.Contains(payments.Statuses(), st) {
			return lq, "The status must be one of the list's."
		}
		lq.Statuses = []payments.Status{st}
	}
	for _, d := range []struct {
		typed string
		set   *time.Time
		after time.Duration
		name  string
	}{{f.CreatedFrom, &lq.CreatedFrom, 0, "from"}, {f.CreatedTo, &lq.CreatedTo, 24 * time.Hour, "to"}} {
		if d.typed == "" {
			continue
		}
		day, err := time.Parse(time.DateOnly, d.typed)
		if err != nil {
			return lq, "The date " + d.name + " must be a date such as 2026-11-22."
		}
		*d.set = day.Add(d.after)
	}
	if !lq.CreatedFrom.IsZero() && !lq.CreatedTo.IsZero() && !lq.CreatedTo.After(lq.CreatedFrom) {
		return lq, "The date to must not come before the date from."
	}
	amounts, field, msg := payments.ParseAmountRange(f.Currency, f.AmountMin, f.AmountMax)
	if msg != "" {
		return lq, "The " + amountLabel(field) + " " + msg + "."
	}
	lq.Currency, lq.AmountMin, lq.AmountMax = amounts.Currency, amounts.Min, amounts.Max
	return lq, ""
}

// amountLabel names a field of the amount range as the form labels it.
func amountLabel(field string) string {
	switch field {
	case "amountMin":
		return "lowest amount"
	case "amountMax":
		return "highest amount"
	}
	return field
}

// query is f as the page's URL query, without its cursor.
func (f filter) query() url.Values {
	q := url.Values{}
	for name, v := range map[string]string{"status": f.Status, "createdFrom": f.CreatedFrom, "createdTo": f.CreatedTo,
		"merchantReference": f.MerchantReference, "accountId": f.AccountID,
		"currency": f.Currency, "amountMin": f.AmountMin, "amountMax": f.AmountMax} {
		if v != "" {
			q.Set(name, v)
		}
	}
	return q
}

// listView is the Payments page's.
type listView struct {
	Filter   filter
	Statuses []payments.Status
	Items    []payments.View
	// Next is the query of the next page; "" on the last.
	Next    string
	First   string // the query of the first page, when this is a later one
	Invalid string // why the filter could not be applied
	Tenants []tenantRow
}

func (s *server) paymentList(w http.ResponseWriter, r *http.Request) {
	f := filterOf(r)
	lv := listView{Filter: f, Statuses: []payments.Status{payments.StatusProcessing, payments.StatusSucceeded,
		payments.StatusDeclined, payments.StatusFailed, payments.StatusCanceled, payments.StatusRequiresCapture}}
	tenant := tenantOf(r)
	v := newView(r, "Payments", "/payments", &lv)
	if tenant == "" { // an operator who chose no tenant yet
		tenants, err := s.tenants(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		lv.Tenants = tenants
		s.render(w, r, http.StatusOK, "payments.html", v)
		return
	}
	if f.PaymentID != "" {
		target := basePath + "/payments/" + url.PathEscape(f.PaymentID)
		if v.TQ != "" {
			target += "?" + v.TQ
		}
		http.Redirect(w, r, target, http.StatusSeeOther)
		return
	}
	if f.AccountID != "" && !validate.StorableText(f.AccountID) {
		lv.Invalid = "The account must be text without NUL characters."
		s.render(w, r, http.StatusBadRequest, "payments.html", v)
		return
	}
	lq, invalid := f.listQuery()
	if invalid != "" {
		lv.Invalid = invalid
		s.render(w, r, http.StatusBadRequest, "payments.html", v)
		return
	}
	page, err := s.Payments.List(r.Context(), tenant, lq)
	if errors.Is(err, payments.ErrInvalidCursor) {
		lv.Invalid = "That page link is not one of this list's: start again from the first page."
		s.render(w, r, http.StatusBadRequest, "payments.html", v)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, p := range page.Items {
		lv.Items = append(lv.Items, p.View())
	}
	q := f.query()
	if v.Tenant != "" && v.Operator {
		q.Set("tenant", v.Tenant)
	}
	if page.NextCursor != "" {
		next := url.Values{}
		for k, vs := range q {
			next[k] = vs
		}
		next.Set("cursor", page.NextCursor)
		lv.Next = next.Encode()
	}
	if f.Cursor != "" {
		lv.First = q.Encode()
	} else {
		// Only the first page takes new payments as they come.
		live := url.Values{"topic": {"payments"}}
		if v.Operator {
			live.Set("tenant", tenant)
		}
		if f.AccountID != "" {
			live.Set("accountId", f.AccountID)
		}
		v.Live = live.Encode()
	}
	s.render(w, r, http.StatusOK, "payments.html", v)
}

// paymentView is a payment's page.
type paymentView struct {
	P           payments.View
	State       payments.State
	FirstSentAt *time.Time
	LastSentAt  *time.Time
	Timeline    []payments.Transition
	Refunds     []refunds.View
	Events      []eventView
	// What may be done now, each an idempotent request under Key.
	CanCapture, CanCancel, CanRefund bool
	Refundable                       string
	Key                              string
	Result                           *actionResult
}

// eventView is one of the payment's events, with its webhook deliveries.
type eventView struct {
	eventlog.Entry
	Attempts []delivery.Attempt
}

// maxEvents bounds the events a payment's page shows.
const maxEvents = 50

func (s *server) paymentPage(w http.ResponseWriter, r *http.Request) {
	s.showPayment(w, r, http.StatusOK, nil)
}

// showPayment renders the payment's page, with the result of an action
// just taken, if any.
func (s *server) showPayment(w http.ResponseWriter, r *http.Request, status int, result *actionResult) {
	id, tenant := chi.URLParam(r, "paymentId"), tenantOf(r)
	if tenant == "" || !validate.StorableText(id) {
		s.problem(w, r, http.StatusNotFound, "No such payment.")
		return
	}
	ctx := r.Context()
	p, err := s.Payments.Get(ctx, tenant, id)
	if errors.Is(err, payments.ErrNotFound) {
		s.problem(w, r, http.StatusNotFound, "No such payment.")
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	pv := paymentView{P: p.View(), State: p.State, FirstSentAt: p.FirstSentAt, LastSentAt: p.LastSentAt, Result: result}
	if pv.Timeline, err = s.Payments.Transitions(ctx, tenant, id); err != nil {
		s.fail(w, r, err)
		return
	}
	list, err := s.Refunds.List(ctx, tenant, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var refunded int64
	for _, ref := range list {
		pv.Refunds = append(pv.Refunds, ref.View())
		if ref.State != refunds.StateDeclined {
			refunded += ref.AmountMinor
		}
	}
	if pv.Events, err = s.events(r, tenant, id); err != nil {
		s.fail(w, r, err)
		return
	}
	pv.CanCapture = p.State == payments.StateAuthorized
	pv.CanCancel = p.State == payments.StateAuthorized
	if refundable := p.Captured() - refunded; refundable > 0 {
		pv.CanRefund, pv.Refundable = true, money.Format(refundable, p.Command.Currency)
	}
	if pv.CanCapture || pv.CanCancel || pv.CanRefund {
		pv.Key = newKey()
	}
	v := newView(r, "Payment "+id, "/payments", &pv)
	live := url.Values{"topic": {"payment"}, "paymentId": {id}}
	if v.Operator {
		live.Set("tenant", tenant)
	}
	v.Live = live.Encode()
	s.render(w, r, status, "payment.html", v)
}

// events reads the events of payment id and of its refunds, oldest first,
// with their webhook deliveries: the listing GET /events?paymentId= reads
// (its newest maxEvents).
func (s *server) events(r *http.Request, tenant, id string) ([]eventView, error) {
	page, err := s.Events.List(r.Context(), tenant, eventlog.Query{
		About: []eventlog.SubjectID{{Member: payments.IDField, ID: id}}, Limit: maxEvents,
	})
	if err != nil {
		return nil, err
	}
	entries := page.Items
	slices.Reverse(entries)
	out := make([]eventView, 0, len(entries))
	for _, e := range entries {
		attempts, err := s.Deliveries.Attempts(r.Context(), tenant, e.ID)
		if err != nil && !errors.Is(err, delivery.ErrEventNotFound) {
			return nil, err
		}
		out = append(out, eventView{Entry: e, Attempts: attempts})
	}
	return out, nil
}

// newKey is a fresh idempotency key for a page's actions: sending a form
// again, from the same page, replays its first answer.
func newKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "dash_" + hex.EncodeToString(b[:])
}

// tenantRow is one tenant in the operators' list.
type tenantRow struct {
	Tenant     string
	ActiveKeys int
	LastUsedAt *time.Time
}

// tenants lists the tenants that hold API keys (package apikeys), for an
// operator to choose one.
func (s *server) tenants(r *http.Request) ([]tenantRow, error) {
	keys, err := apikeys.List(r.Context(), s.DB, "")
	if err != nil {
		return nil, err
	}
	var rows []tenantRow
	for _, k := range keys {
		if len(rows) == 0 || rows[len(rows)-1].Tenant != k.Tenant {
			rows = append(rows, tenantRow{Tenant: k.Tenant})
		}
		row := &rows[len(rows)-1]
		if k.RevokedAt == nil {
			row.ActiveKeys++
		}
		if k.LastUsedAt != nil && (row.LastUsedAt == nil || k.LastUsedAt.After(*row.LastUsedAt)) {
			row.LastUsedAt = k.LastUsedAt
		}
	}
	return rows, nil
}

func (s *server) tenantList(w http.ResponseWriter, r *http.Request) {
	rows, err := s.tenants(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "tenants.html", newView(r, "Tenants", "/tenants", rows))
}
