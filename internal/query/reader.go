package query

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// The paging rule of every listing: a page of DefaultLimit items unless
// the request asks for 1 to MaxLimit.
const (
	DefaultLimit = 20
	MaxLimit     = 100
)

// Reader reads a request's query parameters, which Check has passed, and
// gathers what is wrong with their values, so that one answer names every
// parameter to fix (Err).
type Reader struct {
	values url.Values
	errs   validate.Collector
}

// Read returns the Reader of r's query parameters.
func Read(r *http.Request) *Reader { return &Reader{values: r.URL.Query()} }

// Add records that parameter name is invalid, for the rules of a
// parameter's own (an identifier's length, the order of two times).
func (q *Reader) Add(name, msg string) { q.errs.Add(name, msg) }

// Err is a *validate.Error naming every invalid parameter, a
// *validate.CardDataError if any holds a card number, or nil.
func (q *Reader) Err() error { return q.errs.Err() }

// Limit is the page size: "limit", DefaultLimit when it is absent or empty.
func (q *Reader) Limit() int {
	v := q.values.Get("limit")
	if v == "" {
		return DefaultLimit
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxLimit {
		q.Add("limit", "must be an integer from 1 to "+strconv.Itoa(MaxLimit))
		return DefaultLimit
	}
	return n
}

// Cursor is "cursor" as given, "" when absent or empty: the listing decodes
// it, and refuses one it did not issue.
func (q *Reader) Cursor() string { return q.values.Get("cursor") }

// Text is the filter name, "" when it is absent. A filter given empty is
// refused rather than ignored (a client that sends status= believes it
// filtered), and so is one that breaks the rules of a body's text (package
// validate): no stored value holds a control character or a card number,
// so such a filter can only be a mistake.
func (q *Reader) Text(name string) string {
	if !q.values.Has(name) {
		return ""
	}
	v := q.values.Get(name)
	switch validate.Text(v) {
	case validate.TextCardData:
		q.errs.AddCardData(name, validate.CardDataMessage)
		return ""
	case validate.TextControl:
		q.Add(name, validate.ControlMessage)
		return ""
	}
	if v == "" {
		q.Add(name, "is empty: give a value, or leave the parameter out")
	}
	return v
}

// List is the filter name as a comma-separated list of values, each one of
// allowed (in the order given, each once); nil when it is absent. A value
// not allowed is refused with the list of those that are.
func (q *Reader) List(name string, allowed []string) []string {
	v := q.Text(name)
	if v == "" {
		return nil
	}
	var list []string
	for item := range strings.SplitSeq(v, ",") {
		if !slices.Contains(allowed, item) {
			q.Add(name, "must be one of "+strings.Join(allowed, ", ")+", or several of them separated by commas")
			return nil
		}
		if !slices.Contains(list, item) {
			list = append(list, item)
		}
	}
	return list
}

// Time is the filter name as an RFC 3339 date-time, the zero time when it
// is absent.
func (q *Reader) Time(name string) time.Time {
	v := q.Text(name)
	if v == "" {
		return time.Time{}
	}
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		q.Add(name, "must be an RFC 3339 date-time such as 2026-01-31T23:00:00Z or 2026-02-01T00:00:00%2B01:00 (a + URL-encoded)")
		return time.Time{}
	}
	return at
}

// Range is the pair of filters from (inclusive) and to (exclusive) as
// times, either zero when absent; to must come after from.
func (q *Reader) Range(from, to string) (time.Time, time.Time) {
	start, end := q.Time(from), q.Time(to)
	if !start.IsZero() && !end.IsZero() && !end.After(start) {
		q.Add(to, "must be after "+from+": the range is from "+from+" included to "+to+" excluded")
	}
	return start, end
}
