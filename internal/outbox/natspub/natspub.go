// Package natspub publishes outbox events to NATS JetStream, one message
// per event on the subject <prefix>.<EventType> (payments.events.PaymentSucceeded),
// with the event id as Nats-Msg-Id: the stream drops a repeat of an event
// within its duplicate window, and consumers deduplicate the rest by the
// same id. The message body is the event's JSON form (outbox.Event).
//
// NATS URLs may carry credentials (nats://user:password@host,
// nats://token@host): this package never prints one unredacted (see
// RedactURL).
package natspub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

// Defaults of StreamConfig.
const (
	DefaultStream          = "PAYMENTS_EVENTS"
	DefaultSubjectPrefix   = "payments.events"
	DefaultDuplicateWindow = 2 * time.Minute
)

// Headers set on every message besides Nats-Msg-Id.
const (
	HeaderEventType     = "Event-Type"
	HeaderAggregateType = "Aggregate-Type"
	HeaderAggregateID   = "Aggregate-Id"
)

// StreamConfig names the stream the events go to. Zero fields take their
// defaults.
type StreamConfig struct {
	// Name is the JetStream stream (default PAYMENTS_EVENTS).
	Name string
	// SubjectPrefix is the subjects' prefix (default payments.events); the
	// stream holds <prefix>.>.
	SubjectPrefix string
	// DuplicateWindow is how long the stream remembers message ids to drop
	// repeats (default 2m; the server's minimum is 100ms).
	DuplicateWindow time.Duration
	// MaxAge is how long the stream keeps messages (default 0: no limit).
	MaxAge time.Duration
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c StreamConfig) WithDefaults() StreamConfig {
	if c.Name == "" {
		c.Name = DefaultStream
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = DefaultSubjectPrefix
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	return c
}

// Subject is the subject of events of eventType under prefix.
func Subject(prefix, eventType string) string { return prefix + "." + eventType }

// EnsureStream returns the stream of cfg, creating it if it does not exist.
// An existing stream is used as it is: changing its configuration is an
// operator's decision, not a side effect of starting a process.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (jetstream.Stream, error) {
	cfg = cfg.WithDefaults()
	s, err := js.Stream(ctx, cfg.Name)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("look up stream %s: %w", cfg.Name, err)
	}
	s, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.Name,
		Description: "Payment events published from the paymentsapi transactional outbox.",
		Subjects:    []string{cfg.SubjectPrefix + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Duplicates:  cfg.DuplicateWindow,
		MaxAge:      cfg.MaxAge,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // another process was quicker
		s, err = js.Stream(ctx, cfg.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", cfg.Name, err)
	}
	return s, nil
}

// Message is the NATS message of e under prefix.
func Message(prefix string, e outbox.Event) (*nats.Msg, error) {
	data, err := outbox.AppendJSON(nil, e)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(Subject(prefix, e.Type))
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, e.ID)
	m.Header.Set(HeaderEventType, e.Type)
	m.Header.Set(HeaderAggregateType, e.AggregateType)
	m.Header.Set(HeaderAggregateID, e.AggregateID)
	if e.TraceParent != "" {
		// The consumers continue the trace of the event's publish.
		m.Header.Set(tracing.HeaderTraceParent, e.TraceParent)
	}
	return m, nil
}

// ErrMalformed is wrapped by Decode's errors: the message is not an event
// and never will be, however often it is redelivered.
var ErrMalformed = errors.New("malformed event message")

