package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/authorizations"
	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/endpoints"
	"github.com/paymentsapi/paymentsapi/internal/httpapi/httpapitest"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// A member encoding/json does not match to a field is refused as the
// contract says (400 VALIDATION_FAILED) and named in the errors, also when
// lower-casing would make it look like a known field: "İ" lower-cases to
// "i" but is no case of it, so "descrİption" is not "description".
func TestUnknownMembersAreNamedEvenWhenTheyLowerCaseToAKnownOne(t *testing.T) {
	t.Parallel()
	const valid = `"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"inv-1","paymentMethod":"pm_card_visa"`
	for _, tc := range []struct {
		body   string
		fields []string
	}{
		{`{` + valid + `,"descr\u0130ption":"x"}`, []string{"descrİption"}},
		{`{"account\u0130d":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"inv-1","paymentMethod":"pm_card_visa"}`,
			[]string{"accountId", "accountİd"}},
		{`{` + valid + `,"extra":1}`, []string{"extra"}},
	} {
		fields, ok := refusedFields(t, tc.body, &payments.CreateRequest{})
		if !ok {
			continue
		}
		slices.Sort(fields)
		if !slices.Equal(fields, tc.fields) {
			t.Errorf("%s: errors name %q, want %q", tc.body, fields, tc.fields)
		}
	}
}

// refusedFields sends body as a command into dst and returns the fields the
// answer's errors name, in their order; ok is false, and the test failed,
// when the body was not refused with 400 VALIDATION_FAILED.
func refusedFields(t *testing.T, body string, dst any) (fields []string, ok bool) {
	t.Helper()
	w, accepted := sendCommand(body, dst)
	if accepted {
		t.Errorf("%s: accepted", body)
		return nil, false
	}
	var p problem.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != http.StatusBadRequest ||
		w.Header().Get("Content-Type") != problem.ContentType || p.Code != problem.ValidationFailed {
		t.Errorf("%s: %d %s %s, want 400 VALIDATION_FAILED", body, w.Code, w.Header().Get("Content-Type"), w.Body)
		return nil, false
	}
	for _, f := range p.Errors {
		fields = append(fields, f.Field)
	}
	return fields, true
}

// sendCommand sends body as a command into dst (httpapitest.Send) and
// returns the answer, if any, and whether the command was accepted.
func sendCommand(body string, dst any) (*httptest.ResponseRecorder, bool) {
	w, _, ok := httpapitest.Send([]byte(body), dst)
	return w, ok
}

// nestedCommand is a command body with members inside members, of every
// shape unknownFields walks into: a nested struct, a pointer to one, a
// slice of them (of pointers to them, deeper down), a map of them, and an
// embedded struct whose fields are the command's own.
type nestedCommand struct {
	Name     string                `json:"name"`
	Billing  nestedAddress         `json:"billing"`
	Shipping *nestedAddress        `json:"shipping"`
	Items    []nestedItem          `json:"items"`
	Metadata map[string]nestedItem `json:"metadata"`
	Ignored  string                `json:"-"`
	nestedAudit
}

type nestedAddress struct {
	Line1 string `json:"line1"`
}

type nestedItem struct {
	SKU     string          `json:"sku"`
	Options []*nestedOption `json:"options"`
}

type nestedOption struct {
	Code string `json:"code"`
}

type nestedAudit struct {
	Reason string        `json:"reason"`
	Source nestedAddress `json:"source"`
}

