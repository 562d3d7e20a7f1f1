package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/internal/backoff"
	"github.com/paymentsapi/paymentsapi/internal/endpoints"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

// message is the body of a delivery (Standard Webhooks' payload shape).
type message struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"` // when the event happened
	Data      json.RawMessage `json:"data"`
}

// attempt is what one send came to.
type attempt struct {
	at         time.Time // by the worker's clock, when it began (the webhook-timestamp)
	statusCode int       // 0: no HTTP answer
	duration   time.Duration
	err        string // why it failed; "" when delivered
	delivered  bool   // a 2xx
	gone       bool   // a 410 Gone: the endpoint asks for no more
}

// keptBytes is how much of an answer's body, or of an error, an attempt keeps
// for the delivery log: enough to tell a merchant what went wrong.
const keptBytes = 512

// userAgent names the sender to receivers.
const userAgent = "paymentsapi-webhooks/1"

// send sends j's message once and books the attempt. Traced, the send is a
// span under the trace context of j's event (its publish), and the
// receiver gets its traceparent.
func (w *Worker) send(ctx context.Context, j job) {
	if w.tracer == nil {
		w.book(ctx, j, w.attempt(ctx, j))
		return
	}
	ctx, span := w.tracer.Start(tracing.WithTraceParent(ctx, j.traceparent), "webhook send "+j.eventType,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("paymentsapi.event.id", j.eventID), attribute.String("paymentsapi.event.type", j.eventType),
			attribute.String("paymentsapi.webhook.endpoint_id", j.endpointID), attribute.Int("paymentsapi.webhook.attempt", j.attempt)))
	defer span.End()
	a := w.attempt(ctx, j)
	if a.statusCode != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", a.statusCode))
	}
	if !a.delivered {
		span.SetStatus(codes.Error, a.err)
	}
	w.book(ctx, j, a)
}

// attempt POSTs j's message, signed now with j's secrets, through the
// client that checks every connection against the destination policy.
func (w *Worker) attempt(ctx context.Context, j job) attempt {
	a := attempt{at: w.clock.Now()}
	body, err := json.Marshal(message{Type: j.eventType, Timestamp: j.occurredAt, Data: j.data})
	if err != nil {
		a.err = kept("the message cannot be encoded: " + err.Error())
		return a
	}
	secrets, err := w.secrets(ctx, j, a.at)
	if err != nil {
		a.err = kept("the message cannot be signed: " + err.Error())
		return a
	}
	headers, err := outbound.Sign(j.eventID, a.at, body, secrets...)
	if err != nil {
		a.err = kept("the message cannot be signed: " + err.Error())
		return a
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.url, bytes.NewReader(body))
	if err != nil {
		a.err = kept(err.Error())
		return a
	}
	for k, v := range headers {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if w.tracer != nil {
		tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	// The address the request went to, to tell a private one.
	var remote net.Addr
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { remote = info.Conn.RemoteAddr() },
	}))
	// A latency, measured on the monotonic clock: not a time of the
	// service's, which all come from w.clock.
	start := time.Now()
	resp, err := w.client.Do(req)
	if err != nil {
		a.duration, a.err = time.Since(start), kept(err.Error())
		var timeout interface{ Timeout() bool }
		if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &timeout) && timeout.Timeout() {
			a.err = "timeout after " + w.cfg.Timeout.String()
		}
		return a
	}
	answer, _, _ := outbound.ReadCapped(resp, keptBytes)
	a.duration, a.statusCode = time.Since(start), resp.StatusCode
	switch {
	case outbound.Succeeded(resp.StatusCode):
		a.delivered = true
	case resp.StatusCode == http.StatusGone:
		a.gone = true
		a.err = "410 Gone: the endpoint asks for no more messages"
	default:
		a.err = fmt.Sprintf("the endpoint answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
		if s := kept(string(answer)); s != "" && w.keepsAnswerFrom(remote) {
			a.err += ": " + s
		}
	}
	return a
}

