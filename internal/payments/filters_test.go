package payments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/query"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// seeded is one payment of seedPayments, as the test expects to find it.
type seeded struct {
	id, tenant, account, reference, currency string
	amount                                   int64
	state                                    State
	created                                  time.Time
}

// seedPayments writes n payments of two tenants and three accounts in
// every state, moved there by the state machine's own moves in plain SQL
// (the triggers keep holds_reference). Creation times are a permutation of
// i, two payments a second, so that time and state are not correlated and
// equal times are ordered by id. References repeat (inv-0 to inv-39):
// within one tenant and account, only the first payment of a reference
// that holds it does, the others are created DECLINED or CANCELED.
// The first payment's reference is "café" composed (NFC).
func seedPayments(t *testing.T, db *pgxpool.Pool, n int) []seeded {
	t.Helper()
	ctx := context.Background()
	states := States()
	held := map[string]bool{}
	var all []seeded
	for i := range n {
		p := seeded{
			id:        fmt.Sprintf("pay_%026d", i),
			tenant:    fmt.Sprintf("tenant_%d", i%2),
			account:   fmt.Sprintf("acc_%d", i%3),
			reference: fmt.Sprintf("inv-%d", i%40),
			currency:  []string{"EUR", "EUR", "EUR", "JPY"}[(i/2)%4],
			amount:    int64(100 + (i*37)%1000),
			state:     states[(i*7)%len(states)],
			created:   t0.Add(time.Duration((i*7919)%n/2) * time.Second),
		}
		if i == 0 {
			p.reference = "caf\u00e9"
		}
		key := p.tenant + "|" + p.account + "|" + p.reference
		if p.state.HoldsReference() && held[key] {
			p.state = []State{StateDeclined, StateCanceled}[i%2]
		}
		held[key] = held[key] || p.state.HoldsReference()
		all = append(all, p)
	}
	// A payment is created holding its reference: those that end freeing
	// it are written first, each moved on before the next is inserted.
	b := &pgx.Batch{}
	for _, holding := range []bool{false, true} {
		for _, p := range all {
			if p.state.HoldsReference() != holding {
				continue
			}
			capture := CaptureAutomatic
			if slices.Contains(machine.PathTo(p.state), StateAuthorized) && p.state != StateCompleted {
				capture = CaptureManual
			}
			b.Queue(`INSERT INTO payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
			    payment_method, channel, state, created_at, updated_at, capture_method)
			    VALUES ($1, $2, $3, $8, $9, $4, 'pm_card_visa', 'web', $5, $6, $6, $7)`,
				p.id, p.tenant, p.account, p.reference, string(StateReceived), p.created, capture, p.amount, p.currency)
			for _, step := range machine.PathTo(p.state) {
				b.Queue(`UPDATE payments SET state = $2 WHERE id = $1`, p.id, string(step))
			}
		}
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	return all
}

// expected is what a listing of lq returns over all, every page of it:
// the tenant's payments that meet its filters, newest first.
func expected(all []seeded, tenant string, lq ListQuery) []string {
	var match []seeded
	for _, p := range all {
		if p.tenant == tenant &&
			(lq.AccountID == "" || p.account == lq.AccountID) &&
			(lq.MerchantReference == "" || p.reference == lq.MerchantReference) &&
			(lq.Statuses == nil || slices.Contains(lq.Statuses, p.state.Status())) &&
			(lq.CreatedFrom.IsZero() || !p.created.Before(lq.CreatedFrom)) &&
			(lq.CreatedTo.IsZero() || p.created.Before(lq.CreatedTo)) &&
			(lq.Currency == "" || p.currency == lq.Currency) &&
			(lq.AmountMin == 0 || p.amount >= lq.AmountMin) &&
			(lq.AmountMax == 0 || p.amount <= lq.AmountMax) {
			match = append(match, p)
		}
	}
	slices.SortFunc(match, func(a, b seeded) int {
		return cmp.Or(b.created.Compare(a.created), strings.Compare(b.id, a.id))
	})
	ids := make([]string, len(match))
	for i, p := range match {
		ids[i] = p.id
	}
	return ids
}

// listAll pages through lq, following each NextCursor, and returns the
// ids in the order the pages gave them.
func listAll(t *testing.T, db *pgxpool.Pool, tenant string, lq ListQuery) []string {
	t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		page, err := listPayments(context.Background(), db, tenant, lq)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) > lq.Limit || (page.NextCursor != "" && len(page.Items) != lq.Limit) {
			t.Fatalf("a page of %d items (limit %d) with nextCursor %q", len(page.Items), lq.Limit, page.NextCursor)
		}
		for _, p := range page.Items {
			ids = append(ids, p.ID)
		}
		if page.NextCursor == "" {
			return ids
		}
		if pages > 400 {
			t.Fatal("the pages do not end")
		}
		lq.Cursor = page.NextCursor
	}
}

