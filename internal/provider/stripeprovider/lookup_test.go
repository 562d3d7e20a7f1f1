package stripeprovider_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
)

// notBefore is the NotBefore of these tests' lookups, with a fraction of a
// second that Stripe's created[gte] cannot carry.
var notBefore = time.Unix(1700000000, 900_000_000)

// lookupOf is the lookup of key from notBefore.
func lookupOf(key string) provider.ChargeLookup {
	return provider.ChargeLookup{IdempotencyKey: key, NotBefore: notBefore}
}

// others returns n PaymentIntents of other keys, with ids prefix0, prefix1...
func others(prefix string, n int) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		id := prefix + strconv.Itoa(i)
		out[i] = intent(id, "succeeded", "paymentsapi:other_"+id)
	}
	return out
}

// pagedList answers GET /v1/payment_intents with pages, the first without
// starting_after and each next one after the last id of the one before, as
// Stripe pages; any other cursor is a 400. Every page but the last says it
// has more.
func pagedList(t *testing.T, pages ...[]map[string]any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		after := r.URL.Query().Get("starting_after")
		for i, page := range pages {
			if (i == 0 && after == "") || (i > 0 && after != "" && lastID(pages[i-1]) == after) {
				writeJSON(w, http.StatusOK, intentList(i < len(pages)-1, page...))
				return
			}
		}
		t.Errorf("listing with starting_after=%q: no such page", after)
		writeJSON(w, http.StatusBadRequest, stripeError("invalid_request_error", "resource_missing", "", "No such payment_intent: "+after))
	}
}

func lastID(page []map[string]any) string {
	if len(page) == 0 {
		return ""
	}
	return page[len(page)-1]["id"].(string)
}

// checkListWireFormat asserts that r is a listing of PaymentIntents created
// since notBefore (to the second), 100 a page, after the PaymentIntent
// after ("": the first page), and nothing else.
func checkListWireFormat(t *testing.T, r request, notBefore time.Time, after string) {
	t.Helper()
	if r.Method != http.MethodGet || r.Path != "/v1/payment_intents" {
		t.Errorf("request = %s %s, want GET /v1/payment_intents", r.Method, r.Path)
	}
	want := map[string]string{"created[gte]": strconv.FormatInt(notBefore.Unix(), 10), "limit": "100"}
	if after != "" {
		want["starting_after"] = after
	}
	for k, v := range want {
		if got := r.Query[k]; len(got) != 1 || got[0] != v {
			t.Errorf("query %s = %q, want %q", k, got, v)
		}
	}
	for k := range r.Query {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected query parameter %s = %q", k, r.Query[k])
		}
	}
}

func TestLookupLagIsZero(t *testing.T) {
	if lag := newFake(t).provider(t).LookupLag(); lag != 0 {
		t.Errorf("LookupLag = %v, want 0: Lookup and LookupRefund list, and listing is read-after-write", lag)
	}
}

func TestLookupFindsViaListAndWireFormat(t *testing.T) {
	f := newFake(t)
	f.List = answer(http.StatusOK, intentList(false,
		intent("pi_new", "succeeded", "paymentsapi:pay_2"),
		intent("pi_1", "succeeded", testKey),
		intent("pi_old", "succeeded", "paymentsapi:pay_0")))
	got, err := f.provider(t).Lookup(providertest.Context(t, 5*time.Second), lookupOf(testKey))
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	want := provider.Charge{ID: "pi_1", IdempotencyKey: testKey, Status: provider.StatusSucceeded, AmountMinor: 1000, Currency: "EUR", AmountCapturedMinor: 1000}
	if got != want {
		t.Errorf("Lookup = %+v, want %+v", got, want)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("requests = %+v, want one listing (no retrieve)", reqs)
	}
	checkListWireFormat(t, reqs[0], notBefore, "")
	if got := reqs[0].Query.Get("created[gte]"); got != "1700000000" {
		t.Errorf("created[gte] = %q, want NotBefore rounded down to the second, 1700000000", got)
	}
	if h := reqs[0].Header.Get("Authorization"); h != "Bearer sk_test_fake" {
		t.Errorf("Authorization = %q", h)
	}
}

