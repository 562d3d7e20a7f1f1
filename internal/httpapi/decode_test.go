package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/authorizations"
	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/endpoints"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
)

// A member encoding/json does not match to a field is refused as the
// contract says (400 VALIDATION_FAILED) and named in the errors, also when
// lower-casing would make it look like a known field: "İ" lower-cases to
// "i" but is no case of it, so "descrİption" is not "description". (Before,
// such a body was refused with no errors at all, or with only "accountId is
// required" beside an "accountİd" it did not name.)
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
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/payments", bytes.NewReader([]byte(tc.body)))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "k")
		var req payments.CreateRequest
		if _, ok := httpapi.NewAPI(httpapi.Deps{}).Command(w, r, &req); ok {
			t.Errorf("%s: accepted", tc.body)
			continue
		}
		var p problem.Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != http.StatusBadRequest ||
			w.Header().Get("Content-Type") != problem.ContentType || p.Code != problem.ValidationFailed {
			t.Errorf("%s: %d %s %s, want 400 VALIDATION_FAILED", tc.body, w.Code, w.Header().Get("Content-Type"), w.Body)
			continue
		}
		var fields []string
		for _, f := range p.Errors {
			fields = append(fields, f.Field)
		}
		slices.Sort(fields)
		if !slices.Equal(fields, tc.fields) {
			t.Errorf("%s: errors name %q, want %q: %s", tc.body, fields, tc.fields, w.Body)
		}
	}
}

// Every command body decoded through operation.HTTP.Command is a flat
// struct: exported, non-embedded fields, none of them (through pointers,
// slices, arrays or map values) a struct. That is why comparing a body's
// top-level members with the struct's fields names every member
// DisallowUnknownFields refuses (decode.go, unknownFields); a body type
// with a nested object of a fixed shape fails here until unknownFields
// checks nested members too. A new command body belongs in this list.
func TestCommandBodiesAreFlat(t *testing.T) {
	t.Parallel()
	for _, body := range []any{
		payments.CreateRequest{},
		refunds.CreateRequest{},
		authorizations.CaptureRequest{},
		authorizations.CancelRequest{},
		endpoints.CreateRequest{},
		delivery.ResendRequest{},
		struct{}{}, // rotate-secret
	} {
		typ := reflect.TypeOf(body)
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() || f.Anonymous {
				t.Errorf("%s.%s: unexported or embedded; unknownFields assumes neither", typ, f.Name)
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array || ft.Kind() == reflect.Map {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				t.Errorf("%s.%s is a nested object of a fixed shape (%s): unknownFields checks top-level members only", typ, f.Name, f.Type)
			}
		}
	}
}