// keepsAnswerFrom reports whether an attempt keeps the body of an answer
// from addr: always from a public address; from a private one (allowed by
// WEBHOOK_ALLOW_PRIVATE) only with KeepPrivateAnswers (dev mode), so that
// the delivery log cannot read a tenant what a service inside the network
// answers.
func (w *Worker) keepsAnswerFrom(addr net.Addr) bool {
	if w.cfg.KeepPrivateAnswers {
		return true
	}
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(tcp.IP)
	return ok && outbound.IsPublic(ip)
}

// secrets are the secrets that sign j's message at now: opened from the
// claim's sealed ones, or, for an endpoint the release before migration
// 00043 wrote in the clear, read (and sealed) by package endpoints.
func (w *Worker) secrets(ctx context.Context, j job, now time.Time) ([]string, error) {
	if j.sealed == "" {
		return endpoints.Secrets(ctx, w.db, w.box, j.endpointID, now)
	}
	current, err := endpoints.OpenSecret(w.box, j.endpointID, j.sealed)
	if err != nil {
		return nil, err
	}
	out := []string{current}
	if j.previousSealed != "" {
		previous, err := endpoints.OpenSecret(w.box, j.endpointID, j.previousSealed)
		if err != nil {
			return nil, err
		}
		out = append(out, previous)
	}
	return out, nil
}

// kept is s as an attempt keeps it: valid UTF-8 without NUL (a text
// column's), at most keptBytes.
func kept(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", ""))
	if len(s) > keptBytes {
		s = strings.ToValidUTF8(s[:keptBytes], "") // a rune cut in two is dropped
	}
	return s
}

// finishSQL books the attempt the claim with token $2 made of message $1, if
// the message still carries that token and is pending, in one statement:
//   - the message: delivered ($3), failed (a 410, $4, or the schedule
//     $6 run out: the n-th wait is the n-th element, in seconds), or
//     pending again, due after the wait for its attempt;
//   - the attempt's row ($7 to $10), with when the next one is due;
//   - the endpoint's health: a success clears failing_since (written only
//     when it changes, or once a minute for last_success_at, so that a busy
//     endpoint's row is not written by every delivery); a failure starts
//     failing_since, and disables the endpoint on a 410 or once it has
//     failed for $11 seconds, with reason $12 or $13.
//
// It returns the message's status and next due time, and the endpoint's
// status if this statement changed it (” otherwise); no row when the
// attempt was not booked.
const finishSQL = `
		WITH m AS (
		    UPDATE webhook_messages m
		    SET status = CASE WHEN $3::boolean THEN 'delivered'
		                      WHEN $4::boolean OR m.attempts > cardinality($6::float8[]) THEN 'failed'
		                      ELSE 'pending' END,
		        next_attempt_at = CASE WHEN $3::boolean OR $4::boolean OR m.attempts > cardinality($6::float8[]) THEN m.next_attempt_at
		                               ELSE $5::timestamptz + make_interval(secs => ($6::float8[])[greatest(m.attempts, 1)]) END,
		        claimed_until = NULL,
		        finished_at = CASE WHEN $3::boolean OR $4::boolean OR m.attempts > cardinality($6::float8[]) THEN $5::timestamptz END
		    WHERE m.id = $1 AND m.token = $2 AND m.status = 'pending'
		    RETURNING m.endpoint_id, m.status, m.next_attempt_at
		), attempt AS (
		    INSERT INTO webhook_attempts (message_id, token, attempted_at, status_code, duration_ms, error, next_attempt_at)
		    SELECT $1, $2, $7, $8, $9, $10, CASE WHEN m.status = 'pending' THEN m.next_attempt_at END FROM m
		), health AS (
		    UPDATE webhook_endpoints w
		    SET last_success_at = CASE WHEN $3::boolean THEN $5::timestamptz ELSE w.last_success_at END,
		        failing_since = CASE WHEN $3::boolean THEN NULL ELSE coalesce(w.failing_since, $5::timestamptz) END,
		        status = CASE WHEN NOT $3::boolean AND ($4::boolean OR w.failing_since <= $5::timestamptz - make_interval(secs => $11))
		                      THEN 'disabled' ELSE w.status END,
		        disabled_at = CASE WHEN NOT $3::boolean AND ($4::boolean OR w.failing_since <= $5::timestamptz - make_interval(secs => $11))
		                           THEN $5::timestamptz ELSE w.disabled_at END,
		        disabled_reason = CASE WHEN NOT $3::boolean AND $4::boolean THEN $12::text
		                               WHEN NOT $3::boolean AND w.failing_since <= $5::timestamptz - make_interval(secs => $11) THEN $13::text
		                               ELSE w.disabled_reason END
		    FROM m
		    WHERE w.id = m.endpoint_id AND w.status = 'enabled' AND w.deleted_at IS NULL
		      AND CASE WHEN $3::boolean THEN w.failing_since IS NOT NULL OR w.last_success_at IS NULL
		                                   OR w.last_success_at <= $5::timestamptz - interval '1 minute'
		               ELSE w.failing_since IS NULL OR $4::boolean OR w.failing_since <= $5::timestamptz - make_interval(secs => $11)
		          END
		    RETURNING w.status
		)
		SELECT m.status, m.next_attempt_at, coalesce((SELECT status FROM health), '') FROM m`

