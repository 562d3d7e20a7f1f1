package httpapi

import (
	"bytes"
	"unicode/utf8"
)

// repeatedMember is rejectDuplicateMembers' fast path: one pass over body,
// no allocation, for the bodies clients send (small objects of plain
// names). It answers the first name an object holds twice, compared
// ignoring case as encoding/json matches names to fields, or "" if none.
// ok is false when it cannot answer cheaply, and the caller then asks the
// token reader, which answers every body: a name with an escape in it or
// not UTF-8 (decodeJSON refuses such a body before), an object of more than
// maxScannedNames members, nesting deeper than maxScannedDepth, or anything
// that is not well-formed JSON up to the end of the first value (the
// decoder explains those). Like the token reader, it reads only the first
// value of the body.
func repeatedMember(body []byte) (name string, ok bool) {
	s := memberScan{b: body}
	return s.value(0)
}

const (
	// maxScannedNames bounds the names of one object that the fast path
	// compares pairwise; an object with more goes to the token reader.
	maxScannedNames = 32
	maxScannedDepth = 32
)

// memberScan is the state of one repeatedMember pass: the body and the
// position in it.
type memberScan struct {
	b []byte
	i int
}

func (s *memberScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// value reads one JSON value at depth and answers as repeatedMember does.
func (s *memberScan) value(depth int) (string, bool) {
	s.ws()
	if s.i >= len(s.b) || depth > maxScannedDepth {
		return "", false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(depth)
	case c == '[':
		return s.array(depth)
	case c == '"':
		_, _, ok := s.str()
		return "", ok
	case c == 't':
		return "", s.literal("true")
	case c == 'f':
		return "", s.literal("false")
	case c == 'n':
		return "", s.literal("null")
	default:
		return "", s.number()
	}
}

func (s *memberScan) object(depth int) (string, bool) {
	s.i++                             // {
	var names [maxScannedNames][2]int // offsets of the names read so far
	n := 0
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return "", true
	}
	for {
		s.ws()
		start, end, ok := s.str()
		if !ok || n == maxScannedNames {
			return "", false
		}
		name := s.b[start:end]
		if bytes.IndexByte(name, '\\') >= 0 || !utf8.Valid(name) {
			return "", false
		}
		for _, prev := range names[:n] {
			if bytes.EqualFold(s.b[prev[0]:prev[1]], name) {
				return string(name), true
			}
		}
		names[n] = [2]int{start, end}
		n++
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return "", false
		}
		s.i++
		if dup, ok := s.value(depth + 1); dup != "" || !ok {
			return dup, ok
		}
		if more, ok := s.next('}'); !more {
			return "", ok
		}
	}
}

func (s *memberScan) array(depth int) (string, bool) {
	s.i++ // [
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return "", true
	}
	for {
		if dup, ok := s.value(depth + 1); dup != "" || !ok {
			return dup, ok
		}
		if more, ok := s.next(']'); !more {
			return "", ok
		}
	}
}

// next reads what follows a member or an element: a comma (more, ok),
// closer (the object or array ends: ok), or anything else (not ok).
func (s *memberScan) next(closer byte) (more, ok bool) {
	s.ws()
	switch {
	case s.i >= len(s.b):
		return false, false
	case s.b[s.i] == ',':
		s.i++
		return true, true
	case s.b[s.i] == closer:
		s.i++
		return false, true
	}
	return false, false
}

// str reads a string and answers the offsets of its content, between the
// quotes, as written (escapes not decoded).
func (s *memberScan) str() (start, end int, ok bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return 0, 0, false
	}
	s.i++
	start = s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			end = s.i
			s.i++
			return start, end, true
		case c < 0x20:
			return 0, 0, false
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return 0, 0, false
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) {
					return 0, 0, false
				}
				for _, h := range s.b[s.i+2 : s.i+6] {
					if !isHex(h) {
						return 0, 0, false
					}
				}
				s.i += 6
			default:
				return 0, 0, false
			}
		default:
			s.i++
		}
	}
	return 0, 0, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func (s *memberScan) literal(word string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return false
	}
	s.i += len(word)
	return s.delimited()
}

// number reads a number as JSON spells it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *memberScan) number() bool {
	digits := func() int {
		n := 0
		for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case digits() == 0:
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return s.delimited()
}

// delimited says whether a scalar just read ends where JSON lets it: at the
// end of the body, white space, or the punctuation after a value. "truex"
// and "01" are not numbers or literals followed by something else.
func (s *memberScan) delimited() bool {
	if s.i >= len(s.b) {
		return true
	}
	switch s.b[s.i] {
	case ' ', '\t', '\r', '\n', ',', ']', '}':
		return true
	}
	return false
}
