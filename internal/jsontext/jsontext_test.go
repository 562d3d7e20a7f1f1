package jsontext_test

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/jsontext"
)

// AppendString writes what json.Marshal writes, for plain text and for
// every kind of byte encoding/json escapes or replaces.
func TestAppendStringWritesWhatMarshalWrites(t *testing.T) {
	cases := []string{"", "acc_1", "pm_card_visa", `a"b\c`, "<script>&</script>", "tab\there\n", "\x00\x1f\x7f",
		"é ü 💳", "\u2028\u2029", "\xff\xfe invalid", "EUR"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		want, _ := json.Marshal(s)
		if got := jsontext.AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("AppendString(%q) = %s, want x%s", s, got, want)
		}
	}
}

// Array writes what json.Marshal writes of the same []any: the canonical
// form every operation's fingerprint hashes, stored with its keys.
func TestArrayWritesWhatMarshalWrites(t *testing.T) {
	type named string
	rng := rand.New(rand.NewPCG(3, 4))
	texts := []string{"", "create_payment", `q"u\o<t>e&`, "é 💳 \u2028", "\xff", "EUR"}
	for i := range 3000 {
		parts := []any{} // as the callers' literals: never nil
		for range rng.IntN(8) {
			switch rng.IntN(4) {
			case 0, 1:
				parts = append(parts, texts[rng.IntN(len(texts))])
			case 2:
				parts = append(parts, rng.Int64N(1<<62)-1<<61)
			default:
				parts = append(parts, []any{named("x"), 7, true, nil, 1.5}[i%5])
			}
		}
		want, err := json.Marshal(parts)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsontext.Array(parts...); string(got) != string(want) {
			t.Fatalf("Array(%#v) = %s, want %s", parts, got, want)
		}
	}
}

func TestAppendStringMapWritesWhatMarshalWrites(t *testing.T) {
	t.Parallel()
	for _, m := range []map[string]string{nil, {}, {"Location": "/payments/pay_1", "Content-Type": "application/json", "Retry-After": "1"},
		{"<a>": "&", "é": "\xff", "b": "\n"}} {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsontext.AppendStringMap(nil, m); string(got) != string(want) {
			t.Errorf("AppendStringMap(%v) = %s, want %s", m, got, want)
		}
	}
}

func TestMarshalUsesAnAppender(t *testing.T) {
	t.Parallel()
	got, err := jsontext.Marshal(appender{})
	if err != nil || string(got) != `{"by":"hand"}` {
		t.Errorf("Marshal(appender) = %s, %v", got, err)
	}
	got, err = jsontext.Marshal(map[string]int{"a": 1})
	if err != nil || string(got) != `{"a":1}` {
		t.Errorf("Marshal(map) = %s, %v", got, err)
	}
}

type appender struct{}

func (appender) AppendJSON(dst []byte) []byte { return append(dst, `{"by":"hand"}`...) }

func (appender) MarshalJSON() ([]byte, error) { return []byte(`{"by":"reflection"}`), nil }
