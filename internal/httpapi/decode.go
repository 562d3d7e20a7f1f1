package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding"
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
// twice in one object. An empty body (no bytes, or white space only) is
// the empty object: it holds no field, so a command whose fields are all
// optional takes it as it takes {}, and one with required fields is told
// which are missing (VALIDATION_FAILED), not that its JSON is malformed.
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
	if len(bytes.Trim(body, jsonSpace)) == 0 {
		body = []byte("{}")
	}
	if prob := rejectDuplicateMembers(body); prob != nil {
		return prob
	}
	// Card data is refused before anything else is said of the body, so
	// that no other answer can be the one that lets it through.
	cardData, control := textFaults(body)
	if len(cardData) > 0 {
		return cardDataProblem(cardData)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field ") {
			return unknownFields(body, dst, control)
		}
		return jsonProblem(err)
	}
	if dec.More() || dec.InputOffset() < int64(len(bytes.TrimRight(body, jsonSpace))) {
		return problem.New(http.StatusBadRequest, problem.MalformedJSON,
			"The body must hold exactly one JSON object.")
	}
	if len(control) > 0 {
		return invalidFields(body, dst, control)
	}
	return nil
}

// jsonSpace are the bytes JSON reads as white space.
const jsonSpace = " \t\r\n"

// unknownFields answers a body with members dst does not know: every one
// of them, and with them what the command's own check finds wrong with the
// fields it does know (operation.Checked), so that one answer lists all
// there is to fix.
//
// json.Decoder.DisallowUnknownFields refuses an unknown member at any
// depth but names only the first it meets, and that one without its
// path, so the body is walked again here beside dst's type to name
// each one by its path from the body: "extra" at the top, "billing.line3"
// in a nested object, "items[2].sku" in an element of an array,
// "metadata.k.v" in an object held in a map: dotted as the path of
// encoding/json's UnmarshalTypeError.Field, by which jsonProblem names a
// member of the wrong type, with the index of an element added, and each
// member spelled as the body spells it, for the client to find it there.
//
// control are the fields the text rules refused (textFaults), listed too.
func unknownFields(body []byte, dst any, control []problem.FieldError) *problem.Problem {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		return problem.New(http.StatusBadRequest, problem.MalformedJSON, "The body is not a valid JSON object.")
	}
	var fields []problem.FieldError
	for _, path := range unknownMembers(nil, members, decodedType(reflect.TypeOf(dst)), "") {
		fields = append(fields, problem.FieldError{Field: path, Message: "is not a known field"})
	}
	return invalidFields(body, dst, append(fields, control...))
}

// invalidFields answers 400 VALIDATION_FAILED naming fields, and with them
// what the command's own check finds wrong with the fields it does know
// (operation.Checked) and fields does not name already; or 400
// CARD_DATA_REFUSED if that check finds card data (a payment method that is
// no token).
func invalidFields(body []byte, dst any, fields []problem.FieldError) *problem.Problem {
	if c, ok := dst.(operation.Checked); ok && json.Unmarshal(body, dst) == nil {
		err := c.Check()
		var (
			cardData *validate.CardDataError
			invalid  *validate.Error
		)
		switch {
		case errors.As(err, &cardData):
			return cardDataProblem(cardData.Fields)
		case errors.As(err, &invalid):
			for _, f := range invalid.Fields {
				if !slices.ContainsFunc(fields, func(g problem.FieldError) bool { return g.Field == f.Field }) {
					fields = append(fields, f)
				}
			}
		}
	}
	p := problem.New(http.StatusBadRequest, problem.ValidationFailed, "One or more fields are invalid.")
	p.Errors = fields
	return p
}

// unknownMembers appends to paths, each after prefix, the name of every
// member of an object that the struct t has no field for, and the paths
// of the unknown members inside the values of those it has one for.
// Members are taken in the order of their names and elements in the order
// of their indexes, so that one body always gets the same answer, and a
// flat body's unknown members are listed sorted by name.
func unknownMembers(paths []string, members map[string]json.RawMessage, t reflect.Type, prefix string) []string {
	fields := jsonFields(t)
	for _, name := range slices.Sorted(maps.Keys(members)) {
		f, ok := fields.lookup(name)
		if !ok {
			paths = append(paths, prefix+name)
			continue
		}
		paths = unknownWithin(paths, members[name], f.typ, prefix+name)
	}
	return paths
}

