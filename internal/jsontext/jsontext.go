// Package jsontext writes JSON values on the hot path without reflection,
// exactly as encoding/json writes them, so that code which must produce
// encoding/json's bytes (a command's canonical form, an event's envelope)
// can append them directly.
package jsontext

import "encoding/json"

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