// Decode reads the event a message body carries and checks that it names
// an id (a UUID), a type and an aggregate.
func Decode(data []byte) (outbox.Event, error) {
	var e outbox.Event
	if err := json.Unmarshal(data, &e); err != nil {
		return outbox.Event{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch {
	case !ids.IsUUID(e.ID):
		return outbox.Event{}, fmt.Errorf("%w: eventId %q is not a UUID", ErrMalformed, e.ID)
	case e.Type == "" || strings.ContainsAny(e.Type, ". *>"):
		return outbox.Event{}, fmt.Errorf("%w: bad type %q", ErrMalformed, e.Type)
	case e.AggregateID == "":
		return outbox.Event{}, fmt.Errorf("%w: no aggregateId", ErrMalformed)
	}
	e.ID = strings.ToLower(e.ID)
	return e, nil
}

// Publisher is the outbox.Publisher for NATS JetStream. It creates the
// stream on first use (and again if it disappears), so that the API starts
// whether or not NATS is up: until it is, publishing fails and the relay
// backs off. Failures of the broker as a whole (see BrokerUnavailable) wrap
// outbox.ErrBrokerUnavailable, so that the relay pauses instead of counting
// them against the events; while the connection is down, Publish fails at
// once instead of waiting for its context. It is safe for concurrent use.
type Publisher struct {
	js  jetstream.JetStream
	cfg StreamConfig
	log *slog.Logger

	mu      sync.Mutex
	ensured bool
}

var _ outbox.BatchPublisher = (*Publisher)(nil)

// NewPublisher returns a Publisher to the stream of cfg.
func NewPublisher(js jetstream.JetStream, cfg StreamConfig, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Publisher{js: js, cfg: cfg.WithDefaults(), log: log}
}

// Publish publishes e and waits for the stream's acknowledgement. A repeat
// the stream dropped as a duplicate is a success.
func (p *Publisher) Publish(ctx context.Context, e outbox.Event) error {
	_, err := p.PublishAck(ctx, e)
	return err
}

// PublishAck is Publish that also returns the stream's acknowledgement, whose
// Duplicate field tells whether the stream dropped the message as a repeat.
func (p *Publisher) PublishAck(ctx context.Context, e outbox.Event) (*jetstream.PubAck, error) {
	if err := p.disconnected(e); err != nil {
		return nil, err
	}
	if err := p.ensure(ctx); err != nil {
		return nil, classify(err)
	}
	m, err := Message(p.cfg.SubjectPrefix, e)
	if err != nil {
		return nil, err
	}
	ack, err := p.js.PublishMsg(ctx, m, jetstream.WithExpectStream(p.cfg.Name))
	return ack, p.answered(ctx, e, m.Subject, ack, err)
}

// disconnected is the error of publishing e while the connection is not up
// (reconnecting, or closed): the request would only wait in the reconnect
// buffer until its context ends. Nil when connected.
func (p *Publisher) disconnected(e outbox.Event) error {
	if nc := p.js.Conn(); nc != nil && !nc.IsConnected() {
		return fmt.Errorf("publish event %s: %w: NATS connection %s", e.ID, outbox.ErrBrokerUnavailable, nc.Status())
	}
	return nil
}

// answered books the stream's answer to the publish of e to subject: an
// error, classified (and, if no stream answered, the stream is created
// again next time), or an acknowledgement, logged if it was a repeat.
func (p *Publisher) answered(ctx context.Context, e outbox.Event, subject string, ack *jetstream.PubAck, err error) error {
	if err != nil {
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound) {
			p.forget()
		}
		return classify(fmt.Errorf("publish event %s to %s: %w", e.ID, subject, err))
	}
	if ack.Duplicate {
		p.log.DebugContext(ctx, "stream dropped a repeated event", "event_id", e.ID, "stream", ack.Stream, "seq", ack.Sequence)
	}
	return nil
}

// DefaultBatchTimeout bounds a PublishBatch whose context has no deadline
// (the relay's always has one: its PublishTimeout), as JetStream bounds a
// single publish.
const DefaultBatchTimeout = 10 * time.Second

// PublishBatch publishes events without waiting for each acknowledgement in
// turn: every message is sent at once (JetStream's asynchronous publish),
// then the acknowledgements are awaited, in order, until ctx ends. So a
// relay's pass costs about one round trip to the broker instead of one per
// event. Each result has Publish's meaning. An event whose acknowledgement
// did not come before ctx ended, or that ctx's end kept from being sent,
// failed as the broker's fault (it may still be stored, and is then
// dropped as a repeat when published again), and so does one the client
// refused to send because too many acknowledgements are outstanding.
func (p *Publisher) PublishBatch(ctx context.Context, events []outbox.Event) []error {
	errs := make([]error, len(events))
	failAll := func(err func(e outbox.Event) error) []error {
		for i, e := range events {
			errs[i] = err(e)
		}
		return errs
	}
	if len(events) == 0 {
		return errs
	}
	if p.disconnected(events[0]) != nil {
		return failAll(p.disconnected)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultBatchTimeout)
		defer cancel()
	}
	if err := p.ensure(ctx); err != nil {
		return failAll(func(outbox.Event) error { return classify(err) })
	}
	acks := make([]jetstream.PubAckFuture, len(events))
	for i, e := range events {
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("publish event %s: not sent: %w: %w", e.ID, outbox.ErrBrokerUnavailable, err)
			continue
		}
		m, err := Message(p.cfg.SubjectPrefix, e)
		if err != nil {
			errs[i] = err
			continue
		}
		if acks[i], err = p.js.PublishMsgAsync(m, jetstream.WithExpectStream(p.cfg.Name)); err != nil {
			errs[i] = classify(fmt.Errorf("publish event %s to %s: %w", e.ID, m.Subject, err))
		}
	}
	for i, ack := range acks {
		if ack != nil {
			errs[i] = p.awaitAck(ctx, events[i], ack)
		}
	}
	return errs
}

