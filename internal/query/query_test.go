package query

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/validate"
)

func fields(t *testing.T, err error) []validate.FieldError {
	t.Helper()
	if err == nil {
		return nil
	}
	var invalid *validate.Error
	if !errors.As(err, &invalid) {
		t.Fatalf("want a *validate.Error, got %v", err)
	}
	return invalid.Fields
}

// Check refuses, naming each once, in the order of the query string: a
// parameter the route does not take, one given twice, and a pair that is
// not URL-encoded text or that holds a semicolon (net/url drops such a
// pair, so its value would be ignored). Empty pairs are nothing.
func TestCheckNamesEveryParameterItRefuses(t *testing.T) {
	t.Parallel()
	names := []string{"cursor", "limit", "status"}
	for raw, want := range map[string][]validate.FieldError{
		"":                        nil,
		"limit=5&&status=A,B&":    nil,
		"limit=5&cursor=&status=": nil,
		"extra=1":                 {{Field: "extra", Message: UnknownMessage + " (cursor, limit, status)"}},
		"Limit=5":                 {{Field: "Limit", Message: UnknownMessage + " (cursor, limit, status)"}},
		"limit=5&limit=6&limit=7": {{Field: "limit", Message: RepeatedMessage}},
		"b=1&limit=1&a=2&b=3":     {{Field: "b", Message: UnknownMessage + " (cursor, limit, status)"}, {Field: "a", Message: UnknownMessage + " (cursor, limit, status)"}},
		"limit=5;status=FAILED":   {{Field: "limit", Message: EncodingMessage}},
		"status=%zz":              {{Field: "status", Message: EncodingMessage}},
		"status=%00":              {{Field: "status", Message: EncodingMessage}},
		"status=%ff":              {{Field: "status", Message: EncodingMessage}},
		"%ff=1":                   {{Field: "%ff", Message: EncodingMessage}},
		"st%61tus=A":              nil,
		"=1":                      {{Field: "", Message: UnknownMessage + " (cursor, limit, status)"}},
		"status=A&extra&status=B": {{Field: "extra", Message: UnknownMessage + " (cursor, limit, status)"}, {Field: "status", Message: RepeatedMessage}},
	} {
		if got := fields(t, Check(raw, names)); !slices.Equal(got, want) {
			t.Errorf("Check(%q):\n got %v\nwant %v", raw, got, want)
		}
	}
	if got := fields(t, Check("a=1", nil)); len(got) != 1 || got[0].Message != UnknownMessage+": it takes no query parameters" {
		t.Errorf("a route that takes none: %v", got)
	}
}

// A route's declared parameters are read from its handler; an undeclared
// handler takes none.
func TestNamesAreThoseDeclared(t *testing.T) {
	t.Parallel()
	h := Declare(func(http.ResponseWriter, *http.Request) {}, "status", "limit")
	if got := Names(h); !slices.Equal(got, []string{"limit", "status"}) {
		t.Errorf("Names = %v", got)
	}
	if got := Names(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})); got != nil {
		t.Errorf("an undeclared handler takes %v", got)
	}
}

// The Reader gathers every fault of the values: a limit out of range, a
// filter given empty (refused, not ignored), a value outside a list, a
// time that is not RFC 3339, a range that ends before it starts, a control
// character, a card number.
func TestTheReaderNamesEveryFaultyValue(t *testing.T) {
	t.Parallel()
	read := func(raw string) *Reader { return Read(httptest.NewRequest("GET", "/x?"+raw, nil)) }

	q := read("limit=7&cursor=c&status=B,A,B&from=2026-01-01T00:00:00Z&to=2026-01-01T01:00:00%2B01:00&ref=x")
	if q.Limit() != 7 || q.Cursor() != "c" || !slices.Equal(q.List("status", []string{"A", "B"}), []string{"B", "A"}) || q.Text("ref") != "x" {
		t.Error("the values are not read as given")
	}
	if from, to := q.Range("from", "to"); !from.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) || !to.Equal(from) {
		// to is 01:00+01:00, the same instant: an empty range.
		t.Errorf("range %v %v", from, to)
	}
	if got := fields(t, q.Err()); len(got) != 1 || got[0].Field != "to" {
		t.Errorf("an empty range: %v", got)
	}

	q = read("limit=101&status=A,C&from=yesterday&ref=&note=a%0Ab")
	q.Limit()
	q.List("status", []string{"A", "B"})
	q.Time("from")
	q.Text("ref")
	q.Text("note")
	q.Text("absent")
	var named []string
	for _, f := range fields(t, q.Err()) {
		named = append(named, f.Field)
	}
	if want := []string{"limit", "status", "from", "ref", "note"}; !slices.Equal(named, want) {
		t.Errorf("named %v, want %v", named, want)
	}
	for _, f := range fields(t, q.Err()) {
		if f.Field == "status" && !strings.Contains(f.Message, "A, B") {
			t.Errorf("the list's message does not say what is allowed: %q", f.Message)
		}
	}

	q = read("ref=4242+4242+4242+4242")
	q.Text("ref")
	var card *validate.CardDataError
	if !errors.As(q.Err(), &card) || card.Fields[0].Field != "ref" {
		t.Errorf("a card number: %v", q.Err())
	}

	q = read("limit=&cursor=")
	if q.Limit() != DefaultLimit || q.Cursor() != "" || q.Err() != nil {
		t.Errorf("an empty page size or cursor is the first page's: %v", q.Err())
	}
}
