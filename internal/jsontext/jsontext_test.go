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
