package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// ReplayedHeader marks an answer replayed from the idempotency store.
const ReplayedHeader = "Idempotent-Replayed"

// MaxBodyBytes is the largest accepted request body.
const MaxBodyBytes = 16 << 10

type tenantKey struct{}

func withTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

func tenantOf(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// idempotencyKey reads the Idempotency-Key header of a request.
func idempotencyKey(r *http.Request) (string, *problem.Problem) {
	key, err := idempotency.ParseKey(r.Header.Values(idempotency.Header))
	switch {
	case errors.Is(err, idempotency.ErrKeyMissing):
		return "", problem.New(http.StatusBadRequest, problem.IdempotencyKeyMissing, err.Error())
	case err != nil:
		return "", problem.New(http.StatusBadRequest, problem.IdempotencyKeyInvalid, err.Error())
	}
	return key, nil
}

// preferWait reads `Prefer: wait=N` (RFC 7240): how long the client is
// willing to wait for an in-flight original, capped by the engine.
func preferWait(values []string) time.Duration {
	for _, v := range values {
		for _, pref := range strings.Split(v, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(pref), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(val), `"`))
			if err != nil || n <= 0 {
				return 0
			}
			return min(time.Duration(n)*time.Second, idempotency.MaxWait)
		}
	}
	return 0
}

// decodeJSON reads a command's JSON body into dst: application/json, at most
// MaxBodyBytes, UTF-8, exactly one object, no unknown fields, no member
// twice in one object.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) *problem.Problem {
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mediaType != "application/json" {
		return problem.New(http.StatusUnsupportedMediaType, problem.UnsupportedMediaType,
			"Send the body as Content-Type: application/json.")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return problem.New(http.StatusRequestEntityTooLarge, problem.PayloadTooLarge,
				fmt.Sprintf("The body must be at most %d bytes.", MaxBodyBytes))
		}
		return problem.New(http.StatusBadRequest, problem.MalformedJSON, "The body could not be read.")
	}
	if !utf8.Valid(body) {
		// encoding/json would quietly turn each invalid byte into U+FFFD.
		return problem.New(http.StatusBadRequest, problem.MalformedJSON, "The body must be UTF-8 encoded JSON.")
	}
	if prob := rejectDuplicateMembers(body); prob != nil {
		return prob
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field ") {
			return unknownFields(body, dst)
		}
		return jsonProblem(err)
	}
	if dec.More() || dec.InputOffset() < int64(len(bytes.TrimRight(body, " \t\r\n"))) {
		return problem.New(http.StatusBadRequest, problem.MalformedJSON,
			"The body must hold exactly one JSON object.")
	}
	return nil
}

// unknownFields answers a body with members dst does not know: every one
// of them, and with them what the command's own check finds wrong with the
// fields it does know (operation.Checked), so that one answer lists all
// there is to fix.
//
// Only the body's top-level members are compared with dst's fields, and
// that is enough for every command body decoded here: each is a flat
// struct of exported, non-embedded fields of strings, pointers to strings
// and string slices, with no nested object of a fixed shape, so
// the only member json.Decoder.DisallowUnknownFields can refuse is a
// top-level one (TestCommandBodiesAreFlat keeps it so). A command that
// gains a nested struct must have its members checked here too, or its
// unknown nested members would be refused without being named.
func unknownFields(body []byte, dst any) *problem.Problem {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		return problem.New(http.StatusBadRequest, problem.MalformedJSON, "The body is not a valid JSON object.")
	}
	known := jsonNames(reflect.TypeOf(dst))
	var fields []problem.FieldError
	for _, name := range slices.Sorted(maps.Keys(members)) {
		if !known[foldName(name)] {
			fields = append(fields, problem.FieldError{Field: name, Message: "is not a known field"})
		}
	}
	if c, ok := dst.(operation.Checked); ok && json.Unmarshal(body, dst) == nil {
		var invalid *validate.Error
		if errors.As(c.Check(), &invalid) {
			fields = append(fields, invalid.Fields...)
		}
	}
	p := problem.New(http.StatusBadRequest, problem.ValidationFailed, "One or more fields are invalid.")
	p.Errors = fields
	return p
}

// jsonNames are the member names of the struct t points to, folded with
// foldName: encoding/json matches a member to a field the way foldName
// compares names (strings.EqualFold), which lower-casing does not
// reproduce: "İ" lower-cases to "i" but is no case of it, so a member
// "descrİption" is unknown to encoding/json and must be named as such.
func jsonNames(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	names := map[string]bool{}
	if t.Kind() != reflect.Struct {
		return names
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case name == "":
			name = f.Name
		}
		names[foldName(name)] = true
	}
	return names
}

// jsonProblem explains a decoding error: a wrong type is a validation
// failure of that field; anything else is malformed JSON. (An unknown
// field never gets here: decodeJSON answers it with unknownFields.)
func jsonProblem(err error) *problem.Problem {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		p := problem.New(http.StatusBadRequest, problem.ValidationFailed, "One or more fields are invalid.")
		p.Errors = []problem.FieldError{{Field: typeErr.Field, Message: "must be a " + jsonType(typeErr.Type.Kind().String())}}
		return p
	}
	return problem.New(http.StatusBadRequest, problem.MalformedJSON, "The body is not a valid JSON object.")
}

// rejectDuplicateMembers walks the JSON value at the start of body and
// refuses an object that holds a member twice: encoding/json would keep
// whichever came last, so {"amount":"1.00","amount":"9.00"} would charge
// 9.00 to a client that may have meant 1.00. Names are compared the way
// encoding/json matches them to fields, ignoring case. Syntax errors are
// left to the decoder, which explains them.
func rejectDuplicateMembers(body []byte) *problem.Problem {
	type level struct {
		names    map[string]bool // nil in an array
		wantName bool            // in an object, before a member's name
	}
	var open []*level
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		if n := len(open); n > 0 && open[n-1].wantName {
			if name, ok := tok.(string); ok {
				folded := foldName(name)
				if open[n-1].names[folded] {
					return problem.New(http.StatusBadRequest, problem.MalformedJSON,
						fmt.Sprintf("The body holds the member %q more than once: send each member once.", name))
				}
				open[n-1].names[folded] = true
				open[n-1].wantName = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			open = append(open, &level{names: map[string]bool{}, wantName: true})
			continue
		case json.Delim('['):
			open = append(open, &level{})
			continue
		case json.Delim('}'), json.Delim(']'):
			open = open[:len(open)-1]
		}
		// A value ended: a scalar, or the object or array just closed.
		if len(open) == 0 {
			return nil
		}
		if top := open[len(open)-1]; top.names != nil {
			top.wantName = true
		}
	}
}

// foldName maps a name to one representative of all the names equal to it
// ignoring case (strings.EqualFold): each rune becomes the smallest rune of
// its case-folding orbit.
func foldName(s string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, s)
}

func jsonType(kind string) string {
	switch kind {
	case "ptr", "string":
		return "string"
	default:
		return kind
	}
}

// invalidParameter answers 400 VALIDATION_FAILED for a query parameter.
func invalidParameter(w http.ResponseWriter, name, message string) {
	p := problem.New(http.StatusBadRequest, problem.ValidationFailed, "One or more parameters are invalid.")
	p.Errors = []problem.FieldError{{Field: name, Message: message}}
	p.Write(w)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
