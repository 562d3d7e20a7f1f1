package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/proctest"
)

// The offline Stripe demo (make stripe-demo, dev/stripe-demo.sh): the
// Stripe adapter against stripe-mock with the project's fixtures answers a
// pm_card_visa payment 201 SUCCEEDED and a refund of it 201 SUCCEEDED (with
// stripe-mock's own fixtures every payment is declined), and a webhook
// signed as Stripe signs is accepted.
func TestStripeDemoWithTheProjectsFixtures(t *testing.T) {
	mock := stripeMockBin(t)
	root, _ := filepath.Abs("../..")
	cmd := exec.Command(mock, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0",
		"-fixtures", filepath.Join(root, "dev", "stripe-mock", "fixtures.json"))
	out := proctest.NewLineWatcher()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	mockAddr, _ := out.Await(t, regexp.MustCompile(`Listening for HTTP at address: (\S+)`), 30*time.Second)

	const secret = "whsec_stripe_demo_test"
	env := map[string]string{
		"DATABASE_URL": pgtest.NewURL(t), "API_KEYS": "demo:sk_demo", "PROVIDER": "stripe",
		"STRIPE_API_KEY": "sk_test_123demo", "STRIPE_API_BASE": "http://" + mockAddr,
		"STRIPE_WEBHOOK_SECRET": secret, "LOG_LEVEL": "warn",
	}
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := proctest.NewLineWatcher(), proctest.NewLineWatcher()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-http-addr", "127.0.0.1:0"}, getenv(env), nil, stdout, stderr)
	}()
	t.Cleanup(func() { cancel(); <-done })
	base, _ := stdout.Await(t, proctest.ListeningRE, 60*time.Second)

	paid := call(t, "POST", base+"/payments", "sk_demo", "demo-1",
		`{"accountId":"acc_1","amount":"25.00","currency":"EUR","merchantReference":"inv-1","paymentMethod":"pm_card_visa"}`)
	if paid.status != http.StatusCreated || !strings.Contains(string(paid.body), `"status":"SUCCEEDED"`) {
		t.Fatalf("pay: %d %s\nlog:\n%s", paid.status, paid.body, drain(stderr))
	}
	id := regexp.MustCompile(`"paymentId":"(pay_[a-z0-9]+)"`).FindStringSubmatch(string(paid.body))[1]
	refunded := call(t, "POST", base+"/payments/"+id+"/refunds", "sk_demo", "demo-r1", `{"amount":"5.00"}`)
	if refunded.status != http.StatusCreated || !strings.Contains(string(refunded.body), `"status":"SUCCEEDED"`) {
		t.Fatalf("refund: %d %s", refunded.status, refunded.body)
	}

	event := fmt.Sprintf(`{"id":"evt_demo_1","object":"event","type":"payment_intent.succeeded","created":%d,`+
		`"data":{"object":{"id":"pi_x","object":"payment_intent","metadata":{"payment_id":%q,"idempotency_key":"paymentsapi:%s"}}}}`,
		time.Now().Unix(), id, id)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(event), Secret: secret, Timestamp: time.Now()})
	req, _ := http.NewRequest("POST", base+"/webhooks/stripe", strings.NewReader(string(signed.Payload)))
	req.Header.Set("Stripe-Signature", signed.Header)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("signed webhook: %s", resp.Status)
	}
}

// stripeMockBin finds stripe-mock ($STRIPE_MOCK_BIN, then bin/ at the
// repository root, which make test installs) or skips the test.
func stripeMockBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("STRIPE_MOCK_BIN"); p != "" {
		return p
	}
	p, _ := filepath.Abs("../../bin/stripe-mock")
	if _, err := os.Stat(p); err != nil {
		t.Skip("stripe-mock is not installed (make tools)")
	}
	return p
}

// drain returns the lines w holds now.
func drain(w *proctest.LineWatcher) string {
	var lines []string
	for {
		select {
		case l := <-w.Lines():
			lines = append(lines, l)
		default:
			return strings.Join(lines, "\n")
		}
	}
}
