package httpapi_test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// badInput is one hostile request and the answer it must get.
type badInput struct {
	name         string
	method, path string
	header       map[string]string
	body         string
	status       int
	code         string
	field        string // with VALIDATION_FAILED: the field the errors must name
	detail       string // text the detail must hold
}

// TestBadInputCorpus sends a corpus of malformed, hostile and absurd
// requests to the real server: invalid UTF-8 and NUL in bodies, headers,
// paths and query parameters; deeply nested JSON; 1 MB bodies; duplicated
// JSON keys; huge numbers; every wrong type of every field; overlong
// strings; odd Authorization forms; junk ids and parameters. Each must get a
// 4xx application/problem+json with a code (never a 5xx), write nothing, and
// leave the server healthy: a normal payment still works afterwards.
func TestBadInputCorpus(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	paid := e.Pay("pm_card_visa", "inv-bad")
	refunds := "/payments/" + paid + "/refunds"

	var corpus []badInput
	add := func(cases ...badInput) { corpus = append(corpus, cases...) }
	create := func(name, body string, status int, code string) badInput {
		return badInput{name: name, method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-bad"), body: body, status: status, code: code}
	}
	refund := func(name, body string, status int, code string) badInput {
		return badInput{name: "refund: " + name, method: "POST", path: refunds, header: servicetest.CreateHeaders(secretA, "k-bad"), body: body, status: status, code: code}
	}
	invalid := func(c badInput, field string) badInput { c.field = field; return c }
	saying := func(c badInput, detail string) badInput { c.detail = detail; return c }

	// Every wrong JSON type of every field, huge numbers among them.
	wrongTypes := []string{`1`, `-0`, `1.5`, `1e999999`, `123456789012345678901234567890`, `true`, `false`,
		`{}`, `[]`, `["10.00"]`, `{"value":"10.00"}`}
	for _, field := range []string{"accountId", "amount", "currency", "merchantReference", "paymentMethod", "channel", "description"} {
		for _, v := range wrongTypes {
			add(invalid(create(field+" = "+v, servicetest.Body(field, v), 400, "VALIDATION_FAILED"), field))
		}
	}
	for _, field := range []string{"accountId", "amount", "currency", "merchantReference", "paymentMethod"} {
		add(invalid(create(field+" = null", servicetest.Body(field, `null`), 400, "VALIDATION_FAILED"), field))
	}
	for _, field := range []string{"amount", "reason"} {
		for _, v := range wrongTypes {
			add(invalid(refund(field+" = "+v, refundBody(field, v), 400, "VALIDATION_FAILED"), field))
		}
	}

	// An amount in minor units, as a number: told to send "10.00", not
	// "1000", which would be a hundred times as much.
	add(
		invalid(saying(create("amount as a number", servicetest.Body("amount", `1000`), 400, "VALIDATION_FAILED"), `amount must be a decimal string in the currency's major unit, e.g. "10.00"`), "amount"),
		invalid(saying(refund("amount as a number", `{"amount":1000}`, 400, "VALIDATION_FAILED"), `amount must be a decimal string in the currency's major unit, e.g. "10.00"`), "amount"),
	)

	// Numbers and strings out of range.
	add(
		invalid(create("huge amount", servicetest.Body("amount", `"`+strings.Repeat("9", 400)+`.99"`), 400, "VALIDATION_FAILED"), "amount"),
		invalid(create("amount past the maximum", servicetest.Body("amount", `"10000000000.00"`), 400, "VALIDATION_FAILED"), "amount"),
		invalid(create("amount with exponent", servicetest.Body("amount", `"1e3"`), 400, "VALIDATION_FAILED"), "amount"),
		invalid(create("negative amount", servicetest.Body("amount", `"-10.00"`), 400, "VALIDATION_FAILED"), "amount"),
		invalid(create("overlong accountId", servicetest.Body("accountId", `"`+strings.Repeat("a", 129)+`"`), 400, "VALIDATION_FAILED"), "accountId"),
		invalid(create("overlong merchantReference", servicetest.Body("merchantReference", `"`+strings.Repeat("r", 10_000)+`"`), 400, "VALIDATION_FAILED"), "merchantReference"),
		invalid(create("overlong description", servicetest.Body("description", `"`+strings.Repeat("é", 1025)+`"`), 400, "VALIDATION_FAILED"), "description"),
		invalid(refund("huge amount", `{"amount":"`+strings.Repeat("9", 5000)+`"}`, 400, "VALIDATION_FAILED"), "amount"),
	)

	// Invalid UTF-8 and NUL in the body.
	add(
		saying(create("invalid UTF-8 in a value", servicetest.Body("accountId", "\"acc_\xff\""), 400, "MALFORMED_JSON"), "UTF-8"),
		create("invalid UTF-8 in the description", servicetest.Body("description", "\"caf\xe9\""), 400, "MALFORMED_JSON"),
		create("invalid UTF-8 in a key", `{"amount\xc0":"1.00"}`, 400, "MALFORMED_JSON"),
		create("invalid UTF-8 between tokens", servicetest.Body()+"\xff", 400, "MALFORMED_JSON"),
		create("UTF-16", "\xff\xfe{\x00}\x00", 400, "MALFORMED_JSON"),
		create("byte order mark", "\xef\xbb\xbf"+servicetest.Body(), 400, "MALFORMED_JSON"),
		create("raw NUL in a string", servicetest.Body("accountId", "\"acc\x00\""), 400, "MALFORMED_JSON"),
		create("raw NUL between tokens", "{\x00}", 400, "MALFORMED_JSON"),
		invalid(create("escaped NUL in accountId", servicetest.Body("accountId", `"acc\u0000"`), 400, "VALIDATION_FAILED"), "accountId"),
		invalid(create("escaped NUL in the description", servicetest.Body("description", `"a\u0000b"`), 400, "VALIDATION_FAILED"), "description"),
		invalid(refund("escaped NUL in the reason", `{"amount":"1.00","reason":"duplicate\u0000"}`, 400, "VALIDATION_FAILED"), "reason"),
		refund("invalid UTF-8", "{\"amount\":\"1.00\",\"reason\":\"\xff\"}", 400, "MALFORMED_JSON"),
	)

	// Duplicated keys: never "whichever came last".
	add(
		saying(create("duplicated amount", `{"amount":"1.00","amount":"9.00","accountId":"acc_1","currency":"EUR","merchantReference":"r","paymentMethod":"pm_card_visa"}`, 400, "MALFORMED_JSON"),
			`"amount" more than once`),
		create("duplicated with the same value", servicetest.Body()[:len(servicetest.Body())-1]+`,"currency":"EUR"}`, 400, "MALFORMED_JSON"),
		saying(create("duplicated in another case", servicetest.Body()[:len(servicetest.Body())-1]+`,"AMOUNT":"9.00"}`, 400, "MALFORMED_JSON"), `"AMOUNT" more than once`),
		create("duplicated optional field", servicetest.Body("channel", `"web"`)[:len(servicetest.Body("channel", `"web"`))-1]+`,"channel":"pos"}`, 400, "MALFORMED_JSON"),
		create("duplicated inside a nested object", servicetest.Body("extra", `{"a":1,"a":2}`), 400, "MALFORMED_JSON"),
		saying(refund("duplicated amount", `{"amount":"1.00","amount":"9.00"}`, 400, "MALFORMED_JSON"), `"amount" more than once`),
	)

	// Deep nesting, odd shapes and sizes.
	add(
		invalid(create("deeply nested array value", servicetest.Body("amount", strings.Repeat("[", 5000)+strings.Repeat("]", 5000)), 400, "VALIDATION_FAILED"), "amount"),
		invalid(create("deeply nested unknown member", servicetest.Body("extra", strings.Repeat(`{"a":`, 2000)+"1"+strings.Repeat("}", 2000)), 400, "VALIDATION_FAILED"), "extra"),
		create("deeply nested, unbalanced", strings.Repeat("[", 16_000), 400, "MALFORMED_JSON"),
		create("deeply nested, balanced", strings.Repeat("[", 8000)+strings.Repeat("]", 8000), 400, "MALFORMED_JSON"),
		invalid(create("empty body", "", 400, "VALIDATION_FAILED"), "accountId"),
		invalid(create("white space only", " \n\t ", 400, "VALIDATION_FAILED"), "accountId"),
		invalid(refund("empty body", "", 400, "VALIDATION_FAILED"), "amount"),
		create("JSON null", "null", 400, "VALIDATION_FAILED"),
		create("a string", `"payment"`, 400, "MALFORMED_JSON"),
		create("an array of the object", "["+servicetest.Body()+"]", 400, "MALFORMED_JSON"),
		create("trailing garbage", servicetest.Body()+"x", 400, "MALFORMED_JSON"),
		create("1 MB of valid JSON", servicetest.Body("description", `"`+strings.Repeat("x", 1<<20)+`"`), 413, "PAYLOAD_TOO_LARGE"),
		create("1 MB of brackets", strings.Repeat("[", 1<<20), 413, "PAYLOAD_TOO_LARGE"),
		create("1 MB of NULs", strings.Repeat("\x00", 1<<20), 413, "PAYLOAD_TOO_LARGE"),
		refund("1 MB body", `{"amount":"1.00","reason":"`+strings.Repeat("x", 1<<20)+`"}`, 413, "PAYLOAD_TOO_LARGE"),
	)

	// Headers: keys, media types, Authorization.
	withHeader := func(c badInput, k, v string) badInput {
		h := map[string]string{}
		for hk, hv := range c.header {
			h[hk] = hv
		}
		if v == "" {
			delete(h, k)
		} else {
			h[k] = v
		}
		c.header = h
		return c
	}
	add(
		withHeader(create("key with invalid UTF-8", servicetest.Body(), 400, "IDEMPOTENCY_KEY_INVALID"), "Idempotency-Key", "k\xff"),
		withHeader(create("key of 8 KiB", servicetest.Body(), 400, "IDEMPOTENCY_KEY_INVALID"), "Idempotency-Key", strings.Repeat("k", 8<<10)),
		withHeader(create("key, bad quoting", servicetest.Body(), 400, "IDEMPOTENCY_KEY_INVALID"), "Idempotency-Key", `"k\x"`),
		withHeader(create("content type with invalid UTF-8", servicetest.Body(), 415, "UNSUPPORTED_MEDIA_TYPE"), "Content-Type", "application/json\xff"),
		withHeader(create("content type with junk parameters", servicetest.Body(), 415, "UNSUPPORTED_MEDIA_TYPE"), "Content-Type", "application/json; ;;=="),
	)
	for name, auth := range map[string]string{
		"no Authorization":     "",
		"scheme only":          "Bearer",
		"scheme and a space":   "Bearer ",
		"Basic":                "Basic " + base64.StdEncoding.EncodeToString([]byte("tenant_a:"+secretA)),
		"the secret alone":     secretA,
		"another scheme":       "Token " + secretA,
		"two secrets":          "Bearer " + secretA + " " + secretB,
		"invalid UTF-8":        "Bearer sk_\xff\xfe",
		"a secret of 64 KiB":   "Bearer " + strings.Repeat("s", 64<<10),
		"a secret with quotes": `Bearer "` + secretA + `"`,
	} {
		add(withHeader(badInput{name: "Authorization: " + name, method: "GET", path: "/payments", header: servicetest.Bearer(secretA), status: 401, code: "UNAUTHORIZED"}, "Authorization", auth),
			withHeader(create("Authorization: "+name, servicetest.Body(), 401, "UNAUTHORIZED"), "Authorization", auth))
	}
	// Junk ids in paths, and junk query parameters.
	cursor := func(raw string) string { return url.QueryEscape(base64.RawURLEncoding.EncodeToString([]byte(raw))) }
	for _, id := range []string{"%00", "%FF", "%C0%AF", "pay_%00", "pay_%ED%A0%80", strings.Repeat("x", 4096), "..%2F..%2Fhealthz", "%20", "pay_'%3B--"} {
		add(
			badInput{name: "get payment " + id, method: "GET", path: "/payments/" + id, header: servicetest.Bearer(secretA), status: 404, code: "NOT_FOUND", detail: "No such payment."},
			badInput{name: "list refunds of " + id, method: "GET", path: "/payments/" + id + "/refunds", header: servicetest.Bearer(secretA), status: 404, code: "NOT_FOUND", detail: "No such payment."},
			badInput{name: "get refund of " + id, method: "GET", path: "/payments/" + id + "/refunds/re_x", header: servicetest.Bearer(secretA), status: 404, code: "NOT_FOUND"},
			badInput{name: "get refund " + id, method: "GET", path: refunds + "/" + id, header: servicetest.Bearer(secretA), status: 404, code: "NOT_FOUND", detail: "No such refund."},
			badInput{name: "refund " + id, method: "POST", path: "/payments/" + id + "/refunds", header: servicetest.CreateHeaders(secretA, "k-bad"), body: `{"amount":"1.00"}`, status: 404, code: "NOT_FOUND", detail: "No such payment."},
		)
	}
	for _, q := range []string{
		"limit=abc", "limit=0", "limit=101", "limit=-1", "limit=1e3", "limit=99999999999999999999", "limit=%00", "limit=%FF", "limit=+5%00",
		"cursor=nope", "cursor=%00", "cursor=%FF", "cursor=" + cursor("2026-01-01T00:00:00Z|pay_\x00"),
		"cursor=" + cursor("2026-01-01T00:00:00Z|pay_\xff"), "cursor=" + cursor("99999-01-01T00:00:00Z|pay_1"), "cursor=" + cursor("|pay_"),
		"accountId=%00", "accountId=acc%FF", "accountId=acc%ED%A0%80",
	} {
		add(badInput{name: "list ?" + q, method: "GET", path: "/payments?" + q, header: servicetest.Bearer(secretA), status: 400, code: "VALIDATION_FAILED"})
	}
	add(
		badInput{name: "unknown route", method: "GET", path: "/payments/x/y/z/w", header: servicetest.Bearer(secretA), status: 404, code: "NOT_FOUND"},
		badInput{name: "unknown method", method: "DELETE", path: "/payments", header: servicetest.Bearer(secretA), status: 405, code: "METHOD_NOT_ALLOWED"},
	)

	for _, c := range corpus {
		t.Run(c.name, func(t *testing.T) {
			// Cases 4 s apart: the corpus's many failed authentications,
			// from one address, never make 20 within a minute, which would
			// refuse the address (429 TOO_MANY_FAILED_AUTHENTICATIONS).
			e.Clock.Advance(4 * time.Second)
			r := e.Do(c.method, c.path, []byte(c.body), c.header)
			ct := r.Header.Get("Content-Type")
			if r.Status >= 500 || ct != "application/problem+json" {
				t.Fatalf("%s %.80s: got %d %s %.300s", c.method, c.path, r.Status, ct, r.Body)
			}
			var p struct {
				Detail string `json:"detail"`
				Code   string `json:"code"`
				Status int    `json:"status"`
				Errors []struct {
					Field string `json:"field"`
				} `json:"errors"`
			}
			if err := json.Unmarshal(r.Body, &p); err != nil || p.Code == "" || p.Status != r.Status {
				t.Fatalf("not a problem with a code: %v %.300s", err, r.Body)
			}
			if r.Status != c.status || p.Code != c.code {
				t.Errorf("got %d %s, want %d %s: %.300s", r.Status, p.Code, c.status, c.code, r.Body)
			}
			if c.field != "" && (len(p.Errors) == 0 || p.Errors[0].Field != c.field) {
				t.Errorf("errors do not name %s: %.300s", c.field, r.Body)
			}
			if !strings.Contains(p.Detail, c.detail) {
				t.Errorf("the detail does not say %s: %s", c.detail, p.Detail)
			}
		})
	}

	// What net/http itself refuses never reaches the API: a NUL or another
	// control character in a header. Those get net/http's own 400.
	for name, raw := range map[string]string{
		"NUL in Authorization":   "Authorization: Bearer sk\x00x\r\n",
		"NUL in Idempotency-Key": "Authorization: Bearer " + secretA + "\r\nIdempotency-Key: k\x00\r\n",
		"CR in a header":         "Authorization: Bearer " + secretA + "\r\nX-Junk: a\rb\r\n",
		"NUL in a header name":   "X-J\x00unk: 1\r\n",
	} {
		if status := rawRequest(t, e.URL, "POST /payments HTTP/1.1\r\nHost: x\r\n"+raw+"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"); status != 400 {
			t.Errorf("%s: net/http answered %d, want 400", name, status)
		}
	}

	// Nothing was written, and the server still serves normal requests.
	for _, table := range []string{"payments", "idempotency_keys", "refunds"} {
		if n := e.Count(table); n != map[string]int{"payments": 1, "idempotency_keys": 1, "refunds": 0}[table] {
			t.Errorf("%s has %d rows after the bad input", table, n)
		}
	}
	if r := e.Post("k-bad", servicetest.Body("merchantReference", `"inv-after"`)); r.Status != http.StatusCreated {
		t.Errorf("a normal payment after the bad input: %d %s", r.Status, r.Body)
	}
	if r := e.Refund(paid, "k-bad", `{"amount":"1.00"}`); r.Status != http.StatusCreated {
		t.Errorf("a normal refund after the bad input: %d %s", r.Status, r.Body)
	}
	if r := e.Do("GET", "/healthz", nil, nil); r.Status != http.StatusOK {
		t.Errorf("healthz after the bad input: %d", r.Status)
	}
}

// refundBody is a valid refund body with field set to the raw JSON v.
func refundBody(field, v string) string {
	fields := map[string]string{"amount": `"1.00"`, "reason": `"duplicate"`}
	fields[field] = v
	return `{"amount":` + fields["amount"] + `,"reason":` + fields["reason"] + `}`
}

// rawRequest writes a request as bytes on a fresh connection, for what
// net/http's client refuses to send, and returns the answer's status.
func rawRequest(t *testing.T, base, raw string) int {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}

// A body with unknown members is answered with all there is to fix at
// once: every unknown member, and the invalid known fields beside them (an
// unknown field must not hide the other errors).
func TestUnknownMembersAndInvalidFieldsAreReportedTogether(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	b := servicetest.Body("amount", `"-1.00"`, "extra", `1`)
	r := e.Post("k-all-errors", b[:len(b)-1]+`,"Other":"x"}`)
	if r.Status != http.StatusBadRequest || r.JSON(t)["code"] != "VALIDATION_FAILED" {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
	var p struct {
		Errors []struct{ Field string } `json:"errors"`
	}
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatal(err)
	}
	var fields []string
	for _, f := range p.Errors {
		fields = append(fields, f.Field)
	}
	slices.Sort(fields)
	if !slices.Equal(fields, []string{"Other", "amount", "extra"}) {
		t.Fatalf("fields %v, want Other, amount and extra: %s", fields, r.Body)
	}
	if n := e.Count("payments"); n != 0 {
		t.Fatalf("%d payments made", n)
	}
}