// Every filter of GET /payments, alone and together, over 400 payments in
// every state: the pages, followed by their cursors, hold exactly the
// payments that meet every filter, newest first, each once.
func TestEachFilterKeepsExactlyTheMatchingPayments(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	all := seedPayments(t, db, 400)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	cases := map[string]ListQuery{
		"no filter":               {},
		"account":                 {AccountID: "acc_1"},
		"reference":               {MerchantReference: "inv-8"},
		"reference, NFC":          {MerchantReference: "caf\u00e9"},
		"reference and account":   {MerchantReference: "inv-14", AccountID: "acc_2"},
		"status freeing":          {Statuses: []Status{StatusDeclined}},
		"statuses freeing":        {Statuses: []Status{StatusCanceled, StatusDeclined}},
		"status holding":          {Statuses: []Status{StatusSucceeded}},
		"status of many states":   {Statuses: []Status{StatusProcessing}},
		"statuses mixed":          {Statuses: []Status{StatusFailed, StatusCanceled, StatusRequiresCapture}},
		"from":                    {CreatedFrom: at(150)},
		"to":                      {CreatedTo: at(37)},
		"from and to":             {CreatedFrom: at(20), CreatedTo: at(81)},
		"account and status":      {AccountID: "acc_0", Statuses: []Status{StatusSucceeded, StatusDeclined}},
		"reference and status":    {MerchantReference: "inv-4", Statuses: []Status{StatusDeclined}},
		"reference, mixed status": {MerchantReference: "inv-10", Statuses: []Status{StatusSucceeded, StatusCanceled}},
		"status and range":        {Statuses: []Status{StatusCanceled}, CreatedFrom: at(10), CreatedTo: at(190)},
		"all of them":             {AccountID: "acc_2", MerchantReference: "inv-26", Statuses: []Status{StatusDeclined, StatusCanceled}, CreatedFrom: at(1), CreatedTo: at(200)},
		"currency":                {Currency: "JPY"},
		"amount range":            {Currency: "EUR", AmountMin: 300, AmountMax: 650},
		"amount at least":         {Currency: "EUR", AmountMin: 900},
		"amount at most, status":  {Currency: "JPY", AmountMax: 400, Statuses: []Status{StatusSucceeded, StatusDeclined}},
		"nothing matches":         {AccountID: "acc_9"},
	}
	for name, lq := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want := expected(all, "tenant_0", lq)
			if len(want) == 0 && name != "nothing matches" {
				t.Fatalf("the seed has no payment for this case: it tests nothing")
			}
			for _, limit := range []int{3, 100} {
				lq.Limit = limit
				if got := listAll(t, db, "tenant_0", lq); !slices.Equal(got, want) {
					t.Errorf("limit %d: got %d payments, want %d:\n got %v\nwant %v", limit, len(got), len(want), got, want)
				}
			}
		})
	}
}

// A cursor is a position in the listing's order, not a copy of the filters
// it was made under: given with other filters, the page holds the
// payments that meet them and come after that position, as a client that
// narrows a search while paging expects; never a payment that does not
// meet them.
func TestACursorWithOtherFiltersKeepsItsPosition(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	all := seedPayments(t, db, 300)
	first, err := listPayments(context.Background(), db, "tenant_0", ListQuery{Statuses: []Status{StatusSucceeded}, Limit: 5})
	if err != nil || first.NextCursor == "" {
		t.Fatalf("first page: %v %+v", err, first)
	}
	last := first.Items[len(first.Items)-1]
	other := ListQuery{Statuses: []Status{StatusDeclined, StatusCanceled}, Limit: 1000, Cursor: first.NextCursor}
	var want []string
	for _, id := range expected(all, "tenant_0", ListQuery{Statuses: other.Statuses}) {
		i := slices.IndexFunc(all, func(p seeded) bool { return p.id == id })
		if all[i].created.Before(last.CreatedAt) || (all[i].created.Equal(last.CreatedAt) && id < last.ID) {
			want = append(want, id)
		}
	}
	if got := listAll(t, db, "tenant_0", other); len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("after the position of %s, declined or canceled:\n got %v\nwant %v", last.ID, got, want)
	}
}