func TestLookupDeclined(t *testing.T) {
	f := newFake(t)
	f.List = answer(http.StatusOK, intentList(false, withLastPaymentError(intent("pi_1", "requires_payment_method", testKey), "card_declined", "insufficient_funds")))
	got, err := f.provider(t).Lookup(providertest.Context(t, 5*time.Second), lookupOf(testKey))
	want := provider.Charge{ID: "pi_1", IdempotencyKey: testKey, Status: provider.StatusDeclined, DeclineCode: "insufficient_funds", AmountMinor: 1000, Currency: "EUR"}
	if err != nil || got != want {
		t.Errorf("Lookup = %+v, %v; want %+v", got, err, want)
	}
	f.List = answer(http.StatusOK, intentList(false, intent("pi_2", "canceled", testKey)))
	got, err = f.provider(t).Lookup(providertest.Context(t, 5*time.Second), lookupOf(testKey))
	if err != nil || got.ID != "pi_2" || got.Status != provider.StatusDeclined || got.DeclineCode != "canceled" {
		t.Errorf("Lookup of a canceled intent = %+v, %v; want declined", got, err)
	}
}

func TestLookupFindsOnTheSecondPage(t *testing.T) {
	f := newFake(t)
	f.List = pagedList(t, others("pi_a", 100), append(others("pi_b", 5), intent("pi_1", "succeeded", testKey)))
	got, err := f.provider(t).Lookup(providertest.Context(t, 5*time.Second), lookupOf(testKey))
	if err != nil || got.ID != "pi_1" || got.Status != provider.StatusSucceeded {
		t.Fatalf("Lookup = %+v, %v; want pi_1 succeeded", got, err)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want two pages", len(reqs))
	}
	checkListWireFormat(t, reqs[0], notBefore, "")
	checkListWireFormat(t, reqs[1], notBefore, "pi_a99")
}

// A listing finds the key only once it has read every page: one
// PaymentIntent with the key on the first page and another on the last is
// two, not one.
func TestLookupReadsEveryPageBeforeAnswering(t *testing.T) {
	f := newFake(t)
	f.List = pagedList(t,
		append(others("pi_a", 99), intent("pi_1", "succeeded", testKey)),
		others("pi_b", 100),
		[]map[string]any{intent("pi_2", "succeeded", testKey)})
	_, err := f.provider(t).Lookup(providertest.Context(t, 5*time.Second), lookupOf(testKey))
	providertest.WantOnly(t, "Lookup", err, provider.ErrAmbiguous)
	if !strings.Contains(err.Error(), "pi_1") || !strings.Contains(err.Error(), "pi_2") {
		t.Errorf("err = %v, want it to name both PaymentIntents", err)
	}
	if n := len(f.requests()); n != 3 {
		t.Errorf("%d requests, want three pages", n)
	}
}

func TestLookupNotFoundOnlyAfterACompleteListing(t *testing.T) {
	for name, pages := range map[string][][]map[string]any{
		"an empty listing":            {{}},
		"one page of other keys":      {others("pi_a", 3)},
		"three pages of other keys":   {others("pi_a", 100), others("pi_b", 100), others("pi_c", 7)},
		"a last page that lists none": {others("pi_a", 100), {}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.List = pagedList(t, pages...)
			_, err := f.provider(t).Lookup(providertest.Context(t, 5*time.Second), lookupOf(testKey))
			providertest.WantOnly(t, "Lookup", err, provider.ErrNotFound)
			reqs := f.requests()
			if len(reqs) != len(pages) {
				t.Fatalf("%d requests, want one per page (%d)", len(reqs), len(pages))
			}
			for i, r := range reqs {
				after := ""
				if i > 0 {
					after = lastID(pages[i-1])
				}
				checkListWireFormat(t, r, notBefore, after)
			}
		})
	}
}

