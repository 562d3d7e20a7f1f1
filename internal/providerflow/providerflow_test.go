package providerflow_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/backoff"
	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/providerflow"
	smt "github.com/paymentsapi/paymentsapi/internal/statemachine/statemachinetest"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The flow's windows, as the rows of TestMoneyFlow place the clock
// against them (t0, the claim, is 0).
const (
	lease   = time.Minute      // an owner that crashed is dead this long after its last hold
	lag     = 2 * time.Minute  // the provider's declared lookup lag
	grace   = 5 * time.Minute  // the refusal re-check (REFUSAL_RECHECK)
	window  = 6 * time.Hour    // the provider's key window
	abandon = 24 * time.Hour   // when a widget that moved no money is canceled
	step    = 5 * time.Second  // the reconciler's first backoff
	maxWait = 10 * time.Minute // and its longest
)

var (
	t0          = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	policy      = idempotency.RecoveryPolicy{Backoff: backoff.Policy{Base: step, Max: maxWait}}
	errRefused  = providerflow.ErrUnavailable // the 503 of every flow
	errCrash    = errors.New("crash")
	scope       = idempotency.Scope{Tenant: "t", Operation: "widgets.create", Key: "k"}
	widgetID    = "w_1"
	theResource = idempotency.Resource{Type: "widget", ID: widgetID}
)

// behaviour is what the fake provider does with a send.
type behaviour int

const (
	succeeds            behaviour = iota + 1 // charges and says so
	declines                                 // declines and says so
	refuses                                  // refuses before processing (503): holds nothing
	refusesProcessed                         // answers 503, but processed the request: it holds a charge
	loses                                    // charges, and the answer is lost (timeout)
	losesUnsent                              // the request never reached it, and the caller cannot tell (timeout)
	pends                                    // accepts, has not decided
	succeedsOtherAmount                      // charges another amount than the widget's, and says so
)

func (b behaviour) String() string {
	return [...]string{"", "succeeds", "declines", "refuses", "refuses but processed", "loses the answer",
		"loses the request", "pends", "succeeds for another amount"}[b]
}

// widgetAmount is what the widget asks the provider to move
// (Subject.AmountMinor); the fake's successes are for it, but for
// succeedsOtherAmount's.
const widgetAmount = 1000

// fakeProvider holds at most one object, for the widget's one key: a send
// with the key it already holds replays it, as a provider's idempotency
// does. Its lookups miss an object for `visible` after it was created.
type fakeProvider struct {
	mu      sync.Mutex
	t       *testing.T
	clk     *clock.Fake
	visible time.Duration

	sends     []behaviour // what the next sends do, in order
	lookupErr error       // non-nil: every lookup fails with it
	held      *providerflow.Answer
	heldAt    time.Time

	sendCalls, lookupCalls int
}

func (p *fakeProvider) Send(context.Context) (providerflow.Answer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sendCalls++
	if p.held != nil {
		return *p.held, nil
	}
	if len(p.sends) == 0 {
		p.t.Errorf("unexpected send at %v", p.clk.Now().Sub(t0))
		return providerflow.Answer{}, provider.ErrUnavailable
	}
	b := p.sends[0]
	p.sends = p.sends[1:]
	hold := func(a providerflow.Answer) providerflow.Answer {
		p.held, p.heldAt = &a, p.clk.Now()
		return a
	}
	switch b {
	case succeeds:
		return hold(providerflow.Answer{ID: "ch_1", Status: provider.StatusSucceeded, AmountMinor: widgetAmount}), nil
	case succeedsOtherAmount:
		return hold(providerflow.Answer{ID: "ch_1", Status: provider.StatusSucceeded, AmountMinor: 100 * widgetAmount}), nil
	case declines:
		return hold(providerflow.Answer{ID: "ch_1", Status: provider.StatusDeclined, DeclineCode: "insufficient_funds"}), nil
	case refuses:
		return providerflow.Answer{}, fmt.Errorf("%w: 503", provider.ErrUnavailable)
	case refusesProcessed:
		hold(providerflow.Answer{ID: "ch_1", Status: provider.StatusSucceeded, AmountMinor: widgetAmount})
		return providerflow.Answer{}, fmt.Errorf("%w: 503", provider.ErrUnavailable)
	case loses:
		hold(providerflow.Answer{ID: "ch_1", Status: provider.StatusSucceeded, AmountMinor: widgetAmount})
		return providerflow.Answer{}, fmt.Errorf("%w: timeout", provider.ErrUnknownOutcome)
	case losesUnsent:
		return providerflow.Answer{}, fmt.Errorf("%w: timeout", provider.ErrUnknownOutcome)
	case pends:
		return hold(providerflow.Answer{ID: "ch_1", Status: provider.StatusPending}), nil
	}
	panic("unknown behaviour")
}

func (p *fakeProvider) Lookup(context.Context) (providerflow.Answer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lookupCalls++
	if p.lookupErr != nil {
		return providerflow.Answer{}, p.lookupErr
	}
	if p.held != nil && !p.clk.Now().Before(p.heldAt.Add(p.visible)) {
		return *p.held, nil
	}
	return providerflow.Answer{}, fmt.Errorf("%w: no charge for the key", provider.ErrNotFound)
}

// widgetResult is what the operation answers: the widget's state.
type widgetResult struct{ State smt.WidgetState }

func (r widgetResult) Outcome() string {
	switch r.State {
	case smt.WidgetSucceeded:
		return "succeeded"
	case smt.WidgetDeclined:
		return "declined"
	case smt.WidgetCanceled:
		return "canceled"
	}
	return "processing"
}

