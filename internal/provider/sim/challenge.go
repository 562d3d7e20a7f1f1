package sim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// This file is customer authentication (3-D Secure). A charge made with a
// method whose Behaviour has Authenticate answers status "requires_action"
// with "nextActionUrl", this simulator's challenge page:
//
//	GET /challenge/{id}   a plain HTML form: Approve, Fail
//	POST /challenge/{id}  action=approve or action=fail
//
// Approve makes the charge succeed (or, made with captureMethod manual,
// authorized: requires_capture), unless its method's AuthenticationFails;
// Fail, or such a method, declines it (authentication_failed). Only a
// charge still requires_action changes: a choice made twice, or after the
// charge was voided (POST /v1/voids cancels a charge that waits), changes
// nothing. After the choice the simulator announces the charge as it
// stands to the webhook target, if one is set (SetWebhook), as Stripe
// would: a payment_intent event, signed with Stripe's scheme; then it
// sends the customer to the charge's returnUrl (303), or, without one,
// answers a page saying what became of the charge. Lookups report the
// charge as it now stands.

// WebhookTarget is where the simulator announces what the customer chose
// on a challenge page: a Stripe-shaped event (payment_intent.succeeded,
// payment_intent.amount_capturable_updated, payment_intent.payment_failed)
// POSTed to URL with a Stripe-Signature made with Secret (whsec_...).
// Clock dates the signatures; nil: the simulator's clock. (A receiver on
// another clock, such as a test's fake one, is given that clock.)
type WebhookTarget struct {
	URL    string
	Secret string
	Clock  clock.Clock
}

// SetWebhook sets where the customers' choices are announced; a zero
// target announces nothing.
func (s *Simulator) SetWebhook(t WebhookTarget) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.webhook = t
}

// webhookTimeout bounds one announcement.
const webhookTimeout = 10 * time.Second

// baseURL is the simulator's URL as the request r reached it: the
// challenge page is served where the charge was made.
func (s *Simulator) baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

var challengePage = template.Must(template.New("challenge").Parse(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Authenticate your payment</title></head>
<body>
<h1>Authenticate your payment</h1>
<p>The provider simulator asks you to authenticate a payment of <strong>{{.Amount}} {{.Currency}}</strong> ({{.ID}}).</p>
{{if .Waiting}}<form method="post">
<button type="submit" name="action" value="approve" id="approve">Approve</button>
<button type="submit" name="action" value="fail" id="fail">Fail</button>
</form>{{else}}<p id="status">This payment is {{.Status}}: there is nothing left to authenticate.</p>{{end}}
</body>
</html>
`))

// handleChallengePage serves the challenge page of a charge.
func (s *Simulator) handleChallengePage(w http.ResponseWriter, r *http.Request) {
	c, ok := s.chargeSnapshot(r.PathValue("id"))
	if !ok {
		http.Error(w, "no charge has this id", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = challengePage.Execute(w, struct {
		ChargeRecord
		Waiting bool
	}{c, c.Status == provider.StatusRequiresAction})
}

// chargeSnapshot is a copy of the charge with id, if the simulator holds it.
func (s *Simulator) chargeSnapshot(id string) (ChargeRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.chargeByID[id]
	if !ok {
		return ChargeRecord{}, false
	}
	return *c, true
}

// handleChallenge takes the customer's choice, announces the charge, and
// sends the customer back.
func (s *Simulator) handleChallenge(w http.ResponseWriter, r *http.Request) {
	action := r.PostFormValue("action")
	if action != "approve" && action != "fail" {
		http.Error(w, "action must be approve or fail", http.StatusBadRequest)
		return
	}
	c, changed, ok := s.decide(r.PathValue("id"), action == "approve")
	if !ok {
		http.Error(w, "no charge has this id", http.StatusNotFound)
		return
	}
	log := s.log.With(c.logAttrs()...)
	if changed {
		log.Info("sim: the customer chose on the challenge page", "action", action)
		if err := s.announce(r.Context(), c); err != nil {
			// The provider's webhook may be lost: the customer's return
			// and the service's reconciler still find the outcome.
			log.Warn("sim: the webhook of the customer's choice was not delivered", "error", err)
		}
	}
	if c.ReturnURL == "" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintf(w, "Charge %s is %s.\n", c.ID, c.Status)
		return
	}
	http.Redirect(w, r, c.ReturnURL, http.StatusSeeOther)
}

// decide applies the customer's choice to the charge with id, if it still
// waits for one, and returns the charge as it then stands, and whether it
// changed.
func (s *Simulator) decide(id string, approve bool) (ChargeRecord, bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.chargeByID[id]
	if !ok {
		return ChargeRecord{}, false, false
	}
	if c.Status != provider.StatusRequiresAction {
		return *c, false, true
	}
	switch {
	case !approve || s.behaviour(c.PaymentMethod).AuthenticationFails:
		c.Status, c.DeclineCode = provider.StatusDeclined, DeclineAuthenticationFailed
	case c.CaptureMethod == CaptureManual:
		c.Status = provider.StatusAuthorized
	default:
		c.Status, c.AmountCapturedMinor = provider.StatusSucceeded, c.AmountMinor
		c.AmountCaptured = s.rules.Format(c.AmountCapturedMinor, c.Currency)
	}
	return *c, true, true
}

// stripeEventTypes are the Stripe event types of a charge's statuses after
// a challenge.
var stripeEventTypes = map[provider.Status]string{
	provider.StatusSucceeded:  "payment_intent.succeeded",
	provider.StatusAuthorized: "payment_intent.amount_capturable_updated",
	provider.StatusDeclined:   "payment_intent.payment_failed",
	provider.StatusCanceled:   "payment_intent.canceled",
}

// announce sends c to the webhook target as a signed Stripe event.
func (s *Simulator) announce(ctx context.Context, c ChargeRecord) error {
	s.mu.Lock()
	t := s.webhook
	s.mu.Unlock()
	if t.URL == "" {
		return nil
	}
	clk := t.Clock
	if clk == nil {
		clk = s.clock
	}
	now := clk.Now()
	body, err := json.Marshal(map[string]any{
		"id": newID("evt_"), "object": "event", "type": stripeEventTypes[c.Status], "created": now.Unix(),
		"data": map[string]any{"object": map[string]any{
			"id": c.ID, "object": "payment_intent", "status": string(c.Status),
			"metadata": map[string]string{"payment_id": c.PaymentID, "idempotency_key": c.IdempotencyKey},
		}},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), webhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", StripeSignature(body, t.Secret, now))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the webhook target answered %s", resp.Status)
	}
	return nil
}

// StripeSignature is the Stripe-Signature header of payload signed with
// secret at t: t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.payload">.
func StripeSignature(payload []byte, secret string, t time.Time) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%d.", t.Unix())
	mac.Write(payload)
	return fmt.Sprintf("t=%d,v1=%s", t.Unix(), hex.EncodeToString(mac.Sum(nil)))
}