// unknownWithin appends to paths those of the unknown members inside the
// value raw, at path, that encoding/json decodes into a t: in an object
// for a struct, in each element of an array for a slice or an array, in
// each value of an object for a map. A value of any other type, or of one
// that decodes itself (decodedType), holds no member DisallowUnknownFields
// could refuse. Neither does a value of the wrong JSON type (null, or an
// array where an object belongs): the decoder refuses it, or leaves the
// field empty, without looking inside.
func unknownWithin(paths []string, raw json.RawMessage, t reflect.Type, path string) []string {
	t = decodedType(t)
	if t == nil {
		return paths
	}
	switch t.Kind() {
	case reflect.Struct:
		var members map[string]json.RawMessage
		if json.Unmarshal(raw, &members) == nil {
			paths = unknownMembers(paths, members, t, path+".")
		}
	case reflect.Slice, reflect.Array:
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) == nil {
			for i, elem := range elems {
				if t.Kind() == reflect.Array && i >= t.Len() {
					break // encoding/json skips the elements a Go array has no room for.
				}
				paths = unknownWithin(paths, elem, t.Elem(), path+"["+strconv.Itoa(i)+"]")
			}
		}
	case reflect.Map:
		var values map[string]json.RawMessage
		if json.Unmarshal(raw, &values) == nil {
			for _, key := range slices.Sorted(maps.Keys(values)) {
				paths = unknownWithin(paths, values[key], t.Elem(), path+"."+key)
			}
		}
	}
	return paths
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodedType is the type encoding/json decodes a value into when it
// decodes into a t: t past its pointers, or nil when the value decodes
// itself, with an UnmarshalJSON method that encoding/json hands the whole
// value to, or an UnmarshalText method that takes no object or array.
// encoding/json looks for both at each pointer, on the value and on its
// address.
func decodedType(t reflect.Type) reflect.Type {
	for {
		for _, u := range []reflect.Type{jsonUnmarshaler, textUnmarshaler} {
			if t.Implements(u) || reflect.PointerTo(t).Implements(u) {
				return nil
			}
		}
		if t.Kind() != reflect.Pointer {
			return t
		}
		t = t.Elem()
	}
}

// jsonField is a member name that encoding/json decodes into a field of
// a struct, with the field's type and what decides between two fields of
// one name.
type jsonField struct {
	name   string
	typ    reflect.Type
	index  []int // where the field is, through the structs it is promoted from
	tagged bool  // the name is the json tag's
}

// structFields are the fields of a struct that encoding/json decodes
// members into, in the order of their places.
type structFields []jsonField

// jsonFields are the fields encoding/json decodes an object's members into
// when it decodes into the struct t (none for any other t), chosen as
// encoding/json chooses them, so that a member is named unknown exactly
// when DisallowUnknownFields refuses it: exported fields, less those
// tagged `json:"-"`, each under its tag's name or else its Go name, and
// the fields of an embedded struct without a tag's name, promoted as Go
// promotes them. Of several fields of one name, the shallowest wins, a
// tagged one before the others at its depth; two that tie hide each other
// and every deeper one.
func jsonFields(t reflect.Type) structFields {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	type embedded struct {
		typ   reflect.Type
		index []int
	}
	var fields structFields
	decided := map[string]bool{} // the names a shallower depth has settled
	seen := map[reflect.Type]bool{}
	for level := []embedded{{typ: t}}; len(level) > 0; {
		var next []embedded
		var names []jsonField
		for _, s := range level {
			if seen[s.typ] {
				// A shallower depth holds its fields, which hide these;
				// going on could go round for ever (type T struct{ *T }).
				continue
			}
			for i := range s.typ.NumField() {
				sf := s.typ.Field(i)
				ft := sf.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				tag := sf.Tag.Get("json")
				name, _, _ := strings.Cut(tag, ",")
				switch {
				case tag == "-", !sf.IsExported() && !(sf.Anonymous && ft.Kind() == reflect.Struct):
					// Neither is decoded into; an embedded struct is, even
					// unexported, for its exported fields.
				case name == "" && sf.Anonymous && ft.Kind() == reflect.Struct:
					next = append(next, embedded{typ: ft, index: append(slices.Clip(s.index), i)})
				default:
					names = append(names, jsonField{name: cmp.Or(name, sf.Name), typ: sf.Type,
						index: append(slices.Clip(s.index), i), tagged: name != ""})
				}
			}
		}
		for _, s := range level {
			seen[s.typ] = true
		}
		fields = append(fields, dominant(names, decided)...)
		level = next
	}
	slices.SortFunc(fields, func(a, b jsonField) int { return slices.Compare(a.index, b.index) })
	return fields
}