// awaitAck waits for the stream's answer to the asynchronous publish of e.
// An answer that is there already counts, even once ctx has ended.
func (p *Publisher) awaitAck(ctx context.Context, e outbox.Event, ack jetstream.PubAckFuture) error {
	subject := ack.Msg().Subject
	select {
	case a := <-ack.Ok():
		return p.answered(ctx, e, subject, a, nil)
	case err := <-ack.Err():
		return p.answered(ctx, e, subject, nil, err)
	default:
	}
	select {
	case a := <-ack.Ok():
		return p.answered(ctx, e, subject, a, nil)
	case err := <-ack.Err():
		return p.answered(ctx, e, subject, nil, err)
	case <-ctx.Done():
		return fmt.Errorf("publish event %s: no acknowledgement: %w: %w", e.ID, outbox.ErrBrokerUnavailable, ctx.Err())
	}
}

func (p *Publisher) ensure(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ensured {
		return nil
	}
	if _, err := EnsureStream(ctx, p.js, p.cfg); err != nil {
		return err
	}
	p.ensured = true
	return nil
}

func (p *Publisher) forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ensured = false
}

// BrokerUnavailable reports whether err, an error of a JetStream publish or
// stream lookup, is a failure of the broker as a whole rather than of the
// message: a timeout (the broker did not answer in time, an asynchronous
// publish's acknowledgement included), no responders (no JetStream, or no
// stream, behind the subject), a connection that is down, closed or
// draining or whose outbound buffer is full, too many asynchronous
// publishes waiting for their acknowledgements, or a JetStream API error
// with status 503.
func BrokerUnavailable(err error) bool {
	if err == nil {
		return false
	}
	for _, target := range []error{
		outbox.ErrBrokerUnavailable,
		context.DeadlineExceeded, nats.ErrTimeout,
		nats.ErrNoResponders, jetstream.ErrNoStreamResponse,
		jetstream.ErrJetStreamNotEnabled, jetstream.ErrJetStreamNotEnabledForAccount,
		nats.ErrDisconnected, nats.ErrConnectionClosed, nats.ErrConnectionDraining,
		nats.ErrConnectionReconnecting, nats.ErrNoServers, nats.ErrStaleConnection,
		nats.ErrInvalidConnection, nats.ErrReconnectBufExceeded,
		jetstream.ErrAsyncPublishTimeout, jetstream.ErrTooManyStalledMsgs,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code == 503
}

// classify wraps outbox.ErrBrokerUnavailable into err if it is a failure of
// the broker as a whole.
func classify(err error) error {
	if BrokerUnavailable(err) && !errors.Is(err, outbox.ErrBrokerUnavailable) {
		return fmt.Errorf("%w: %w", outbox.ErrBrokerUnavailable, err)
	}
	return err
}

// redacted is what stands in for a credential in a redacted URL.
const redacted = "xxxxx"

// RedactURL returns the NATS server URL(s) in servers (comma-separated, as
// nats.Connect takes them) with their credentials replaced by xxxxx: the
// password of user:password (url.URL.Redacted), and a user with no password
// too, since that is how a token is given (nats://token@host). A server that
// does not parse as a URL has its whole user information replaced.
func RedactURL(servers string) string {
	parts := strings.Split(servers, ",")
	for i, s := range parts {
		parts[i] = redactOne(s)
	}
	return strings.Join(parts, ",")
}

func redactOne(s string) string {
	s = strings.TrimSpace(s)
	// nats.Connect takes host:port with no scheme too (as nats://).
	prefix := ""
	if !strings.Contains(s, "://") {
		prefix = "nats://"
	}
	if u, err := url.Parse(prefix + s); err == nil {
		if u.User == nil {
			return s
		}
		if _, hasPassword := u.User.Password(); !hasPassword {
			u.User = url.User(redacted)
			return strings.TrimPrefix(u.String(), prefix)
		}
		return strings.TrimPrefix(u.Redacted(), prefix)
	}
	// Not a URL: still hide whatever stands before the host.
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	}
	host := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		host = rest[:i]
	}
	at := strings.LastIndex(host, "@")
	if at < 0 {
		return s
	}
	if ok {
		scheme += "://"
	}
	return scheme + redacted + rest[at:]
}