// widget is the toy operation's side of a widget in the flow: the fake
// provider's calls, and a settle that writes nothing.
type widget struct{ *fakeProvider }

func (widget) Settle(_ context.Context, _ *pgx.Batch, to smt.WidgetState, _ providerflow.Answer, _ time.Time) (idempotency.Result, error) {
	return widgetResult{to}, nil
}

// widgets is the toy operation: it creates a widget under a key and
// resumes it through the flow, reading the widget from its row.
type widgets struct {
	db         *pgxpool.Pool
	flow       *providerflow.Flow[smt.WidgetState]
	provider   *fakeProvider
	crashFirst bool // the first owner dies right after its claim
	// sendOnClaim: the claim's batch creates the widget already sent
	// (Flow.SendOnClaim), as payments' does.
	sendOnClaim bool
}

func (*widgets) Name() string { return scope.Operation }

func (w *widgets) Render(res idempotency.Result) (idempotency.Response, error) {
	return idempotency.Response{Status: 200, Body: []byte(res.(widgetResult).State)}, nil
}

func (w *widgets) Resume(ctx context.Context, own *idempotency.Owner) (idempotency.Result, error) {
	if own.First && w.crashFirst {
		return nil, fmt.Errorf("%w: %w", idempotency.ErrCrashed, errCrash)
	}
	s := providerflow.Subject[smt.WidgetState]{
		ID:          own.Resource.ID,
		AmountMinor: widgetAmount,
		Op:          widget{w.provider},
	}
	err := w.db.QueryRow(ctx, `SELECT state, created_at, updated_at, first_sent_at, last_sent_at FROM widgets WHERE id = $1`, s.ID).
		Scan(&s.State, &s.CreatedAt, &s.UpdatedAt, &s.FirstSentAt, &s.LastSentAt)
	if err != nil {
		return nil, err
	}
	return w.flow.Resume(ctx, own, s)
}

func (w *widgets) request() idempotency.Request {
	now := w.flow.Clock.Now()
	firstLook := w.flow.FirstLook(now)
	send, sendLook, err := w.flow.SendOnClaim(context.Background(), widgetID, "request accepted", now)
	if err != nil {
		panic(err)
	}
	if w.sendOnClaim {
		firstLook = sendLook
	}
	return idempotency.Request{
		Scope: scope, Fingerprint: []byte{1}, Resource: theResource,
		Create: func(b *claim.Batch) {
			if w.sendOnClaim {
				// Created sent, as a payment is; send records both.
				b.Queue(claim.Gated(func(claimed string) string {
					return `INSERT INTO widgets (id, tenant_id, state, created_at, updated_at, first_sent_at, last_sent_at)
					SELECT $1, 't', 'PROVIDER_REQUEST_SENT', $2, $2, $2, $2 WHERE ` + claimed
				}, widgetID, now))
				b.Queue(send)
			} else {
				b.Queue(claim.Gated(func(claimed string) string {
					return `INSERT INTO widgets (id, tenant_id, state, created_at, updated_at)
					SELECT $1, 't', 'RECEIVED', $2, $2 WHERE ` + claimed
				}, widgetID, now))
				b.Queue(smt.WidgetMachine.Created(context.Background(), widgetID, "request accepted", now))
			}
		},
		FirstLook: firstLook,
	}
}

// owner is who resumes the widget in a step.
type owner int

const (
	first      owner = iota + 1 // the request that claims the key
	retry                       // the client's retry: takes the key over when nobody holds it
	reconciler                  // one pass of the reconciler (Reconciler.RunOnce)
	resolveNow                  // a look-up-only owner (Reconciler.ResolveNow, a webhook's)
)

func (o owner) String() string {
	return [...]string{"", "first request", "client retry", "reconciler", "ResolveNow"}[o]
}

// crash is where the owner of a step dies (its lease then runs out).
type crash int

const (
	noCrash     crash = iota
	afterClaim        // the widget is RECEIVED, nothing sent
	afterSent         // PROVIDER_REQUEST_SENT is committed, the request never left
	afterAnswer       // the provider answered; nothing of it was recorded
)

// stepT is one owner's turn, at a position of the clock (since t0).
type stepT struct {
	at    time.Duration
	owner owner
	sends []behaviour // what the provider does with this step's sends
	// lookupErr: every lookup of this step fails with it (the provider
	// cannot say, or holds more than one object).
	lookupErr error
	crash     crash
	// lag: the flow's lookup lag in this step, if not lag (a lengthened
	// PROVIDER_LOOKUP_LAG).
	lag time.Duration
	// err: what Engine.Do answers (errors.Is), for a request; outcome:
	// what the reconciler's pass or ResolveNow answers ("none": the pass
	// found nothing due).
	err     error
	outcome string
}

// lookKind is what a row expects of the key's booked next look.
type lookKind int

const (
	lookNull      lookKind = iota + 1 // none (final, or waits for its client for ever)
	lookAt                            // exactly t0 + d
	lookBackoff                       // booked by the reconciler's claim: its backoff after the attempt, from the last step
	lookUnchanged                     // as it was before the last step
)

type look struct {
	kind lookKind
	d    time.Duration
}

func never() look             { return look{kind: lookNull} }
func at(d time.Duration) look { return look{kind: lookAt, d: d} }
func backedOff() look         { return look{kind: lookBackoff} }
func unchanged() look         { return look{kind: lookUnchanged} }

