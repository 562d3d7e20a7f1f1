package sim_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
)

// A listing's since must be an RFC 3339 time: anything else is a 400, never
// the whole list.
func TestListingsRefuseAMalformedSince(t *testing.T) {
	_, base := newServer(t, sim.Options{})
	for _, path := range []string{"/_sim/charges", "/_sim/refunds"} {
		resp, err := http.Get(base + path + "?since=" + url.QueryEscape("yesterday"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s?since=yesterday: %d, want 400", path, resp.StatusCode)
		}
	}
}