// secrets returns the credentials written in servers, raw and as they may
// be quoted in an error message, longest first.
func secrets(servers string) []string {
	var out []string
	for _, s := range strings.Split(servers, ",") {
		s = strings.TrimSpace(s)
		_, rest, ok := strings.Cut(s, "://")
		if !ok {
			rest = s
		}
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			rest = rest[:i]
		}
		at := strings.LastIndex(rest, "@")
		if at <= 0 {
			continue
		}
		userinfo := rest[:at]
		cred := userinfo
		if _, pw, found := strings.Cut(userinfo, ":"); found {
			cred = pw
		}
		if cred == "" {
			continue
		}
		out = append(out, cred)
		if unescaped, err := url.PathUnescape(cred); err == nil && unescaped != cred {
			out = append(out, unescaped)
		}
		if q := fmt.Sprintf("%q", cred); q[1:len(q)-1] != cred {
			out = append(out, q[1:len(q)-1])
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// redactedError is an error whose message had the credentials of a NATS
// URL taken out.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactError returns err with every credential of servers taken out of its
// message (url.Parse errors, for one, quote the whole URL).
func redactError(err error, servers string) error {
	msg := err.Error()
	for _, s := range strings.Split(servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			msg = strings.ReplaceAll(msg, s, redactOne(s))
		}
	}
	for _, c := range secrets(servers) {
		msg = strings.ReplaceAll(msg, c, redacted)
	}
	return &redactedError{msg: msg, err: err}
}

// Connect opens a connection to the NATS server(s) at url that keeps
// reconnecting for ever, also when the first attempt fails (the caller gets
// the connection at once; operations fail until it is up). Neither its
// errors nor its logs carry the URL's credentials.
func Connect(url, clientName string, log *slog.Logger) (*nats.Conn, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	nc, err := nats.Connect(url,
		nats.Name(clientName),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "error", redactError(err, url).Error())
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS connected", "url", RedactURL(c.ConnectedUrl())) }),
	)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", RedactURL(url), redactError(err, url))
	}
	return nc, nil
}