// abandonSQL abandons the pending messages of endpoint $1 once it is
// disabled: nothing more is sent to it.
const abandonSQL = `
		UPDATE webhook_messages SET status = 'abandoned', claimed_until = NULL, finished_at = $2
		WHERE endpoint_id = $1 AND status = 'pending'`

// bookTimeout bounds the writes that book an attempt; they run even while
// shutting down.
const bookTimeout = 5 * time.Second

// book records a, j's attempt, if j's claim still holds the message.
func (w *Worker) book(ctx context.Context, j job, a attempt) {
	ctx, cancel := context.WithTimeout(ctx, bookTimeout)
	defer cancel()
	now := w.clock.Now()
	var (
		status, endpointStatus string
		next                   time.Time
		code, errText          any
	)
	if a.statusCode != 0 {
		code = a.statusCode
	}
	if a.err != "" {
		errText = a.err
	}
	err := w.db.QueryRow(ctx, finishSQL, j.messageID, j.token, a.delivered, a.gone, now, w.waits(), a.at, code,
		a.duration.Milliseconds(), errText, w.cfg.DisableAfter.Seconds(),
		"the endpoint answered 410 Gone", "no delivery succeeded for "+days(w.cfg.DisableAfter)).
		Scan(&status, &next, &endpointStatus)
	log := w.log.With("event_id", j.eventID, "endpoint_id", j.endpointID, "attempt", j.attempt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Claimed again after this claim's lease ran out, or abandoned:
		// the newer claim's attempt is the one that counts.
		w.metrics.attempted("superseded", a.duration)
		log.WarnContext(ctx, "webhook attempt not booked: the message is no longer this claim's", "status_code", a.statusCode)
		return
	case err != nil:
		// The lease runs out and another claim sends the message again.
		log.ErrorContext(ctx, "could not book a webhook attempt; the message will be sent again", "error", err)
		return
	}
	outcome := status // delivered or failed
	switch {
	case a.gone:
		outcome = "gone"
	case status == "pending":
		outcome = "retrying"
	}
	w.metrics.attempted(outcome, a.duration)
	log.DebugContext(ctx, "webhook attempt", "outcome", outcome, "status_code", a.statusCode,
		"duration_ms", a.duration.Milliseconds(), "error", a.err)
	if status == "failed" {
		log.InfoContext(ctx, "webhook message failed: no attempt left", "error", a.err)
	}
	if endpointStatus == "disabled" {
		if _, err := w.db.Exec(ctx, abandonSQL, j.endpointID, now); err != nil {
			log.ErrorContext(ctx, "could not abandon a disabled endpoint's messages; the claim abandons each", "error", err)
		}
		log.InfoContext(ctx, "webhook endpoint disabled", "gone", a.gone, "error", a.err)
	}
}

// waits is the schedule in seconds, each wait lengthened by jitter: the
// backoff package's, over a tenth of it, so each is 5 to 10% longer than
// the schedule says and never shorter, and messages that failed together
// are not retried together.
func (w *Worker) waits() []float64 {
	out := make([]float64, len(w.cfg.Schedule))
	for i, d := range w.cfg.Schedule {
		out[i] = (d + backoff.Policy{Base: d / 10, Max: d / 10}.Delay(1)).Seconds()
	}
	return out
}

// days says d in days when it is whole days.
func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}
