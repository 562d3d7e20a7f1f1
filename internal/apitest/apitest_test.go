package apitest_test

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/apitest"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestStartServesTheWholeAPI(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	for _, path := range []string{"/readyz", "/openapi.yaml", "/docs"} {
		resp, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d, want 200", path, resp.StatusCode)
		}
	}
	req, err := http.NewRequest("POST", s.URL+"/payments", strings.NewReader(
		`{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"inv-1","paymentMethod":"pm_card_visa"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Secret)
	req.Header.Set("Idempotency-Key", "k-1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("POST /payments: %d, want 201", resp.StatusCode)
	}
	id := strings.TrimPrefix(resp.Header.Get("Location"), "/payments/")
	if c := s.Charges(id); len(c) != 1 || c[0].RequestCount != 1 {
		t.Errorf("charges of %s: %+v, want one, requested once", id, c)
	}
}
