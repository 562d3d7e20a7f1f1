package payments

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

// A payment's view and its events' payload write, by hand, what
// json.Marshal writes: every member in order, the omitted ones omitted,
// strings escaped as it escapes them (HTML-safe, invalid UTF-8 replaced),
// times in their own location.
func TestAViewWritesWhatMarshalWrites(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(22, 6))
	pieces := []string{"", "a", "inv-42", "é", "<b>&</b>", `"q"\`, "\n\t\x01", "\xff\xfe", "\u2028\u2029", "💳", "pay_5k3x"}
	str := func() string {
		var s string
		for range rng.IntN(4) {
			s += pieces[rng.IntN(len(pieces))]
		}
		return s
	}
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+1800), time.FixedZone("y", -7*3600)}
	at := func() time.Time {
		return time.Unix(rng.Int64N(4_000_000_000), rng.Int64N(1e9)*int64(rng.IntN(2))).In(zones[rng.IntN(len(zones))])
	}
	for i := range 2000 {
		v := View{
			PaymentID: str(), Status: Status(str()), AccountID: str(), Amount: str(), Currency: str(),
			MerchantReference: str(), PaymentMethod: str(), Channel: str(), Description: str(), RefundedAmount: str(),
			CreatedAt: at(), UpdatedAt: at(), ProviderReference: str(), DeclineCode: str(), CaptureMethod: str(),
			CapturableAmount: str(), CapturedAmount: str(),
		}
		if rng.IntN(2) == 0 {
			expires := at()
			v.AuthorizationExpiresAt = &expires
		}
		for _, value := range []interface{ AppendJSON([]byte) []byte }{v, eventPayload{v, str()}} {
			want, err := json.Marshal(value)
			if err != nil {
				t.Fatal(err)
			}
			if got := value.AppendJSON(nil); string(got) != string(want) {
				t.Fatalf("view %d:\n got %s\nwant %s", i, got, want)
			}
		}
	}
}
