// Package jsontext writes JSON values on the hot path without reflection,
// exactly as encoding/json writes them, so that code which must produce
// encoding/json's bytes (a command's canonical form, an event's envelope)
// can append them directly.
package jsontext

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// Appender is a value that writes its own JSON, byte for byte as
// json.Marshal would write it (a resource's view, on every answer and
// event): Marshal uses it instead of reflection.
type Appender interface {
	AppendJSON(dst []byte) []byte
}

// Marshal is json.Marshal, through v's AppendJSON when v is an Appender.
func Marshal(v any) ([]byte, error) {
	if a, ok := v.(Appender); ok {
		return a.AppendJSON(make([]byte, 0, 512)), nil
	}
	return json.Marshal(v)
}

// AppendStringMap appends m as a JSON object, byte for byte as json.Marshal
// writes a map[string]string: its keys in order, null when m is nil.
func AppendStringMap(dst []byte, m map[string]string) []byte {
	if m == nil {
		return append(dst, "null"...)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(AppendString(dst, k), ':')
		dst = AppendString(dst, m[k])
	}
	return append(dst, '}')
}

// AppendTime appends t as json.Marshal writes a time.Time: RFC 3339 with
// nanoseconds, in t's own location. A year outside 0-9999, which
// json.Marshal refuses, is written as it is: no time the service makes has
// one.
func AppendTime(dst []byte, t time.Time) []byte {
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"')
}

// Field appends a member of an object, "name":, after a comma unless it is
// the object's first (dst ends with '{'). name is written as it is: a
// member's name from the code, plain ASCII that needs no escaping.
func Field(dst []byte, name string) []byte {
	if len(dst) > 0 && dst[len(dst)-1] != '{' {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, name...)
	return append(dst, '"', ':')
}

// AppendString appends s as a JSON string, byte for byte as json.Marshal
// writes it (HTML-safe escaping, invalid UTF-8 replaced): plain ASCII
// directly, anything else through encoding/json.
func AppendString(dst []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	return append(append(append(dst, '"'), s...), '"')
}

// Array returns the JSON array of parts, byte for byte as
// json.Marshal([]any{parts...}) writes it: strings and int64s without
// reflection, any other value through encoding/json. It is the canonical
// form the operations' fingerprints hash, so its bytes must never change.
func Array(parts ...any) []byte {
	dst := make([]byte, 0, 256)
	dst = append(dst, '[')
	for i, p := range parts {
		if i > 0 {
			dst = append(dst, ',')
		}
		switch v := p.(type) {
		case string:
			dst = AppendString(dst, v)
		case int64:
			dst = strconv.AppendInt(dst, v, 10)
		default:
			b, err := json.Marshal(v)
			if err != nil { // a part no JSON holds (a channel, a NaN) is a defect of the caller
				panic("jsontext: Array of a part JSON cannot encode: " + err.Error())
			}
			dst = append(dst, b...)
		}
	}
	return append(dst, ']')
}
