// Package jsontext writes JSON values on the hot path without reflection,
// exactly as encoding/json writes them, so that code which must produce
// encoding/json's bytes (a command's canonical form, an event's envelope)
// can append them directly.
package jsontext

import (
	"encoding/json"
	"strconv"
)

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