// An unknown member is named by its path from the body wherever it is:
// in a nested object, behind a pointer, in an element of an array, in a
// value of a map, in an embedded struct's nested object, or several levels
// down, all of them in one answer, members by name and elements by index.
func TestUnknownMembersAreNamedAtEveryDepth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body   string
		fields []string
	}{
		{`{"billing":{"line1":"a","line3":"b"}}`, []string{"billing.line3"}},
		{`{"shipping":{"line1":"a","zip":"b"}}`, []string{"shipping.zip"}},
		{`{"items":[{"sku":"a"},{"sku":"b","qty":2},{"colour":"red","size":"L"}]}`,
			[]string{"items[1].qty", "items[2].colour", "items[2].size"}},
		{`{"items":[{"options":[{"code":"a"},{"code":"b","price":1}]}]}`, []string{"items[0].options[1].price"}},
		{`{"metadata":{"k":{"sku":"a","v":1},"j":{"w":2}}}`, []string{"metadata.j.w", "metadata.k.v"}},
		{`{"reason":"x","source":{"line1":"a","extra":1}}`, []string{"source.extra"}},
		// An embedded struct without a json name has no member of its own,
		// and a field tagged "-" has none at all.
		{`{"nestedAudit":{"reason":"x"},"ignored":"y"}`, []string{"ignored", "nestedAudit"}},
		{`{"zz":1,"billing":{"x":1},"items":[{"y":1}],"name":"n","shipping":{"w":1},"source":{"u":1},"metadata":{"k":{"t":1}}}`,
			[]string{"billing.x", "items[0].y", "metadata.k.t", "shipping.w", "source.u", "zz"}},
	} {
		fields, ok := refusedFields(t, tc.body, &nestedCommand{})
		if ok && !slices.Equal(fields, tc.fields) {
			t.Errorf("%s: errors name %q, want %q", tc.body, fields, tc.fields)
		}
	}
}

// A known nested member is not named, whatever its case, beside an
// unknown one that is; and a body whose nested members are all known is
// accepted.
func TestKnownNestedMembersAreNotNamed(t *testing.T) {
	t.Parallel()
	const body = `{"billing":{"LINE1":"a"},"shipping":{"line1":"b"},"items":[{"Sku":"c","options":[{"code":"d"}]}],` +
		`"metadata":{"k":{"sku":"e"}},"source":{"line1":"f"},"bogus":1}`
	if fields, ok := refusedFields(t, body, &nestedCommand{}); ok && !slices.Equal(fields, []string{"bogus"}) {
		t.Errorf("%s: errors name %q, want only \"bogus\"", body, fields)
	}
	known := strings.Replace(body, `,"bogus":1`, ``, 1)
	var cmd nestedCommand
	if w, ok := sendCommand(known, &cmd); !ok || cmd.Items[0].Options[0].Code != "d" {
		t.Errorf("%s: refused or misread: %d %s", known, w.Code, w.Body)
	}
}

// ambiguousCommand embeds two structs with a member of one name at one
// depth: encoding/json decodes that member into neither, so
// DisallowUnknownFields refuses it, and unknownFields must name it.
type ambiguousCommand struct {
	ambiguousLeft
	ambiguousRight
	Kept string `json:"kept"`
}

type ambiguousLeft struct {
	Code string
	Left string `json:"left"`
}

type ambiguousRight struct {
	Code string
}

// Embedded structs promote their fields the way encoding/json promotes
// them, so that what unknownFields names is what the decoder refused: a
// name two embedded fields tie for is unknown, one only one of them has is
// known.
func TestUnknownMembersFollowEmbeddingRules(t *testing.T) {
	t.Parallel()
	const body = `{"code":"x","left":"y","kept":"z"}`
	if fields, ok := refusedFields(t, body, &ambiguousCommand{}); ok && !slices.Equal(fields, []string{"code"}) {
		t.Errorf("%s: errors name %q, want only \"code\"", body, fields)
	}
}

// Commands that exercise, one by one, the rules by which unknownFields
// follows encoding/json, each with a body the decoder refuses for "zz"
// only: a rule broken would name more.
type (
	boundedCommand struct {
		Pair [1]nestedOption `json:"pair"` // a second element has no room: skipped unread
	}
	opaqueValue   struct{ Inner string }
	opaqueCommand struct {
		Blob opaqueValue `json:"blob"`
	} // decodes itself: nothing inside it is read
	loopingCommand struct {
		//lint:ignore U1000 never set: it is here for the loop its type makes
		*loopingCommand        // embeds itself: its fields are found once
		Name            string `json:"name"`
	}
	untaggedCode struct{ Code string }
	taggedCode   struct {
		X string `json:"Code"`
	}
	taggedCommand struct { // at one depth, the tagged field of a name wins
		untaggedCode
		taggedCode
	}
	shallowCommand struct { // the shallower field hides the two deeper ones that tie
		Code string
		ambiguousLeft
		ambiguousRight
	}
	deepCode struct {
		Code nestedAddress `json:"code"`
	}
	deepFirstCommand struct { // the shallower field wins though it comes after the deeper one
		deepCode
		Code map[string]int `json:"code"`
	}
)

