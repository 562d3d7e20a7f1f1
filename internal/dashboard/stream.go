package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/payments"
)

// The stream's timing. A stream is one page's subscription to Live: it
// runs no query of its own. It authenticates its session's secret again at
// most every apikeys.MaxCacheTTL, through the API's cached authenticator,
// before it sends anything, so that a revoked key's page stops learning
// within the API's bound; and it ends after streamLife, when the browser
// reconnects and the session is looked at again (a logout on another
// instance ends its pages so).
const (
	keepAlive  = 15 * time.Second
	streamLife = 10 * time.Minute
)

// stream serves GET /dashboard/live: server-sent events for one page. The
// query names what it shows: topic=payments (the first page of the
// tenant's payments, accountId optional), payment (paymentId) or overview.
func (s *server) stream(w http.ResponseWriter, r *http.Request) {
	tenant := tenantOf(r)
	q := r.URL.Query()
	topic, paymentID, account := q.Get("topic"), q.Get("paymentId"), q.Get("accountId")
	if topic != "overview" && tenant == "" || topic == "payment" && paymentID == "" {
		http.Error(w, "name the topic (payments, payment, overview), its payment and, for an operator, its tenant", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // a proxy must pass each event on at once
	rc := http.NewResponseController(w)
	sub := s.Live.subscribe(tenant)
	defer s.Live.unsubscribe(sub)

	ses := sessionOf(r)
	checked := s.Clock.Now()
	send := func(event, data string) bool {
		now := s.Clock.Now()
		if now.Sub(checked) >= apikeys.MaxCacheTTL {
			if _, err := s.gate.Recheck(r.Context(), ses.secret); err != nil {
				_ = write(rc, w, "ended", `{}`)
				return false
			}
			checked = now
		}
		return write(rc, w, event, data) == nil
	}
	if !send("hello", `{}`) {
		return
	}
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	end := time.NewTimer(streamLife)
	defer end.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.Live.stopped:
			return
		case <-end.C:
			return
		case <-ping.C:
			if !send("ping", `{}`) {
				return
			}
		case c := <-sub.ch:
			event, data, ok := s.eventFor(r, c, topic, paymentID, account)
			if sub.tookMiss() {
				event, data, ok = "refresh", `{}`, true
			}
			if ok && !send(event, data) {
				return
			}
		}
	}
}

// eventFor is what the page of topic is sent of c, if anything: a new or
// changed row of the payments' list, or word that its page changed.
func (s *server) eventFor(r *http.Request, c Change, topic, paymentID, account string) (event, data string, ok bool) {
	switch topic {
	case "overview":
		return "refresh", `{}`, true
	case "payment":
		return "refresh", `{}`, !c.Tick && c.PaymentID == paymentID
	case "payments":
		if c.Payment == nil || account != "" && c.Payment.AccountID != account {
			return "", "", false
		}
		row, err := s.row(r, *c.Payment)
		if err != nil {
			s.Log.WarnContext(r.Context(), "dashboard: could not render a payment's row", "error", err)
			return "", "", false
		}
		b, _ := json.Marshal(map[string]string{"id": c.PaymentID, "row": row})
		return "payment", string(b), true
	}
	return "", "", false
}

// row renders a payment's row of the list, as the list page does.
func (s *server) row(r *http.Request, p payments.View) (string, error) {
	var b strings.Builder
	v := newView(r, "", "", nil)
	err := s.pages["payments.html"].ExecuteTemplate(&b, "payment-row", struct {
		P payments.View
		V view
	}{p, v})
	return b.String(), err
}

// write sends one event, its data on one line, and flushes it; each write
// moves the connection's deadline on, so that the server's WriteTimeout
// does not cut a stream that is alive.
func write(rc *http.ResponseController, w http.ResponseWriter, event, data string) error {
	if err := rc.SetWriteDeadline(time.Now().Add(keepAlive * 2)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
		return err
	}
	return rc.Flush()
}
