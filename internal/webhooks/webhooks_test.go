package webhooks

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
)

// InboxID is one name-based UUID (ids.NameBasedUUID) per Stripe event.
func TestInboxIDIsOnePerEvent(t *testing.T) {
	if a, b := InboxID("evt_1"), InboxID("evt_2"); a == b || a != InboxID("evt_1") {
		t.Errorf("InboxID not one per event: %s %s", a, b)
	}
}

// A charge's event names both the payment's key and its authentication's,
// in the modules' order: a payment that waited for its customer has its
// create key final, and only the authentication's key settles it.
func TestAChargeEventNamesThePaymentAndItsAuthentication(t *testing.T) {
	kinds := kindsOf([]operation.Module{payments.Module(payments.Hooks{}), payments.AuthenticationModule()})
	got, _, err := target(kinds, event(t, stripe.EventTypePaymentIntentSucceeded,
		`{"id":"pi_1","object":"payment_intent","metadata":{"payment_id":"pay_1"}}`))
	want := []idempotency.Resource{{Type: "payment", ID: "pay_1"}, {Type: payments.ResourceAuthentication, ID: "pay_1"}}
	if err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("target: %+v, %v; want %+v", got, err, want)
	}
}

func signed(t *testing.T, payload []byte, secret string, at time.Time) string {
	t.Helper()
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at}).Header
}

// A signature's age is measured on the service's clock, whatever the wall
// clock says; a signature from another secret, or of other bytes, is
// refused.
func TestConstructMeasuresAgeOnTheServiceClock(t *testing.T) {
	payload := []byte(`{"id":"evt_1","type":"customer.created","data":{"object":{"id":"cus_1","object":"customer"}}}`)
	for _, now := range []time.Time{time.Now(), time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)} {
		for _, c := range []struct {
			name string
			age  time.Duration
			ok   bool
		}{
			{"fresh", 0, true}, {"4m59s old", Tolerance - time.Second, true}, {"5m01s old", Tolerance + time.Second, false},
		} {
			_, err := construct(payload, signed(t, payload, "whsec_a", now.Add(-c.age)), "whsec_a", now)
			if (err == nil) != c.ok {
				t.Errorf("now %s, %s: %v", now.Format(time.DateOnly), c.name, err)
			}
			if !c.ok && !errors.Is(err, webhook.ErrTooOld) {
				t.Errorf("now %s, %s: %v, want ErrTooOld", now.Format(time.DateOnly), c.name, err)
			}
		}
	}
	// A signature from the future is refused as well, past the same
	// tolerance: stripe-go alone takes it.
	for _, now := range []time.Time{time.Now(), time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if _, err := construct(payload, signed(t, payload, "whsec_a", now.Add(Tolerance-time.Second)), "whsec_a", now); err != nil {
			t.Errorf("now %s, 4m59s ahead: %v", now.Format(time.DateOnly), err)
		}
		for _, ahead := range []time.Duration{Tolerance + time.Second, time.Hour, 365 * 24 * time.Hour} {
			if _, err := construct(payload, signed(t, payload, "whsec_a", now.Add(ahead)), "whsec_a", now); !errors.Is(err, errFromTheFuture) {
				t.Errorf("now %s, %s ahead: %v, want refused", now.Format(time.DateOnly), ahead, err)
			}
		}
	}
	now := time.Now()
	if _, err := construct(payload, signed(t, payload, "whsec_other", now), "whsec_a", now); !errors.Is(err, webhook.ErrNoValidSignature) {
		t.Errorf("another secret: %v", err)
	}
	tampered := append([]byte(nil), payload...)
	tampered[8] = '2'
	if _, err := construct(tampered, signed(t, payload, "whsec_a", now), "whsec_a", now); !errors.Is(err, webhook.ErrNoValidSignature) {
		t.Errorf("tampered body: %v", err)
	}
	if _, err := construct(payload, "", "whsec_a", now); !errors.Is(err, webhook.ErrNotSigned) {
		t.Errorf("no header: %v", err)
	}
	notAnEvent := []byte(`{"object":"customer"}`)
	if _, err := construct(notAnEvent, signed(t, notAnEvent, "whsec_a", now), "whsec_a", now); !errors.Is(err, errMalformed) {
		t.Errorf("signed, but not an event: %v", err)
	}
}

func event(t *testing.T, typ stripe.EventType, object string) stripe.Event {
	t.Helper()
	var e stripe.Event
	if err := json.Unmarshal([]byte(`{"id":"evt_1","type":"`+string(typ)+`","data":{"object":`+object+`}}`), &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// An event names our resource by the metadata our Stripe adapter writes:
// the id, else the provider key derived from it.
func TestTargetReadsOurMetadata(t *testing.T) {
	kinds := kindsOf([]operation.Module{payments.Module(payments.Hooks{}), refunds.Module()})
	for _, c := range []struct {
		name    string
		typ     stripe.EventType
		object  string
		want    *idempotency.Resource
		wantErr bool
	}{
		{"payment id", stripe.EventTypePaymentIntentSucceeded,
			`{"id":"pi_1","object":"payment_intent","metadata":{"payment_id":"pay_1","idempotency_key":"paymentsapi:pay_1"}}`,
			&idempotency.Resource{Type: "payment", ID: "pay_1"}, false},
		{"payment key only", stripe.EventTypePaymentIntentPaymentFailed,
			`{"id":"pi_1","object":"payment_intent","metadata":{"idempotency_key":"paymentsapi:pay_2"}}`,
			&idempotency.Resource{Type: "payment", ID: "pay_2"}, false},
		{"refund id", stripe.EventTypeChargeRefundUpdated,
			`{"id":"re_s1","object":"refund","metadata":{"refund_id":"re_1"}}`,
			&idempotency.Resource{Type: "refund", ID: "re_1"}, false},
		{"refund key only", stripe.EventTypeRefundUpdated,
			`{"id":"re_s1","object":"refund","metadata":{"idempotency_key":"paymentsapi:re_2"}}`,
			&idempotency.Resource{Type: "refund", ID: "re_2"}, false},
		{"not ours", stripe.EventTypePaymentIntentSucceeded,
			`{"id":"pi_1","object":"payment_intent","metadata":{"idempotency_key":"someone-else:42"}}`, nil, false},
		{"other type", "customer.created", `{"id":"cus_1","object":"customer","metadata":{"payment_id":"pay_1"}}`, nil, false},
		{"wrong object", stripe.EventTypePaymentIntentSucceeded, `{"id":"ch_1","object":"charge","metadata":{"payment_id":"pay_1"}}`, nil, true},
		{"object without an id", stripe.EventTypeRefundCreated, `{"object":"refund","metadata":{"refund_id":"re_1"}}`, nil, true},
	} {
		all, _, err := target(kinds, event(t, c.typ, c.object))
		var got *idempotency.Resource
		if len(all) > 0 {
			got = &all[0]
		}
		if (err != nil) != c.wantErr || len(all) > 1 || (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("%s: %+v, %v; want %+v (error %v)", c.name, got, err, c.want, c.wantErr)
		}
	}
}