// moneyRow is one row of TestMoneyFlow: steps taken in order, and what
// the last one must leave.
type moneyRow struct {
	name     string
	noCancel bool          // the operation has no canceled end (States.Canceled empty)
	claims   bool          // the claim moves the widget on to sent (widgets.sendOnClaim)
	visible  time.Duration // the provider's real lookup lag, if not lag
	steps    []stepT

	// What the last step leaves.
	state   smt.WidgetState
	sends   int                // Send calls of the last step
	lookups int                // Lookup calls of the last step
	moves   []smt.WidgetState  // the moves the last step recorded, in order
	next    look               // the key's recovery_next_at
	tries   int                // the key's recovery_attempts
	stored  bool               // the key holds its final answer
	review  bool               // the key is left for manual review
	sentAt  *[2]*time.Duration // first_sent_at, last_sent_at since t0 (nil in the pair: NULL); nil: not checked
	// provider_reference and decline_code ("": not checked)
	reference, declineCode string
}

// pos is a position of the clock, since t0.
func pos(x time.Duration) *time.Duration { return &x }

// TestMoneyFlow drives the flow through the real idempotency engine and
// reconciler on PostgreSQL, with a toy operation (the widget) and a fake
// provider: each row places owners (first request, client retry,
// reconciler, look-up-only ResolveNow) on the clock against the flow's
// windows, and checks the widget's state, the provider calls, and the
// key's schedule, attempts and stored answer.
func TestMoneyFlow(t *testing.T) {
	t.Parallel()
	rows := []moneyRow{
		// A send from RECEIVED: the one call that can reach the provider.
		{
			name:  "first request: succeeded",
			steps: []stepT{{at: 0, owner: first, sends: []behaviour{succeeds}}},
			state: smt.WidgetSucceeded, sends: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetSucceeded},
			next: never(), stored: true, sentAt: &[2]*time.Duration{pos(0), pos(0)}, reference: "ch_1",
		},
		{
			name:  "first request: declined",
			steps: []stepT{{at: 0, owner: first, sends: []behaviour{declines}}},
			state: smt.WidgetDeclined, sends: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetDeclined},
			next: never(), stored: true, reference: "ch_1", declineCode: "insufficient_funds",
		},
		{
			name:  "first request: refused; re-check booked after the grace; the send counts until a look proves otherwise",
			steps: []stepT{{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused}},
			state: smt.WidgetRetryable, sends: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetRetryable},
			next: at(grace), sentAt: &[2]*time.Duration{pos(0), pos(0)},
		},
		{
			name:  "first request: refused, with a lag longer than the grace: re-check once the lag passed",
			steps: []stepT{{at: 0, owner: first, sends: []behaviour{refuses}, lag: 10 * time.Minute, err: errRefused}},
			state: smt.WidgetRetryable, sends: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetRetryable},
			next: at(10 * time.Minute),
		},
		{
			name:  "first request: answer lost is an unknown outcome, looked at soon",
			steps: []stepT{{at: 0, owner: first, sends: []behaviour{loses}}},
			state: smt.WidgetUnknown, sends: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetUnknown},
			next: at(0), sentAt: &[2]*time.Duration{pos(0), pos(0)},
		},
		{
			name:  "first request: pending is an unknown outcome",
			steps: []stepT{{at: 0, owner: first, sends: []behaviour{pends}}},
			state: smt.WidgetUnknown, sends: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetUnknown},
			next: at(0),
		},
		{
			name: "client retry after a refusal sends again; the key window still runs from the refused send",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused},
				{at: time.Minute, owner: retry, sends: []behaviour{succeeds}},
			},
			state: smt.WidgetSucceeded, sends: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetSucceeded},
			next: never(), stored: true, sentAt: &[2]*time.Duration{pos(0), pos(time.Minute)},
		},
		{
			name: "client retry past the key window of a refused-but-processed send looks up first: settled, never sent",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refusesProcessed}, err: errRefused},
				{at: window + time.Hour, owner: retry},
			},
			state: smt.WidgetSucceeded, lookups: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetSucceeded},
			next: never(), stored: true,
		},
		{
			name: "client retry past the key window of a refused send the provider never saw: looked up, then sent, a new window",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused},
				{at: window + time.Hour, owner: retry, sends: []behaviour{succeeds}},
			},
			state: smt.WidgetSucceeded, lookups: 1, sends: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetSucceeded},
			next: never(), stored: true, sentAt: &[2]*time.Duration{pos(window + time.Hour), pos(window + time.Hour)},
		},
		{
			name: "client retry refused again: its own re-check, a resolved pass",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused},
				{at: grace, owner: reconciler, lookupErr: provider.ErrUnknownOutcome, outcome: idempotency.OutcomeError},
				{at: grace + time.Minute, owner: retry, sends: []behaviour{refuses}, err: errRefused},
			},
			state: smt.WidgetRetryable, sends: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetRetryable},
			next: at(grace + time.Minute + grace), tries: 0,
		},

		// The reconciler's re-check of a refusal: a look, never a send.
		{
			name: "re-check not yet due",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused},
				{at: grace - time.Second, owner: reconciler, outcome: "none"},
			},
			state: smt.WidgetRetryable, next: at(grace),
		},
		{
			name: "re-check after the lag finds a refused request the provider processed",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refusesProcessed}, err: errRefused},
				{at: grace, owner: reconciler, outcome: "succeeded"},
			},
			state: smt.WidgetSucceeded, lookups: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetSucceeded},
			next: never(), stored: true, tries: 1,
		},
		{
			name: "re-check: a certain not-found is a resolved pass, next look at the abandon time",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused},
				{at: grace, owner: reconciler, outcome: idempotency.OutcomeRescheduled},
			},
			state: smt.WidgetRetryable, lookups: 1, next: at(abandon), tries: 0,
		},
		{
			name:     "re-check without a canceled end: a resolved pass that never books the abandon time",
			noCancel: true,
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused},
				{at: grace, owner: reconciler, outcome: idempotency.OutcomeRescheduled},
			},
			state: smt.WidgetRetryable, lookups: 1, next: never(), tries: 0,
		},
		{
			name: "re-check: a provider that cannot say backs off and counts the attempt",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused},
				{at: grace, owner: reconciler, lookupErr: provider.ErrUnknownOutcome, outcome: idempotency.OutcomeError},
			},
			state: smt.WidgetRetryable, lookups: 1, next: backedOff(), tries: 1,
		},
		{
			name:    "re-check inside a lengthened lag books last send + lag, never cancels",
			visible: 10 * time.Minute,
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refusesProcessed}, err: errRefused},
				{at: grace, owner: reconciler, lag: 10 * time.Minute, outcome: idempotency.OutcomeRescheduled},
			},
			state: smt.WidgetRetryable, lookups: 1, next: at(10 * time.Minute), tries: 0,
		},
		{
			name:    "re-check at last send + lengthened lag finds it",
			visible: 10 * time.Minute,
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refusesProcessed}, err: errRefused},
				{at: grace, owner: reconciler, lag: 10 * time.Minute, outcome: idempotency.OutcomeRescheduled},
				{at: 10 * time.Minute, owner: reconciler, lag: 10 * time.Minute, outcome: "succeeded"},
			},
			state: smt.WidgetSucceeded, lookups: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetSucceeded},
			next: never(), stored: true, tries: 1,
		},

		// A look-up-only owner (ResolveNow): settles what it finds, never
		// sends, never moves a booked look later, never restarts the count.
		{
			name: "ResolveNow inside the lag after a refusal: books last send + lag, earlier than the re-check",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refusesProcessed}, err: errRefused},
				{at: 30 * time.Second, owner: resolveNow, outcome: idempotency.OutcomeUnresolved},
			},
			state: smt.WidgetRetryable, lookups: 1, next: at(lag),
		},
		{
			name: "ResolveNow: a certain not-found never moves the booked look later, nor restarts the count",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused},
				{at: grace, owner: reconciler, lookupErr: provider.ErrUnknownOutcome, outcome: idempotency.OutcomeError},
				{at: grace + time.Second, owner: resolveNow, outcome: idempotency.OutcomeUnresolved},
			},
			state: smt.WidgetRetryable, lookups: 1, next: unchanged(), tries: 1,
		},
		{
			name: "ResolveNow on an unknown outcome the provider never saw: never sends",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{losesUnsent}},
				{at: 3 * time.Minute, owner: resolveNow, outcome: idempotency.OutcomeUnresolved},
			},
			state: smt.WidgetUnknown, lookups: 1, next: unchanged(), sentAt: &[2]*time.Duration{pos(0), pos(0)},
		},
		{
			name: "ResolveNow settles the charge it finds",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{loses}},
				{at: 3 * time.Minute, owner: resolveNow, outcome: "succeeded"},
			},
			state: smt.WidgetSucceeded, lookups: 1, moves: []smt.WidgetState{smt.WidgetSucceeded},
			next: never(), stored: true,
		},

		// An unknown outcome: looked up; sent again with the same key only
		// inside the provider's key window.
		{
			name: "reconciler: not found on UNKNOWN inside the key window sends again",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{losesUnsent}},
				{at: 3 * time.Minute, owner: reconciler, sends: []behaviour{succeeds}, outcome: "succeeded"},
			},
			state: smt.WidgetSucceeded, lookups: 1, sends: 1,
			moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetSucceeded},
			next:  never(), stored: true, tries: 1, sentAt: &[2]*time.Duration{pos(0), pos(3 * time.Minute)},
		},
		{
			name: "reconciler: not found on UNKNOWN inside the lag sends again, with the same key (the provider replays)",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{loses}},
				{at: time.Minute, owner: reconciler, outcome: "succeeded"},
			},
			state: smt.WidgetSucceeded, lookups: 1, sends: 1,
			moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetSucceeded}, next: never(), stored: true, tries: 1,
		},
		{
			name: "reconciler: past the key window only looks up, never sends",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{losesUnsent}},
				{at: window + time.Minute, owner: reconciler, outcome: idempotency.OutcomeUnresolved},
			},
			state: smt.WidgetUnknown, lookups: 1, next: backedOff(), tries: 1,
		},
		{
			name: "reconciler: past the key window, a found charge settles",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{loses}},
				{at: window + time.Minute, owner: reconciler, outcome: "succeeded"},
			},
			state: smt.WidgetSucceeded, lookups: 1, moves: []smt.WidgetState{smt.WidgetSucceeded}, next: never(), stored: true, tries: 1,
		},
		{
			name: "reconciler: the key window runs from the first send, not the creation",
			steps: []stepT{
				{at: 0, owner: first, crash: afterClaim, err: idempotency.ErrCrashed},
				{at: 3 * time.Hour, owner: retry, sends: []behaviour{losesUnsent}},
				{at: window + time.Hour, owner: reconciler, sends: []behaviour{succeeds}, outcome: "succeeded"},
			},
			state: smt.WidgetSucceeded, lookups: 1, sends: 1,
			moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetSucceeded}, next: never(), stored: true, tries: 1,
			sentAt: &[2]*time.Duration{pos(3 * time.Hour), pos(window + time.Hour)},
		},
		{
			name: "reconciler: a refused send proven never counted, the window restarts with the next",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused},
				{at: grace, owner: reconciler, outcome: idempotency.OutcomeRescheduled},
				{at: window - time.Hour, owner: retry, sends: []behaviour{losesUnsent}},
				{at: window + time.Hour, owner: reconciler, sends: []behaviour{succeeds}, outcome: "succeeded"},
			},
			state: smt.WidgetSucceeded, lookups: 1, sends: 1,
			moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetSucceeded}, next: never(), stored: true, tries: 1,
		},
		{
			name: "reconciler: pending stays UNKNOWN and backs off",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{pends}},
				{at: 3 * time.Minute, owner: reconciler, outcome: idempotency.OutcomeUnresolved},
			},
			state: smt.WidgetUnknown, lookups: 1, next: backedOff(), tries: 1,
		},
		{
			name: "reconciler: a lookup finds a decline",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{declines}, crash: afterAnswer, err: idempotency.ErrCrashed},
				{at: lease + lag, owner: reconciler, outcome: "declined"},
			},
			state: smt.WidgetDeclined, lookups: 1, moves: []smt.WidgetState{smt.WidgetDeclined}, next: never(), stored: true, tries: 1,
		},
		{
			name: "ambiguous: left for manual review",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{loses}},
				{at: 3 * time.Minute, owner: reconciler, lookupErr: provider.ErrAmbiguous, outcome: idempotency.OutcomeManualReview},
			},
			state: smt.WidgetUnknown, lookups: 1, next: backedOff(), tries: 1, review: true,
		},
		{
			name:  "first request: a success for another amount is no success: unknown, left for manual review",
			steps: []stepT{{at: 0, owner: first, sends: []behaviour{succeedsOtherAmount}}},
			state: smt.WidgetUnknown, sends: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetUnknown},
			next: at(0), review: true,
		},
		{
			name: "reconciler: a lookup finds a success for another amount: left for manual review",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{succeedsOtherAmount}, crash: afterAnswer, err: idempotency.ErrCrashed},
				{at: lease + lag, owner: reconciler, outcome: idempotency.OutcomeManualReview},
			},
			state: smt.WidgetUnknown, lookups: 1, moves: []smt.WidgetState{smt.WidgetUnknown}, next: backedOff(), tries: 1, review: true,
		},
		{
			name: "ambiguous found by a look-up-only owner: manual review too",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{loses}},
				{at: 3 * time.Minute, owner: resolveNow, lookupErr: provider.ErrAmbiguous, outcome: idempotency.OutcomeManualReview},
			},
			state: smt.WidgetUnknown, lookups: 1, next: unchanged(), review: true,
		},

		// An owner that died with the request sent.
		{
			name: "owner died before the call: the reconciler finds nothing and sends again",
			steps: []stepT{
				{at: 0, owner: first, crash: afterSent, err: idempotency.ErrCrashed},
				{at: lease, owner: reconciler, sends: []behaviour{succeeds}, outcome: "succeeded"},
			},
			state: smt.WidgetSucceeded, lookups: 1, sends: 1, moves: []smt.WidgetState{smt.WidgetSucceeded},
			next: never(), stored: true, tries: 1, sentAt: &[2]*time.Duration{pos(0), pos(lease)},
		},
		{
			name: "owner died after the charge: the reconciler finds it, never sends",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{succeeds}, crash: afterAnswer, err: idempotency.ErrCrashed},
				{at: lease + lag, owner: reconciler, outcome: "succeeded"},
			},
			state: smt.WidgetSucceeded, lookups: 1, moves: []smt.WidgetState{smt.WidgetSucceeded}, next: never(), stored: true, tries: 1,
		},
		{
			name: "client retry takes over a dead owner's send: a refusal after the lookup is UNKNOWN",
			steps: []stepT{
				{at: 0, owner: first, crash: afterSent, err: idempotency.ErrCrashed},
				{at: 2 * time.Minute, owner: retry, sends: []behaviour{refuses}},
			},
			state: smt.WidgetUnknown, lookups: 1, sends: 1, moves: []smt.WidgetState{smt.WidgetUnknown}, next: at(0),
		},
		{
			name: "client retry on UNKNOWN after the lag finds the charge, never sends",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{loses}},
				{at: lag, owner: retry},
			},
			state: smt.WidgetSucceeded, lookups: 1, moves: []smt.WidgetState{smt.WidgetSucceeded}, next: never(), stored: true,
		},

		// The claim's transaction moves the widget on to sent
		// (SendOnClaim): one commit fewer, and the first owner is the only
		// caller; an owner that dies before its request leaves costs a
		// lookup before the send, never an abandon.
		{
			name:   "claim sends: first request succeeded",
			claims: true,
			steps:  []stepT{{at: 0, owner: first, sends: []behaviour{succeeds}}},
			state:  smt.WidgetSucceeded, sends: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetSucceeded},
			next: never(), stored: true, sentAt: &[2]*time.Duration{pos(0), pos(0)}, reference: "ch_1",
		},
		{
			name:   "claim sends: first request refused: it was the only call, so retryable",
			claims: true,
			steps:  []stepT{{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused}},
			state:  smt.WidgetRetryable, sends: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetRetryable},
			next: at(grace), sentAt: &[2]*time.Duration{pos(0), pos(0)},
		},
		{
			name:   "claim sends: an owner that died after its claim holds the key until its lease runs out",
			claims: true,
			steps: []stepT{
				{at: 0, owner: first, crash: afterClaim, err: idempotency.ErrCrashed},
				{at: lease - time.Second, owner: reconciler, outcome: "none"},
			},
			state: smt.WidgetSent, moves: []smt.WidgetState{}, next: at(0),
		},
		{
			name:   "claim sends: an owner that died after its claim: the reconciler looks, then sends inside the window",
			claims: true,
			steps: []stepT{
				{at: 0, owner: first, crash: afterClaim, err: idempotency.ErrCrashed},
				{at: lease, owner: reconciler, sends: []behaviour{succeeds}, outcome: "succeeded"},
			},
			state: smt.WidgetSucceeded, lookups: 1, sends: 1, moves: []smt.WidgetState{smt.WidgetSucceeded},
			next: never(), stored: true, tries: 1, sentAt: &[2]*time.Duration{pos(0), pos(lease)},
		},
		{
			name:   "claim sends: an owner that died after its claim, past the key window: never sent again",
			claims: true,
			steps: []stepT{
				{at: 0, owner: first, crash: afterClaim, err: idempotency.ErrCrashed},
				{at: window + time.Minute, owner: reconciler, outcome: idempotency.OutcomeUnresolved},
			},
			state: smt.WidgetUnknown, lookups: 1, moves: []smt.WidgetState{smt.WidgetUnknown}, next: backedOff(), tries: 1,
		},
		{
			name:   "claim sends: a client retry after the lease takes over and looks first",
			claims: true,
			steps: []stepT{
				{at: 0, owner: first, crash: afterClaim, err: idempotency.ErrCrashed},
				{at: lease, owner: retry, sends: []behaviour{succeeds}},
			},
			state: smt.WidgetSucceeded, lookups: 1, sends: 1, moves: []smt.WidgetState{smt.WidgetSucceeded},
			next: never(), stored: true,
		},

		// Abandoned: canceled only on what surely moved no money.
		{
			name: "abandon: not due before the abandon time",
			steps: []stepT{
				{at: 0, owner: first, crash: afterClaim, err: idempotency.ErrCrashed},
				{at: abandon - time.Second, owner: reconciler, outcome: "none"},
			},
			state: smt.WidgetReceived, next: at(abandon),
		},
		{
			name: "abandon: never sent, canceled without a lookup",
			steps: []stepT{
				{at: 0, owner: first, crash: afterClaim, err: idempotency.ErrCrashed},
				{at: abandon, owner: reconciler, outcome: "canceled"},
			},
			state: smt.WidgetCanceled, moves: []smt.WidgetState{smt.WidgetCanceled}, next: never(), stored: true, tries: 1,
		},
		{
			name:     "abandon: no canceled end, never booked",
			noCancel: true,
			steps: []stepT{
				{at: 0, owner: first, crash: afterClaim, err: idempotency.ErrCrashed},
				{at: 2 * abandon, owner: reconciler, outcome: "none"},
			},
			state: smt.WidgetReceived, next: never(),
		},
		{
			name: "abandon: refused and certainly not found, canceled",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused},
				{at: abandon, owner: reconciler, outcome: "canceled"},
			},
			state: smt.WidgetCanceled, lookups: 1, moves: []smt.WidgetState{smt.WidgetCanceled}, next: never(), stored: true, tries: 1,
		},
		{
			name: "abandon: never cancels a refused request the provider holds",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refusesProcessed}, err: errRefused},
				{at: abandon, owner: reconciler, outcome: "succeeded"},
			},
			state: smt.WidgetSucceeded, lookups: 1, moves: []smt.WidgetState{smt.WidgetSent, smt.WidgetSucceeded},
			next: never(), stored: true, tries: 1,
		},
		{
			name: "abandon: a provider that cannot say, never cancels",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused},
				{at: abandon, owner: reconciler, lookupErr: provider.ErrUnknownOutcome, outcome: idempotency.OutcomeError},
			},
			state: smt.WidgetRetryable, lookups: 1, next: backedOff(), tries: 1,
		},
		{
			name: "abandon by ResolveNow inside the lag of a retry's refusal: books last send + lag, never cancels",
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused},
				{at: abandon - time.Minute, owner: retry, sends: []behaviour{refusesProcessed}, err: errRefused},
				{at: abandon, owner: resolveNow, outcome: idempotency.OutcomeUnresolved},
			},
			state: smt.WidgetRetryable, lookups: 1, next: at(abandon - time.Minute + lag),
		},
		{
			name:    "abandon by the reconciler inside a lengthened lag: books last send + lag, never cancels",
			visible: 10 * time.Minute,
			steps: []stepT{
				{at: 0, owner: first, sends: []behaviour{refuses}, err: errRefused},
				{at: abandon - time.Minute, owner: retry, sends: []behaviour{refusesProcessed}, err: errRefused},
				{at: abandon - time.Minute + grace, owner: reconciler, lag: 10 * time.Minute, outcome: idempotency.OutcomeRescheduled},
			},
			state: smt.WidgetRetryable, lookups: 1, next: at(abandon - time.Minute + 10*time.Minute), tries: 0,
		},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			runMoneyRow(t, r)
		})
	}
}