// dominant picks, of the fields found at one depth, those whose names no
// shallower depth has decided (decided, which it adds them to): of each
// name the one tagged field, or else the one untagged field, or none when
// two tie.
func dominant(names []jsonField, decided map[string]bool) []jsonField {
	var won []jsonField
	byName := map[string][]jsonField{}
	for _, f := range names {
		byName[f.name] = append(byName[f.name], f)
	}
	for _, f := range names {
		if decided[f.name] {
			continue
		}
		decided[f.name] = true
		same := byName[f.name]
		if tagged := slices.DeleteFunc(slices.Clone(same), func(f jsonField) bool { return !f.tagged }); len(tagged) > 0 {
			same = tagged
		}
		if len(same) == 1 {
			won = append(won, same[0])
		}
	}
	return won
}

// lookup finds the field encoding/json decodes the member name into: the
// field of exactly that name, or else the first equal to it ignoring case
// (foldName), as encoding/json matches them; "İ" lower-cases to "i" but
// is no case of it, so "descrİption" is not "description".
func (fs structFields) lookup(name string) (jsonField, bool) {
	if i := slices.IndexFunc(fs, func(f jsonField) bool { return f.name == name }); i >= 0 {
		return fs[i], true
	}
	folded := foldName(name)
	if i := slices.IndexFunc(fs, func(f jsonField) bool { return foldName(f.name) == folded }); i >= 0 {
		return fs[i], true
	}
	return jsonField{}, false
}

// jsonProblem explains a decoding error: a wrong type is a validation
// failure of that field, said in the detail too, since it is the one thing
// to fix; anything else is malformed JSON. (An unknown field never gets
// here: decodeJSON answers it with unknownFields.)
func jsonProblem(err error) *problem.Problem {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		message := "must be " + expectedJSON(typeErr.Type)
		p := problem.New(http.StatusBadRequest, problem.ValidationFailed,
			"One or more fields are invalid: "+typeErr.Field+" "+message+".")
		p.Errors = []problem.FieldError{{Field: typeErr.Field, Message: message}}
		return p
	}
	return problem.New(http.StatusBadRequest, problem.MalformedJSON, "The body is not a valid JSON object.")
}

// expecting is a field's type that says what its JSON value must be
// (money.Amount: a decimal string in the currency's major unit), where
// its JSON type alone ("a string") would mislead.
type expecting interface{ Expected() string }

// expectedJSON is what a JSON value decoded into a t must be: what t says
// (expecting), or else its JSON type.
func expectedJSON(t reflect.Type) string {
	if e, ok := reflect.Zero(t).Interface().(expecting); ok {
		return e.Expected()
	}
	return "a " + jsonType(t.Kind().String())
}

// rejectDuplicateMembers walks the JSON value at the start of body and
// refuses an object that holds a member twice: encoding/json would keep
// whichever came last, so {"amount":"1.00","amount":"9.00"} would charge
// 9.00 to a client that may have meant 1.00. Names are compared the way
// encoding/json matches them to fields, ignoring case. Syntax errors are
// left to the decoder, which explains them.
func rejectDuplicateMembers(body []byte) *problem.Problem {
	name, ok := repeatedMember(body)
	if !ok {
		name = repeatedMemberByTokens(body)
	}
	if name == "" {
		return nil
	}
	return problem.New(http.StatusBadRequest, problem.MalformedJSON,
		fmt.Sprintf("The body holds the member %q more than once: send each member once.", name))
}

// repeatedMemberByTokens answers, for any body, what repeatedMember does
// for the bodies it reads: the first name an object holds twice, or "".
// It reads the body token by token with encoding/json's decoder, and so
// costs an allocation or more per token.
func repeatedMemberByTokens(body []byte) string {
	type level struct {
		names    map[string]bool // nil in an array
		wantName bool            // in an object, before a member's name
	}
	var open []*level
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // a number too large for a float64 is still a token: the reading goes on past it
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		if n := len(open); n > 0 && open[n-1].wantName {
			if name, ok := tok.(string); ok {
				folded := foldName(name)
				if open[n-1].names[folded] {
					return name
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
			return ""
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
