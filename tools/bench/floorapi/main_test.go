package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// bannerWriter hands the first line written to it (the banner) to a channel.
type bannerWriter struct{ lines chan string }

func (w bannerWriter) Write(p []byte) (int, error) {
	select {
	case w.lines <- strings.TrimSpace(string(p)):
	default:
	}
	return len(p), nil
}

// The floor must keep doing what make bench asks of it on the current
// schema: a new payment is 201, created by the reference flow's three
// transactions (the payment completed, both events written unpublished, as
// tools/bench/pgbench/flow.sql writes them), and its retry is the stored answer,
// replayed.
func TestTheFloorServesTheBenchmarksRequests(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	simSrv, err := sim.Start(ctx, "127.0.0.1:0", sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = simSrv.Close() })
	dbURL := pgtest.NewURL(t)
	env := map[string]string{
		"DATABASE_URL": dbURL, "HTTP_ADDR": "127.0.0.1:0", "API_KEYS": "bench:sk_bench", "PROVIDER_URL": simSrv.URL(),
	}
	banner := bannerWriter{lines: make(chan string, 1)}
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, banner) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	var base string
	select {
	case line := <-banner.lines:
		var ok bool
		if base, ok = strings.CutPrefix(line, "paymentsapi is listening on "); !ok {
			t.Fatalf("banner %q", line)
		}
	case err := <-done:
		t.Fatalf("run ended before it listened: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no banner")
	}

	post := func() (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/payments", strings.NewReader(
			`{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"ref-1","paymentMethod":"pm_card_visa"}`))
		req.Header.Set("Authorization", "Bearer sk_bench")
		req.Header.Set("Idempotency-Key", "key-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	first, body := post()
	if first.StatusCode != http.StatusCreated || first.Header.Get("Idempotent-Replayed") != "" || !strings.HasPrefix(first.Header.Get("Location"), "/payments/pay_") {
		t.Fatalf("first: %d %v %s", first.StatusCode, first.Header, body)
	}
	again, replayed := post()
	if again.StatusCode != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(replayed, body) {
		t.Fatalf("retry: %d %v %s, want the first answer %s replayed", again.StatusCode, again.Header, replayed, body)
	}

	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var payments, completed, events, unpublished int
	if err := conn.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM payments), (SELECT count(*) FROM payments WHERE state = 'COMPLETED'),
		       (SELECT count(*) FROM outbox_events), (SELECT count(*) FROM outbox_events WHERE published_at IS NULL)`,
	).Scan(&payments, &completed, &events, &unpublished); err != nil {
		t.Fatal(err)
	}
	if payments != 1 || completed != 1 || events != 2 || unpublished != 2 {
		t.Errorf("%d payments (%d completed), %d events (%d unpublished); want 1 (1), 2 (2)", payments, completed, events, unpublished)
	}
}
