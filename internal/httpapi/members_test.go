package httpapi

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// The fast path answers what the token reader answers, for every body it
// answers at all: random JSON with names that repeat in every case (and in
// the runes that fold to ASCII), and the same bodies cut and corrupted.
func TestTheFastPathAgreesWithTheTokenReader(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 2026))
	answered := 0
	const bodies = 20000
	for i := range bodies {
		var b strings.Builder
		randomValue(rng, &b, 0)
		body := []byte(b.String())
		if i%2 == 1 {
			body = corrupt(rng, body)
		}
		want := repeatedMemberByTokens(body)
		got, ok := repeatedMember(body)
		if !ok {
			continue
		}
		answered++
		if got != want {
			t.Fatalf("body %s: fast path %q, token reader %q", body, got, want)
		}
	}
	// Most bodies must take the fast path, or it would be tested on none.
	if answered < bodies/3 {
		t.Fatalf("the fast path answered %d of %d bodies", answered, bodies)
	}
}

// A client's command takes the fast path: no token is read for it.
func TestACommandTakesTheFastPath(t *testing.T) {
	for _, body := range []string{
		`{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"r-1","paymentMethod":"pm_card_visa"}`,
		`{"amount":"1.00","reason":"requested_by_customer","metadata":{"order":"42","tags":["a","b"]}}`,
		" {\n\t\"amount\" : 12.5e-3 , \"x\": [true, false, null, -0, {\"a\": {}}]}\n",
	} {
		if name, ok := repeatedMember([]byte(body)); !ok || name != "" {
			t.Errorf("%s: answered %q, ok %v; want \"\", true", body, name, ok)
		}
	}
	for body, want := range map[string]string{
		`{"amount":"1.00","AMOUNT":"9.00"}`:      "AMOUNT",
		`{"a":{"b":1,"c":2,"B":3}}`:              "B",
		"[{\"k\":1},{\"k\":1,\"\u212a\":2}]":     "\u212a", // KELVIN SIGN folds to k
		`{"ſ":1,"S":2}`:                          "S",      // LATIN SMALL LETTER LONG S folds to s
		`{"a":1,"b":[1,2,{"a":1}],"c":3,"b":{}}`: "b",
	} {
		if name, ok := repeatedMember([]byte(body)); !ok || name != want {
			t.Errorf("%s: answered %q, ok %v; want %q, true", body, name, ok, want)
		}
	}
}

func FuzzRepeatedMember(f *testing.F) {
	for _, s := range []string{`{"a":1e999,"a":2}`, `{"a":1,"A":2}`, `{"a\u0041":1,"aa":2}`, `[1,{"x":[{"y":1,"Y":2}]}]`, `{"a":01}`, `{"a":tru}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if got, ok := repeatedMember(body); ok {
			if want := repeatedMemberByTokens(body); got != want {
				t.Fatalf("body %q: fast path %q, token reader %q", body, got, want)
			}
		}
	})
}

var randomNames = []string{"a", "A", "b", "B", "amount", "AMOUNT", "Amount", "k", "K", "\u212a", "s", "S", "ſ", `a\u0062`, "ab", "é", "É"}

func randomValue(rng *rand.Rand, b *strings.Builder, depth int) {
	kind := rng.IntN(8)
	if depth > 4 {
		kind = 3 + rng.IntN(5)
	}
	switch kind {
	case 0, 1:
		b.WriteString("{")
		for i := range rng.IntN(5) {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"` + randomNames[rng.IntN(len(randomNames))] + `"` + []string{":", " : ", ":\n"}[rng.IntN(3)])
			randomValue(rng, b, depth+1)
		}
		b.WriteString("}")
	case 2:
		b.WriteString("[")
		for i := range rng.IntN(4) {
			if i > 0 {
				b.WriteString(", ")
			}
			randomValue(rng, b, depth+1)
		}
		b.WriteString("]")
	case 3:
		b.WriteString([]string{`"x"`, `"\"{"`, `"\\"`, `"\u00e9"`, `""`}[rng.IntN(5)])
	case 4:
		b.WriteString([]string{"0", "-1", "12.50", "1e9", "-0.5E-3", "7", "1e999", "-1e400", strings.Repeat("9", 400)}[rng.IntN(9)])
	default:
		b.WriteString([]string{"true", "false", "null"}[rng.IntN(3)])
	}
}

// corrupt breaks body the ways a client or an attacker might: cut short, a
// byte dropped, or punctuation put in.
func corrupt(rng *rand.Rand, body []byte) []byte {
	if len(body) == 0 {
		return body
	}
	at := rng.IntN(len(body))
	switch rng.IntN(3) {
	case 0:
		return body[:at]
	case 1:
		return append(body[:at:at], body[at+1:]...)
	default:
		out := append([]byte{}, body[:at]...)
		const punctuation = `{}[]:,"\0x-. `
		out = append(out, punctuation[rng.IntN(len(punctuation))])
		return append(out, body[at:]...)
	}
}