// TestLookupThatCannotSayIsNeverNotFound: a listing that failed, was cut
// short or could not be read, on any page, says nothing about the pages it
// did not show.
func TestLookupThatCannotSayIsNeverNotFound(t *testing.T) {
	fullPage := others("pi_a", 100)
	// thenOnPage2 answers the first page with fullPage, saying there is
	// more, and the second with h.
	thenOnPage2 := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("starting_after") == "" {
				writeJSON(w, http.StatusOK, intentList(true, fullPage...))
				return
			}
			h(w, r)
		}
	}
	withoutID := intent("", "succeeded", "paymentsapi:other")
	delete(withoutID, "id")
	for name, tc := range map[string]struct {
		list     http.HandlerFunc
		want     error
		requests int // how many requests Lookup sends; 0: not checked
	}{
		"429": {
			list: answer(http.StatusTooManyRequests, stripeError("invalid_request_error", "rate_limit", "", "Too many requests")),
			want: provider.ErrUnavailable,
		},
		"500": {
			list: answer(http.StatusInternalServerError, stripeError("api_error", "", "", "boom")),
			want: provider.ErrUnknownOutcome,
		},
		"400": {
			list: answer(http.StatusBadRequest, stripeError("invalid_request_error", "", "", "Invalid timestamp")),
			want: nil,
		},
		"404 HTML from a wrong base URL": {
			list: answerRaw(http.StatusNotFound, "text/html", "<html>not found</html>"),
			want: nil,
		},
		"200 {}": {
			list: answerRaw(http.StatusOK, "application/json", `{}`),
			want: provider.ErrUnknownOutcome,
		},
		"200 a search_result, not a list": {
			list: answerRaw(http.StatusOK, "application/json", `{"object":"search_result","data":[],"has_more":false}`),
			want: provider.ErrUnknownOutcome,
		},
		"200 a list without data": {
			list: answerRaw(http.StatusOK, "application/json", `{"object":"list","has_more":false}`),
			want: provider.ErrUnknownOutcome,
		},
		"200 not JSON": {
			list: answerRaw(http.StatusOK, "text/html", "<html>ok</html>"),
			want: provider.ErrUnknownOutcome,
		},
		"200 truncated JSON": {
			list: answerRaw(http.StatusOK, "application/json", `{"object":"list","data":[{"id":"pi_a0",`),
			want: provider.ErrUnknownOutcome,
		},
		"has_more with no entries, so no cursor": {
			list:     answer(http.StatusOK, intentList(true)),
			want:     provider.ErrUnknownOutcome,
			requests: 1, // not the same page again and again
		},
		"an entry without an id": {
			list: answer(http.StatusOK, intentList(false, intent("pi_a0", "succeeded", "paymentsapi:other"), withoutID)),
			want: provider.ErrUnknownOutcome,
		},
		"the second page 500": {
			list: thenOnPage2(answer(http.StatusInternalServerError, stripeError("api_error", "", "", "boom"))),
			want: provider.ErrUnknownOutcome,
		},
		"the second page 429": {
			list: thenOnPage2(answer(http.StatusTooManyRequests, stripeError("invalid_request_error", "rate_limit", "", "Too many requests"))),
			want: provider.ErrUnavailable,
		},
		"the second page {}": {
			list: thenOnPage2(answerRaw(http.StatusOK, "application/json", `{}`)),
			want: provider.ErrUnknownOutcome,
		},
		"the second page has_more with no entries": {
			list:     thenOnPage2(answer(http.StatusOK, intentList(true))),
			want:     provider.ErrUnknownOutcome,
			requests: 2,
		},
		"the second page hangs past the deadline": {
			list: thenOnPage2(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }),
			want: provider.ErrUnknownOutcome,
		},
		"the key on the first page, the second page 500": {
			list: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("starting_after") == "" {
					writeJSON(w, http.StatusOK, intentList(true, intent("pi_1", "succeeded", testKey)))
					return
				}
				writeJSON(w, http.StatusInternalServerError, stripeError("api_error", "", "", "boom"))
			},
			want: provider.ErrUnknownOutcome,
		},
		"found, but processing": {
			list: answer(http.StatusOK, intentList(false, intent("pi_1", "processing", testKey))),
			want: provider.ErrUnknownOutcome,
		},
		"hangs past the deadline": {
			list: func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
			want: provider.ErrUnknownOutcome,
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.List = tc.list
			_, err := f.provider(t).Lookup(providertest.Context(t, 500*time.Millisecond), lookupOf(testKey))
			providertest.WantOnly(t, "Lookup", err, tc.want)
			if n := len(f.requests()); tc.requests != 0 && n != tc.requests {
				t.Errorf("%d requests, want %d", n, tc.requests)
			}
		})
	}
}

