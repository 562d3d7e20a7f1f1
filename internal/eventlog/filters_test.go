package eventlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/payments"
)

// logged is one event as the listing shows it, with the payment its data
// names.
type logged struct {
	id, typ, payment string
	at               time.Time
}

// allEvents pages through GET /events?query, following nextCursor with
// limit, and returns what the pages held, in their order.
func (e *env) allEvents(secret, query string, limit int) []logged {
	e.t.Helper()
	var all []logged
	cursor := ""
	for pages := 0; ; pages++ {
		q := fmt.Sprintf("?limit=%d", limit)
		if query != "" {
			q += "&" + query
		}
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		p := e.events(secret, q)
		if p.NextCursor != "" && len(p.Items) != limit {
			e.t.Fatalf("a page of %d events (limit %d) with a nextCursor", len(p.Items), limit)
		}
		for _, it := range p.Items {
			var data struct{ PaymentID string }
			if err := json.Unmarshal(it.Data, &data); err != nil {
				e.t.Fatal(err)
			}
			all = append(all, logged{id: it.EventID, typ: it.Type, payment: data.PaymentID, at: it.CreatedAt})
		}
		if p.NextCursor == "" || pages > 500 {
			return all
		}
		cursor = p.NextCursor
	}
}

// Every filter of GET /events, alone and together, over the events of 150
// payments (succeeded, declined, some refunded): the pages, followed by
// their cursors, hold exactly the events of the unfiltered log that meet
// every filter, in its order. A payment's events are its own and its
// refunds'; the creation range is from included, to excluded; after, the
// older form of from, excludes its instant.
func TestEachEventFilterKeepsExactlyTheMatchingEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var paid, declined []string
	for i := range 150 {
		switch {
		case i%4 == 3:
			declined = append(declined, e.pay(secretA, fmt.Sprintf("p%d", i), "pm_card_chargeDeclined", ""))
		default:
			paid = append(paid, e.pay(secretA, fmt.Sprintf("p%d", i), "pm_card_visa", ""))
		}
		if i%5 == 0 && len(paid) > 0 {
			refund := fmt.Sprintf(`{"amount":"%d.00"}`, 1+i%3)
			if r := e.do(secretA, "POST", "/payments/"+paid[len(paid)-1]+"/refunds", fmt.Sprintf("r%d", i), refund); r.status != http.StatusCreated {
				t.Fatalf("refund: %d %s", r.status, r.body)
			}
		}
		if i%3 != 0 { // every third payment shares the instant of the one before
			e.clk.Advance(time.Second)
		}
	}
	other := e.pay(secretB, "b1", "pm_card_visa", "")

	all := e.allEvents(secretA, "", 100)
	if len(all) < 350 {
		t.Fatalf("only %d events", len(all))
	}
	refunded := paid[0] // refunded at i == 0
	t1, t2 := all[len(all)/3].at, all[len(all)/2].at
	at := func(t time.Time) string { return url.QueryEscape(t.Format(time.RFC3339Nano)) }
	for query, keep := range map[string]func(logged) bool{
		"type=payment.declined":                          func(l logged) bool { return l.typ == "payment.declined" },
		"type=refund.created,payment.succeeded":          func(l logged) bool { return l.typ == "refund.created" || l.typ == "payment.succeeded" },
		"paymentId=" + refunded:                          func(l logged) bool { return l.payment == refunded },
		"paymentId=" + declined[7]:                       func(l logged) bool { return l.payment == declined[7] },
		"createdFrom=" + at(t2):                          func(l logged) bool { return !l.at.Before(t2) },
		"createdTo=" + at(t1):                            func(l logged) bool { return l.at.Before(t1) },
		"createdFrom=" + at(t2) + "&createdTo=" + at(t1): func(l logged) bool { return !l.at.Before(t2) && l.at.Before(t1) },
		"after=" + at(t2):                                func(l logged) bool { return l.at.After(t2) },
		"after=" + at(t2) + "&createdTo=" + at(t1):       func(l logged) bool { return l.at.After(t2) && l.at.Before(t1) },
		"type=payment.created&createdFrom=" + at(t2):     func(l logged) bool { return l.typ == "payment.created" && !l.at.Before(t2) },
		"paymentId=" + refunded + "&type=refund.succeeded,refund.created": func(l logged) bool {
			return l.payment == refunded && strings.HasPrefix(l.typ, "refund.")
		},
	} {
		var want []logged
		for _, l := range all {
			if keep(l) {
				want = append(want, l)
			}
		}
		if len(want) == 0 || len(want) == len(all) {
			t.Fatalf("%s keeps %d of %d events: it tests nothing", query, len(want), len(all))
		}
		for _, limit := range []int{3, 100} {
			if got := e.allEvents(secretA, query, limit); !slices.Equal(got, want) {
				t.Errorf("%s, limit %d: %d events, want %d:\n got %v\nwant %v", query, limit, len(got), len(want), got, want)
			}
		}
	}
	if n := len(e.allEvents(secretA, "paymentId="+refunded, 100)); n != 4 {
		t.Errorf("a refunded payment's events: %d, want its 2 and its refund's 2", n)
	}
	for _, id := range []string{other, "pay_unknown"} {
		if got := e.allEvents(secretA, "paymentId="+id, 100); len(got) != 0 {
			t.Errorf("events of %s, which tenant A does not have: %v", id, got)
		}
	}

	// A cursor is a position: with other filters, the events that meet
	// them after it.
	first := e.events(secretA, "?type=payment.succeeded&limit=5")
	last := first.Items[len(first.Items)-1]
	var want []logged
	for _, l := range all {
		if l.typ == "payment.declined" && (l.at.Before(last.CreatedAt) || l.at.Equal(last.CreatedAt) && l.id < last.EventID) {
			want = append(want, l)
		}
	}
	if got := e.allEvents(secretA, "type=payment.declined&cursor="+url.QueryEscape(first.NextCursor), 100); len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("declined events after a succeeded one's position:\n got %v\nwant %v", got, want)
	}
}

// The listing reads a payment's events back only as far as the payment's
// creation, less the skew of the clocks of the instances that stamp
// events: an event of the payment stamped a little before its creation
// (by another instance's clock) is still found.
func TestAPaymentsEventStampedByASlowClockIsFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.clk.Advance(time.Hour)
	id := e.pay(secretA, "p1", "pm_card_visa", "")
	created := e.clk.Now()
	payload, err := json.Marshal(map[string]string{"tenantId": "tenant_a", "paymentId": id})
	if err != nil {
		t.Fatal(err)
	}
	early, err := outbox.NewEvent(context.Background(), payments.EventSucceeded, payments.ResourceType, id, json.RawMessage(payload), created.Add(-30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Write(context.Background(), e.pool, early); err != nil {
		t.Fatal(err)
	}
	got := e.allEvents(secretA, "paymentId="+id, 100)
	if len(got) != 3 || !slices.ContainsFunc(got, func(l logged) bool { return l.id == early.ID }) {
		t.Errorf("the payment's events: %v; want its two and the one stamped 30 s before its creation", got)
	}
}