func (*opaqueValue) UnmarshalJSON([]byte) error { return nil }

func TestUnknownMembersFollowEveryDecodingRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		dst  any
	}{
		{`{"pair":[{"code":"a"},{"code":"b","extra":1}],"zz":1}`, &boundedCommand{}},
		{`{"blob":{"inner":"a","x":1},"zz":1}`, &opaqueCommand{}},
		{`{"name":"a","zz":1}`, &loopingCommand{}},
		{`{"Code":"a","zz":1}`, &taggedCommand{}},
		{`{"Code":"a","zz":1}`, &shallowCommand{}},
		{`{"code":{"x":1},"zz":1}`, &deepFirstCommand{}},
	} {
		done := make(chan []string, 1)
		go func() {
			fields, _ := refusedFields(t, tc.body, tc.dst)
			done <- fields
		}()
		select {
		case fields := <-done:
			if !slices.Equal(fields, []string{"zz"}) {
				t.Errorf("%s into %T: errors name %q, want only \"zz\"", tc.body, tc.dst, fields)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s into %T: no answer in 10s", tc.body, tc.dst)
		}
	}
}

// An amount sent as a JSON number, in every command that takes one, is
// refused with what to send instead, in the field's error and in the
// detail: a decimal string in the currency's major unit. "must be a
// string" alone led clients used to minor units to send "1000" for ten
// euros, which is a thousand.
func TestAnAmountSentAsANumberIsToldToBeADecimalStringInTheMajorUnit(t *testing.T) {
	t.Parallel()
	const want = `must be a decimal string in the currency's major unit, e.g. "10.00"`
	for name, c := range map[string]struct {
		body string
		dst  any
	}{
		"payment":          {servicetest.Body("amount", "1000"), &payments.CreateRequest{}},
		"payment, a float": {servicetest.Body("amount", "10.5"), &payments.CreateRequest{}},
		"refund":           {`{"amount":300}`, &refunds.CreateRequest{}},
		"capture":          {`{"amount":800}`, &authorizations.CaptureRequest{}},
	} {
		p, refused := answer(t, c.body, c.dst)
		if !refused || p.Code != problem.ValidationFailed || len(p.Errors) != 1 || p.Errors[0].Field != "amount" || p.Errors[0].Message != want {
			t.Errorf("%s: %+v, want VALIDATION_FAILED with amount %s", name, p, want)
		}
		if !strings.Contains(p.Detail, "amount "+want) {
			t.Errorf("%s: the detail %q does not say amount %s", name, p.Detail, want)
		}
	}
}

// An empty body sent as application/json (no bytes, or white space only)
// is the empty object: the operations whose fields are all optional take
// it, and the others name the fields it lacks, never MALFORMED_JSON.
func TestAnEmptyJSONBodyIsTheEmptyObject(t *testing.T) {
	t.Parallel()
	for _, empty := range []string{"", " \r\n\t"} {
		for name, dst := range map[string]any{
			"capture": &authorizations.CaptureRequest{}, "cancel": &authorizations.CancelRequest{},
			"resend": &delivery.ResendRequest{}, "rotate-secret": &endpoints.RotateRequest{},
		} {
			if p, refused := answer(t, empty, dst); refused {
				t.Errorf("%s with the body %q: refused %+v", name, empty, p)
			}
		}
		// A payment's fields are checked as it is decoded (operation.Checked);
		// the other commands' by their handlers, through the same server
		// (TestBadInputCorpus: a refund's empty body).
		p, refused := answer(t, empty, &payments.CreateRequest{})
		required := []string{"accountId", "amount", "currency", "merchantReference", "paymentMethod"}
		if fields := fieldsOf(p); !refused || p.Code != problem.ValidationFailed || !slices.Equal(slices.Sorted(slices.Values(fields)), required) {
			t.Errorf("a payment with the body %q: %+v, want VALIDATION_FAILED naming %v", empty, p, required)
		}
	}
}