// TestLookupReadsABoundedNumberOfPages: a listing longer than Lookup reads
// is ErrUnknownOutcome, never ErrNotFound, after exactly 20 pages.
func TestLookupReadsABoundedNumberOfPages(t *testing.T) {
	f := newFake(t)
	page := 0
	f.List = func(w http.ResponseWriter, r *http.Request) {
		// The handler runs one request at a time: Lookup pages in order.
		if got, want := r.URL.Query().Get("starting_after"), map[bool]string{true: "", false: fmt.Sprintf("pi_p%d_99", page-1)}[page == 0]; got != want {
			t.Errorf("page %d: starting_after = %q, want %q", page, got, want)
		}
		writeJSON(w, http.StatusOK, intentList(true, others(fmt.Sprintf("pi_p%d_", page), 100)...))
		page++
	}
	_, err := f.provider(t).Lookup(providertest.Context(t, 10*time.Second), lookupOf(testKey))
	providertest.WantOnly(t, "Lookup", err, provider.ErrUnknownOutcome)
	if !strings.Contains(err.Error(), "not all read") {
		t.Errorf("err = %v, want it to say the listing was not read whole", err)
	}
	if n := len(f.requests()); n != 20 {
		t.Errorf("%d requests, want 20 pages", n)
	}
}

func TestLookupSeveralIntentsForOneKeyIsAmbiguous(t *testing.T) {
	declined := withLastPaymentError(intent("pi_a", "requires_payment_method", testKey), "card_declined", "generic_decline")
	for name, intents := range map[string][]map[string]any{
		"declined and succeeded":  {declined, intent("pi_b", "succeeded", testKey)},
		"declined and processing": {declined, intent("pi_b", "processing", testKey)},
		"both declined":           {declined, intent("pi_b", "canceled", testKey)},
		"both succeeded":          {intent("pi_a", "succeeded", testKey), intent("pi_b", "succeeded", testKey)},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.List = answer(http.StatusOK, intentList(false, intents...))
			_, err := f.provider(t).Lookup(providertest.Context(t, 5*time.Second), lookupOf(testKey))
			providertest.WantOnly(t, "Lookup", err, provider.ErrAmbiguous)
			if !strings.Contains(err.Error(), "pi_a") || !strings.Contains(err.Error(), "pi_b") {
				t.Errorf("err = %v, want it to name both PaymentIntents", err)
			}
			if !strings.Contains(f.logs.String(), "several Stripe PaymentIntents carry one idempotency key") {
				t.Errorf("no warning logged; logs:\n%s", f.logs.String())
			}
		})
	}
}

// TestLookupMatchesTheKeyExactly: the key is compared here, byte for byte,
// whatever characters it holds; keys that differ in case, by a prefix, a
// suffix or white space are other keys.
func TestLookupMatchesTheKeyExactly(t *testing.T) {
	const key = `pay_1'x\y"z`
	nearMisses := []map[string]any{
		intent("pi_case", "succeeded", `PAY_1'x\y"z`),
		intent("pi_prefix", "succeeded", `pay_1'x\y"`),
		intent("pi_suffix", "succeeded", `pay_1'x\y"z2`),
		intent("pi_space", "succeeded", key+" "),
		intent("pi_unescaped", "succeeded", `pay_1\'x\\y"z`),
	}
	f := newFake(t)
	f.List = answer(http.StatusOK, intentList(false, append(nearMisses, intent("pi_1", "succeeded", key))...))
	got, err := f.provider(t).Lookup(providertest.Context(t, 5*time.Second), lookupOf(key))
	if err != nil || got.ID != "pi_1" || got.IdempotencyKey != key {
		t.Errorf("Lookup = %+v, %v; want pi_1 alone", got, err)
	}
	f.List = answer(http.StatusOK, intentList(false, nearMisses...))
	_, err = f.provider(t).Lookup(providertest.Context(t, 5*time.Second), lookupOf(key))
	providertest.WantOnly(t, "Lookup among near misses", err, provider.ErrNotFound)
}
