package eventlog_test

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// Every answer of GET /events and GET /events/{id} is the one the spec
// documents and CONTRACT.md promises (servicetest.CheckSpec).
func TestEventLogAnswersConformToTheOpenAPISpec(t *testing.T) {
	t.Parallel()
	servicetest.CheckSpec(t,
		servicetest.SpecGroup{Name: "the event log", Run: func(t *testing.T, c *servicetest.Conformance) {
			c.E.Pay("pm_card_visa", "inv-ev")
			refunded := c.E.Pay("pm_card_visa", "inv-ev2")
			if r := c.E.RefundAs(servicetest.SecretA, refunded, "ev-r", `{"amount":"1.00"}`); r.Status != 201 {
				t.Fatalf("refund: %d %s", r.Status, r.Body)
			}
			rows, err := c.E.Pool.Query(t.Context(), `SELECT id::text, event_type, aggregate_type, aggregate_id, created_at, payload FROM outbox_events`)
			if err != nil {
				t.Fatal(err)
			}
			events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.Event, error) {
				var ev outbox.Event
				return ev, row.Scan(&ev.ID, &ev.Type, &ev.AggregateType, &ev.AggregateID, &ev.OccurredAt, &ev.Payload)
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.E.Core.EventLog.FanOut(t.Context(), events); err != nil { // as the relay does
				t.Fatal(err)
			}
			page := c.Check(servicetest.Exchange{Name: "200 events", Method: "GET", Path: "/events?limit=2", Header: servicetest.Bearer(servicetest.SecretA), Status: 200})
			var list struct {
				Items []struct {
					EventID string `json:"eventId"`
				} `json:"items"`
				NextCursor string `json:"nextCursor"`
			}
			if err := json.Unmarshal(page.Body, &list); err != nil || len(list.Items) != 2 || list.NextCursor == "" {
				t.Fatalf("a page of events: %s", page.Body)
			}
			c.Check(servicetest.Exchange{Name: "200 events, next page", Method: "GET", Path: "/events?limit=2&cursor=" + list.NextCursor, Header: servicetest.Bearer(servicetest.SecretA), Status: 200})
			c.Check(servicetest.Exchange{Name: "200 events of a type", Method: "GET", Path: "/events?type=refund.succeeded", Header: servicetest.Bearer(servicetest.SecretA), Status: 200})
			c.Check(servicetest.Exchange{Name: "200 events of a payment, of two types, in a range", Method: "GET",
				Path:   "/events?paymentId=" + refunded + "&type=refund.succeeded,payment.succeeded&createdFrom=2026-01-01T00:00:00Z&createdTo=2099-01-01T00:00:00%2B01:00&after=2026-01-01T00:00:00Z",
				Header: servicetest.Bearer(servicetest.SecretA), Status: 200})
			c.Check(servicetest.Exchange{Name: "400 events, an unknown parameter", Method: "GET", Path: "/events?payment=" + refunded, Header: servicetest.Bearer(servicetest.SecretA),
				Status: 400, Code: "VALIDATION_FAILED"})
			c.Check(servicetest.Exchange{Name: "400 an event, any parameter", Method: "GET", Path: "/events/" + list.Items[0].EventID + "?expand=data",
				Header: servicetest.Bearer(servicetest.SecretA), Status: 400, Code: "VALIDATION_FAILED"})
			c.Check(servicetest.Exchange{Name: "200 an event", Method: "GET", Path: "/events/" + list.Items[0].EventID, Header: servicetest.Bearer(servicetest.SecretA), Status: 200})
			c.Check(servicetest.Exchange{Name: "404 another tenant's event", Method: "GET", Path: "/events/" + list.Items[0].EventID, Header: servicetest.Bearer(servicetest.SecretB),
				Status: 404, Code: "NOT_FOUND"})
			c.Check(servicetest.Exchange{Name: "400 events of an unknown type", Method: "GET", Path: "/events?type=payment.exploded", Header: servicetest.Bearer(servicetest.SecretA),
				Status: 400, Code: "VALIDATION_FAILED", SpecRejects: `parameter "type"`})
			c.Check(servicetest.Exchange{Name: "400 events, a cursor not issued", Method: "GET", Path: "/events?cursor=nope", Header: servicetest.Bearer(servicetest.SecretA),
				Status: 400, Code: "VALIDATION_FAILED"})
			c.Check(servicetest.Exchange{Name: "401 events", Method: "GET", Path: "/events", Status: 401, Code: "UNAUTHORIZED",
				SpecRejects: "security requirements failed"})
		}},
	)
}