// rig is one widget operation on its own database: the real engine and
// reconciler, the flow, the fake provider and the fake clock.
type rig struct {
	pool     *pgxpool.Pool
	clk      *clock.Fake
	provider *fakeProvider
	engine   *idempotency.Engine
	flow     *providerflow.Flow[smt.WidgetState]
	op       *widgets
	rc       *idempotency.Reconciler
}

func newRig(t *testing.T, noCancel bool, visible time.Duration) *rig {
	pool := pgtest.NewPool(t)
	smt.CreateWidgets(t, pool)
	clk := clock.NewFake(t0)
	prov := &fakeProvider{t: t, clk: clk, visible: lag}
	if visible > 0 {
		prov.visible = visible
	}
	engine := idempotency.NewEngine(idempotency.Deps{
		DB: pool, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: metrics.New(prometheus.NewRegistry()),
	}, idempotency.Config{ReplayTTL: 48 * time.Hour, Lease: lease, CommitMode: pgtest.CommitMode()})
	states := providerflow.States[smt.WidgetState]{
		Sent: smt.WidgetSent, Succeeded: smt.WidgetSucceeded, Declined: smt.WidgetDeclined,
		Retryable: smt.WidgetRetryable, Unknown: smt.WidgetUnknown, Canceled: smt.WidgetCanceled,
	}
	if noCancel {
		states.Canceled = ""
	}
	flow := &providerflow.Flow[smt.WidgetState]{
		Machine: smt.WidgetMachine, States: states, Clock: clk,
		KeyWindow: window, RefusalGrace: grace, LookupLag: lag, AbandonAfter: abandon,
		Timeout: 5 * time.Second, Metrics: metrics.New(prometheus.NewRegistry()), SendOp: "send", LookupOp: "lookup",
	}
	op := &widgets{db: pool, flow: flow, provider: prov}
	return &rig{pool: pool, clk: clk, provider: prov, engine: engine, flow: flow, op: op,
		rc: idempotency.NewReconciler(engine, policy, op)}
}

