package httpapitest_test

import (
	"encoding/json"
	"testing"
	"unicode"

	"github.com/paymentsapi/paymentsapi/internal/carddata"
	"github.com/paymentsapi/paymentsapi/internal/httpapi/httpapitest"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// FuzzTextRules sends any body through the command decoder into a
// generic object: whatever it accepts holds, in every string and every
// member name at every depth, no control or format character and no card
// number; and whatever it refuses as card data is answered without the
// body's digits. Seeds: testdata/fuzz/FuzzTextRules.
func FuzzTextRules(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		var v map[string]any
		w, _, ok := httpapitest.Send(body, &v)
		if !ok {
			var p problem.Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Code == "" || w.Code >= 500 {
				t.Fatalf("%q: refused with %d %s", body, w.Code, w.Body)
			}
			if p.Code == problem.CardDataRefused && carddata.Contains(w.Body.Bytes()) {
				t.Fatalf("%q: the refusal holds a card number: %s", body, w.Body)
			}
			return
		}
		var walk func(x any, path string)
		clean := func(s, path string) {
			if carddata.Contains(s) {
				t.Fatalf("%q: accepted a card number at %s: %q", body, path, s)
			}
			for _, r := range s {
				if unicode.In(r, unicode.Cc, unicode.Cf) {
					t.Fatalf("%q: accepted %U at %s: %q", body, r, path, s)
				}
			}
		}
		walk = func(x any, path string) {
			switch x := x.(type) {
			case string:
				clean(x, path)
			case []any:
				for _, e := range x {
					walk(e, path+"[]")
				}
			case map[string]any:
				for k, e := range x {
					clean(k, path+".*")
					walk(e, path+"."+k)
				}
			}
		}
		walk(v, "")
	})
}