// The query of GET /payments is read with every fault named at once:
// statuses from the list of the API's (which an unknown one is told), a
// range whose end comes after its start, an account and a reference under
// a payment's rules, a filter given empty refused rather than ignored,
// card data refused as in a body.
func TestTheListingsQueryIsReadWithEveryFaultNamed(t *testing.T) {
	t.Parallel()
	read := func(raw string) (ListQuery, error) {
		return readListQuery(query.Read(httptest.NewRequest("GET", "/payments?"+raw, nil)))
	}
	lq, err := read("status=DECLINED,SUCCEEDED,DECLINED&createdFrom=2026-01-01T00:00:00Z&createdTo=2026-01-02T00:00:00%2B01:00" +
		"&merchantReference=" + url.QueryEscape("cafe\u0301") + "&accountId=acc_1&limit=7&cursor=abc")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lq.Statuses, []Status{StatusDeclined, StatusSucceeded}) || lq.MerchantReference != "caf\u00e9" || lq.AccountID != "acc_1" ||
		lq.Limit != 7 || lq.Cursor != "abc" || !lq.CreatedFrom.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) ||
		!lq.CreatedTo.Equal(time.Date(2026, 1, 1, 23, 0, 0, 0, time.UTC)) {
		t.Errorf("read %+v", lq)
	}
	if lq, err := read(""); err != nil || lq.Limit != query.DefaultLimit || lq.Statuses != nil {
		t.Errorf("no parameters: %+v %v", lq, err)
	}

	_, err = read("status=FAILED,EXPLODED&createdFrom=2026-01-02T00:00:00Z&createdTo=2026-01-01T00:00:00Z&accountId=" +
		strings.Repeat("a", 129) + "&merchantReference=&limit=0")
	var invalid *validate.Error
	if !errors.As(err, &invalid) {
		t.Fatalf("want a *validate.Error, got %v", err)
	}
	fields := map[string]string{}
	for _, f := range invalid.Fields {
		fields[f.Field] = f.Message
	}
	for _, name := range []string{"status", "createdTo", "accountId", "merchantReference", "limit"} {
		if fields[name] == "" {
			t.Errorf("%s is not named: %v", name, invalid.Fields)
		}
	}
	for _, st := range Statuses() {
		if !strings.Contains(fields["status"], string(st)) {
			t.Errorf("the status message does not list %s: %q", st, fields["status"])
		}
	}
	if len(invalid.Fields) != 5 {
		t.Errorf("fields named: %v", invalid.Fields)
	}

	_, err = read("merchantReference=4242424242424242")
	var cardData *validate.CardDataError
	if !errors.As(err, &cardData) || cardData.Fields[0].Field != "merchantReference" {
		t.Errorf("a card number as a reference: %v", err)
	}
}

// Statuses are the client's view of the states, one map (State.Status)
// read both ways: every state is under exactly its status, and the
// statuses are those the contract names.
func TestStatusesAreTheStatesSeenByClients(t *testing.T) {
	t.Parallel()
	want := []Status{StatusProcessing, StatusRequiresCapture, StatusRequiresAction, StatusSucceeded, StatusDeclined, StatusFailed, StatusCanceled}
	if got := Statuses(); !sameSet(got, want) {
		t.Errorf("Statuses() = %v, want %v in any order", got, want)
	}
	seen := map[State]bool{}
	for _, st := range Statuses() {
		for _, s := range st.States() {
			if s.Status() != st || seen[s] {
				t.Errorf("%s listed under %s", s, st)
			}
			seen[s] = true
		}
	}
	if len(seen) != len(States()) {
		t.Errorf("%d states under the statuses, %d states", len(seen), len(States()))
	}
}

func sameSet[T cmp.Ordered](a, b []T) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}