func runMoneyRow(t *testing.T, r moneyRow) {
	ctx := context.Background()
	rg := newRig(t, r.noCancel, r.visible)
	pool, clk, prov, engine, flow, op, rc := rg.pool, rg.clk, rg.provider, rg.engine, rg.flow, rg.op, rg.rc
	op.sendOnClaim = r.claims

	var (
		before         keyRow
		movesBefore    int
		sends, lookups int
	)
	for i, s := range r.steps {
		last := i == len(r.steps)-1
		if last && i > 0 {
			before, movesBefore = readKey(t, pool), len(readMoves(t, pool))
			sends, lookups = prov.sendCalls, prov.lookupCalls
		}
		clk.Set(t0.Add(s.at))
		prov.sends, prov.lookupErr = s.sends, s.lookupErr
		flow.LookupLag = lag
		if s.lag > 0 {
			flow.LookupLag = s.lag
		}
		op.crashFirst = s.crash == afterClaim
		flow.Hooks = providerflow.Hooks{}
		crashHook := func(context.Context, string) error { return errCrash }
		switch s.crash {
		case afterSent:
			flow.Hooks.AfterSent = crashHook
		case afterAnswer:
			flow.Hooks.AfterAnswer = crashHook
		}
		where := fmt.Sprintf("step %d (%s at %v)", i+1, s.owner, s.at)
		switch s.owner {
		case first, retry:
			_, err := engine.Do(ctx, op, op.request())
			if !errors.Is(err, s.err) {
				t.Fatalf("%s: Do = %v, want %v", where, err, s.err)
			}
			if s.owner == first && readKey(t, pool).token != 1 {
				t.Fatalf("%s: did not claim the key", where)
			}
		case reconciler:
			stats, err := rc.RunOnce(ctx, 10)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			got := "none"
			for outcome, n := range stats {
				if n != 1 || len(stats) != 1 {
					t.Fatalf("%s: pass %v, want one key", where, stats)
				}
				got = outcome
			}
			if got != s.outcome {
				t.Fatalf("%s: outcome %q, want %q", where, got, s.outcome)
			}
		case resolveNow:
			got, err := rc.ResolveNow(ctx, theResource)
			if err != nil || got != s.outcome {
				t.Fatalf("%s: ResolveNow = %q, %v; want %q", where, got, err, s.outcome)
			}
		}
		if len(prov.sends) > 0 {
			t.Fatalf("%s: the provider's answers %v were not all asked for", where, prov.sends)
		}
	}

	// What the last step left.
	key := readKey(t, pool)
	w := readWidget(t, pool)
	if w.state != r.state {
		t.Errorf("widget %s, want %s", w.state, r.state)
	}
	if got := prov.sendCalls - sends; got != r.sends {
		t.Errorf("%d sends, want %d", got, r.sends)
	}
	if got := prov.lookupCalls - lookups; got != r.lookups {
		t.Errorf("%d lookups, want %d", got, r.lookups)
	}
	if got := readMoves(t, pool)[movesBefore:]; !slices.Equal(got, r.moves) {
		t.Errorf("moves %v, want %v", got, r.moves)
	}
	// The first move to sent is committed with the creation exactly when
	// the claim sends (one transaction: one xmin for both audit rows).
	var sent, txs int
	if err := pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE from_state IS NOT NULL), count(DISTINCT xmin::text)
		FROM widget_transitions
		WHERE widget_id = $1 AND (from_state IS NULL OR (from_state = $2 AND to_state = $3))`,
		widgetID, smt.WidgetReceived, smt.WidgetSent).Scan(&sent, &txs); err != nil {
		t.Fatal(err)
	}
	if sent > 0 && (txs == 1) != r.claims {
		t.Errorf("the creation and the first move to sent were committed in %d transaction(s); the claim sends: %v", txs, r.claims)
	}
	if key.stored != r.stored {
		t.Errorf("stored answer: %v, want %v", key.stored, r.stored)
	}
	if key.review != r.review {
		t.Errorf("manual review: %v, want %v", key.review, r.review)
	}
	if key.attempts != r.tries {
		t.Errorf("recovery_attempts %d, want %d", key.attempts, r.tries)
	}
	now := clk.Now()
	switch r.next.kind {
	case lookNull:
		if key.next != nil {
			t.Errorf("next look at %v, want none", key.next.Sub(t0))
		}
	case lookAt:
		if key.next == nil || !key.next.Equal(t0.Add(r.next.d)) {
			t.Errorf("next look at %v, want %v", since(key.next), r.next.d)
		}
	case lookBackoff:
		ceiling := policy.Backoff.Ceiling(key.attempts)
		if key.next == nil || key.next.Before(now.Add(ceiling/2)) || key.next.After(now.Add(ceiling)) {
			t.Errorf("next look at %v, want the backoff after attempt %d: %v + [%v, %v]", since(key.next), key.attempts, now.Sub(t0), ceiling/2, ceiling)
		}
	case lookUnchanged:
		if (key.next == nil) != (before.next == nil) || (key.next != nil && !key.next.Equal(*before.next)) {
			t.Errorf("next look at %v, want it unchanged at %v", since(key.next), since(before.next))
		}
	default:
		t.Fatal("the row says nothing of the next look")
	}
	for _, c := range []struct {
		name string
		got  *string
		want string
	}{{"provider_reference", w.reference, r.reference}, {"decline_code", w.declineCode, r.declineCode}} {
		if c.want != "" && (c.got == nil || *c.got != c.want) {
			t.Errorf("%s %v, want %q", c.name, c.got, c.want)
		}
	}
	if r.sentAt != nil {
		for i, c := range []struct {
			name string
			got  *time.Time
		}{{"first_sent_at", w.firstSent}, {"last_sent_at", w.lastSent}} {
			want := r.sentAt[i]
			if (c.got == nil) != (want == nil) || (c.got != nil && !c.got.Equal(t0.Add(*want))) {
				t.Errorf("%s %v, want %v", c.name, since(c.got), want)
			}
		}
	}
}

// since is t, if any, as a position of the clock.
func since(t *time.Time) any {
	if t == nil {
		return "none"
	}
	return t.Sub(t0)
}

type keyRow struct {
	token    int64
	next     *time.Time
	attempts int
	stored   bool
	review   bool
}

func readKey(t *testing.T, pool *pgxpool.Pool) keyRow {
	t.Helper()
	var k keyRow
	err := pool.QueryRow(context.Background(), `
		SELECT fencing_token, recovery_next_at, recovery_attempts, response_status IS NOT NULL, manual_review_at IS NOT NULL
		FROM idempotency_keys WHERE resource_type = $1 AND resource_id = $2`, theResource.Type, theResource.ID).
		Scan(&k.token, &k.next, &k.attempts, &k.stored, &k.review)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type widgetRow struct {
	state                  smt.WidgetState
	firstSent, lastSent    *time.Time
	reference, declineCode *string
}

func readWidget(t *testing.T, pool *pgxpool.Pool) widgetRow {
	t.Helper()
	var w widgetRow
	if err := pool.QueryRow(context.Background(), `SELECT state, first_sent_at, last_sent_at, provider_reference, decline_code FROM widgets WHERE id = $1`, widgetID).
		Scan(&w.state, &w.firstSent, &w.lastSent, &w.reference, &w.declineCode); err != nil {
		t.Fatal(err)
	}
	return w
}

// readMoves is every move recorded for the widget, oldest first (its
// creation excluded).
func readMoves(t *testing.T, pool *pgxpool.Pool) []smt.WidgetState {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT to_state FROM widget_transitions WHERE widget_id = $1 AND from_state IS NOT NULL ORDER BY id`, widgetID)
	if err != nil {
		t.Fatal(err)
	}
	moves, err := pgx.CollectRows(rows, pgx.RowTo[smt.WidgetState])
	if err != nil {
		t.Fatal(err)
	}
	return moves
}

// A success for another amount than the resource's is logged at error,
// with the resource's id, the provider's reference and both amounts: a
// person has to find it.
func TestASuccessForAnotherAmountIsLoggedForAPerson(t *testing.T) {
	t.Parallel()
	rg := newRig(t, false, 0)
	var logs testio.SyncBuffer
	rg.flow.Log = slog.New(slog.NewTextHandler(&logs, nil))
	rg.clk.Set(t0)
	rg.provider.sends = []behaviour{succeedsOtherAmount}
	if _, err := rg.engine.Do(context.Background(), rg.op, rg.op.request()); err != nil {
		t.Fatalf("Do: %v", err)
	}
	line := logs.String()
	for _, want := range []string{"level=ERROR", "widget_id=" + widgetID, "provider_reference=ch_1",
		fmt.Sprintf("amount_minor=%d", widgetAmount), fmt.Sprintf("provider_amount_minor=%d", 100*widgetAmount)} {
		if !strings.Contains(line, want) {
			t.Errorf("the log does not say %s:\n%s", want, line)
		}
	}
}
