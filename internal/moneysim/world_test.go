package moneysim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/authorizations"
	"github.com/paymentsapi/paymentsapi/internal/backoff"
	"github.com/paymentsapi/paymentsapi/internal/cleanup"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
	modulesetting "github.com/paymentsapi/paymentsapi/internal/setting"
)

// The service's timing rules in the simulation: the production defaults.
const (
	replayTTL   = 24 * time.Hour  // IDEMPOTENCY_TTL, and the abandon time of a payment
	metadataTTL = 720 * time.Hour // IDEMPOTENCY_METADATA_TTL
	keyWindow   = 24 * time.Hour  // PROVIDER_KEY_TTL
	lease       = 30 * time.Second
	callTimeout = 5 * time.Second
	// tick is the reconciler's period: it runs at start + n·tick only.
	tick = 30 * time.Second
	// lateBound: a resource the provider holds processed must be looked at
	// again within this (or be left for a person); see checkTimeliness.
	lateBound = time.Hour
	tenant    = "tenant_sim"
)

// Payment methods, as the provider simulates them.
const (
	methodOK             = "pm_card_visa"
	methodDeclined       = "pm_card_chargeDeclined"
	methodRefundDeclined = "pm_sim_refund_declined"
)

var epoch = time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)

// Knobs are one run's choices, all drawn from its seed.
type Knobs struct {
	Payments       int
	LookupLag      time.Duration // a create is invisible to lookups this long
	ProviderKeyTTL time.Duration // the provider forgets a key this long after its first request
	// Create requests: refused (PRefuse; of those, PRefuseHidden were
	// processed all the same), answer lost (PLost), answered after the
	// timeout and processed LateBy later (PLate).
	PRefuse, PRefuseHidden, PLost, PLate float64
	LateBy                               time.Duration
	// Lookups: cannot say (PLookupUnavailable), ambiguous (PAmbiguous).
	PLookupUnavailable, PAmbiguous float64
	PCrash                         float64 // an owner dies at a failpoint it passes
	PWebhook                       float64 // an object's events are delivered
	PDuplicate                     float64 // a client request gets a duplicate while in flight
	PRefund                        float64 // a succeeded payment is refunded
	// Manual capture, drawn from the run's second stream (world.mrng):
	// the share of payments made with captureMethod manual (0: the run is
	// the one this seed played before manual capture existed), and the
	// service's AUTHORIZATION_TTL.
	PManual          float64
	AuthorizationTTL time.Duration
	// 3-D Secure, drawn from the run's third stream (world.arng): the
	// share of payments made with a method that asks the customer to
	// authenticate (0: the run is the one this seed played before), and
	// the service's AUTHENTICATION_TIMEOUT.
	PThreeDS              float64
	AuthenticationTimeout time.Duration
}

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// drawKnobs draws a run's knobs. The lag is weighted around the
// one-minute refusal re-check, where the flow's timing rules meet.
func drawKnobs(rng *rand.Rand) Knobs {
	k := Knobs{Payments: 3 + rng.IntN(6), ProviderKeyTTL: keyWindow}
	switch r := rng.Float64(); {
	case r < 0.15:
		k.LookupLag = 0
	case r < 0.35:
		k.LookupLag = between(rng, time.Second, 30*time.Second)
	case r < 0.85:
		k.LookupLag = between(rng, 55*time.Second, 95*time.Second)
	default:
		k.LookupLag = between(rng, 2*time.Minute, 10*time.Minute)
	}
	if rng.Float64() < 0.2 {
		// An outage: the provider refuses nearly everything, and truly.
		k.PRefuse, k.PRefuseHidden = 0.95, pick(rng, 0.0, 0.05)
	} else {
		k.PRefuse, k.PRefuseHidden = pick(rng, 0.05, 0.2, 0.4, 0.5), pick(rng, 0.0, 0.3, 0.5, 0.6, 0.9)
	}
	k.PLost = pick(rng, 0.0, 0.05, 0.15)
	k.PLate = pick(rng, 0.0, 0.05)
	k.LateBy = between(rng, time.Second, 3*time.Minute)
	k.PLookupUnavailable = pick(rng, 0.0, 0.05, 0.15)
	k.PAmbiguous = pick(rng, 0.0, 0.0, 0.01)
	k.PCrash = pick(rng, 0.0, 0.02, 0.08)
	k.PWebhook = pick(rng, 0.0, 0.5, 0.9)
	k.PDuplicate = pick(rng, 0.0, 0.1)
	k.PRefund = pick(rng, 0.3, 0.7)
	return k
}

// drawManualKnobs draws the manual-capture knobs from the run's second
// stream, so that the knobs above stay what the seed drew before manual
// capture existed. The TTL is the production default, or short enough
// that authorizations expire while clients still retry, around the replay
// window (24 h: when an action that moved no money is abandoned and the
// payment authorized again).
func drawManualKnobs(rng *rand.Rand, k *Knobs) {
	k.PManual = pick(rng, 0.0, 0.3, 0.6, 0.9)
	switch r := rng.Float64(); {
	case r < 0.4:
		k.AuthorizationTTL = authorizations.DefaultAuthorizationTTL
	case r < 0.7:
		k.AuthorizationTTL = between(rng, 20*time.Minute, 6*time.Hour)
	default:
		k.AuthorizationTTL = between(rng, 20*time.Hour, 30*time.Hour)
	}
}

// drawAuthenticationKnobs draws the 3-D Secure knobs from the run's third
// stream. The timeout is the production default, short (minutes: the
// abandonment races customers who act late and roads that arrive late),
// or hours.
func drawAuthenticationKnobs(rng *rand.Rand, k *Knobs) {
	k.PThreeDS = pick(rng, 0.0, 0.3, 0.6, 0.9)
	switch r := rng.Float64(); {
	case r < 0.5:
		k.AuthenticationTimeout = payments.DefaultAuthenticationTimeout
	case r < 0.8:
		k.AuthenticationTimeout = between(rng, 2*time.Minute, 20*time.Minute)
	default:
		k.AuthenticationTimeout = between(rng, 2*time.Hour, 6*time.Hour)
	}
}

// event is something that happens at a simulated time: a client's
// request, a webhook's delivery, a clean-up pass.
type event struct {
	at     time.Time
	seq    int
	client bool // a client's action: the run's faults stop once none is left
	what   string
	fn     func()
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// world is one run: the real service on its own database, the simulated
// provider, the clients, and the schedule of what happens next.
type world struct {
	t    testing.TB
	seed uint64
	rng  *rand.Rand
	// mrng is the run's second stream: every choice about manual capture
	// (its knobs, the captures and cancels, the faults of the provider's
	// Capture, Void and GetCharge) comes from it, so that a run without
	// manual payments draws from rng exactly what it drew before.
	mrng *rand.Rand
	// arng is the run's third stream: every choice about 3-D Secure (its
	// knobs, which payments ask for it, what their customers do and when,
	// the roads that carry the outcome, the faults of the abandonment's
	// cancellation).
	arng  *rand.Rand
	knobs Knobs
	ctx   context.Context

	clock   *clock.Fake
	start   time.Time
	pool    *pgxpool.Pool
	prov    *simProvider
	core    *app.Core
	janitor *cleanup.Janitor

	q        queue
	seq      int
	clients  int // client events in the queue
	lastTick time.Time
	faults   bool
	actor    string // who acts now: client, webhook, reconciler

	names       map[string]string // our ids -> the run's stable names
	pendingName string            // the name of the next id first seen
	trace       []string
	failures    []string
	failed      map[string]bool
	// notes are what the run saw that breaks no invariant but is worth a
	// look (logged with -v): note.
	notes []string

	// auth is the authenticate_payment operation, and returns the
	// customer's return route (GET /payments/{id}/return) it serves.
	auth    *payments.Authentications
	returns http.Handler
	// threeDS: the payments whose charge waits for its customer (by id).
	threeDS map[string]bool

	pays []*payClient
	refs []*refundClient
	acts []*actionClient
	// captures and cancels are the capture_payment and cancel_payment
	// operations, as app.New built them.
	captures, cancels *authorizations.Service
	saw               map[string]seen // final answers clients got, by resource id
	looked            map[string]string
	// uncertain counts, by provider key, the answers to the reconciler
	// that left the outcome unknown (a refused or lost send, a lookup
	// that could not say).
	uncertain map[string]int
}

// seen is a final answer a client got.
type seen struct {
	status int
	body   []byte
	who    string
}

// serviceConfig is the one place the service's settings are chosen. The
// lookup lag is the provider's declaration (simProvider.LookupLag), as
// app.New reads it from every provider; the refusal re-check is the
// default (a minute, never before the lag).
func (w *world) serviceConfig() app.Config {
	return app.Config{
		ReplayTTL: replayTTL, Lease: lease, RetryAfter: time.Second, CommitMode: pgtest.CommitMode(),
		ProviderTimeout: callTimeout, ProviderKeyWindow: keyWindow,
		// A constant backoff of two ticks, and the reconciler run on the
		// tick grid only: the backoff's jitter (package backoff draws it
		// from the global source) then never changes which pass claims a
		// key, and the run stays the seed's.
		Recovery:     idempotency.RecoveryPolicy{Backoff: backoff.Policy{Base: 2 * tick, Max: 2 * tick}},
		PaymentHooks: w.hooks(),
		Settings: modulesetting.Values{authorizations.SettingTTL: w.knobs.AuthorizationTTL,
			payments.SettingAuthenticationTimeout: w.knobs.AuthenticationTimeout},
	}
}

func simLogger() *slog.Logger {
	if os.Getenv("SIM_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// worldRand is a seed's three random streams (see world.mrng, world.arng).
type worldRand struct{ rng, mrng, arng *rand.Rand }

func newWorldRand(seed uint64) worldRand {
	return worldRand{
		rng:  rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		mrng: rand.New(rand.NewPCG(seed^0x5851f42d4c957f2d, seed)),
		arng: rand.New(rand.NewPCG(seed^0x14057b7ef767814f, seed^0xda942042e4dd58b5)),
	}
}

func newWorld(t testing.TB, seed uint64) *world {
	streams := newWorldRand(seed)
	rng := streams.rng
	w := &world{
		t: t, seed: seed, rng: rng, mrng: streams.mrng, arng: streams.arng, ctx: context.Background(),
		clock: clock.NewFake(epoch), start: epoch, faults: true,
		names: map[string]string{}, failed: map[string]bool{}, saw: map[string]seen{}, looked: map[string]string{},
		uncertain: map[string]int{}, threeDS: map[string]bool{},
	}
	w.knobs = drawKnobs(rng)
	drawManualKnobs(w.mrng, &w.knobs)
	drawAuthenticationKnobs(w.arng, &w.knobs)
	w.pool = pgtest.NewPool(t)
	w.prov = newSimProvider(w)
	log := simLogger()
	w.core = app.New(app.Deps{
		DB: w.pool, Provider: w.prov, Clock: w.clock, Log: log, Metrics: metrics.New(prometheus.NewRegistry()),
	}, w.serviceConfig())
	for _, op := range w.core.Operations {
		if a, ok := op.(*payments.Authentications); ok {
			w.auth = a
		}
		if svc, ok := op.(*authorizations.Service); ok {
			switch svc.Name() {
			case authorizations.OperationCapture:
				w.captures = svc
			case authorizations.OperationCancel:
				w.cancels = svc
			}
		}
	}
	if w.captures == nil || w.cancels == nil || w.auth == nil {
		t.Fatal("app.New built no capture_payment, cancel_payment or authenticate_payment operation")
	}
	r := chi.NewRouter()
	w.auth.PublicRoutes(r)
	w.returns = r
	w.janitor = cleanup.New(w.pool, w.clock, cleanup.Policy{ReplayTTL: replayTTL, MetadataTTL: metadataTTL}, log)
	w.lastTick = w.start.Add(-tick)
	return w
}

// at renders a simulated time as the time since the run started.
func (w *world) at(t time.Time) string {
	d := t.Sub(w.start)
	if d < 0 {
		return "-" + fmtDur(-d)
	}
	return "+" + fmtDur(d)
}

func fmtDur(d time.Duration) string {
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	s := d.Round(time.Millisecond).String()
	if days > 0 {
		return fmt.Sprintf("%dd%s", days, s)
	}
	return s
}

func (w *world) tracef(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%-14s %-10s ", w.at(w.clock.Now()), w.actor)+fmt.Sprintf(format, args...))
}

// name is the run's name for one of our ids: stable across replays of the
// seed, where the ids themselves are random.
func (w *world) name(id string) string {
	if n, ok := w.names[id]; ok {
		return n
	}
	if n := w.actionName(id); n != "" {
		w.names[id] = n
		return n
	}
	n := w.pendingName
	if n == "" {
		n = "?" + id
	}
	w.pendingName = ""
	w.names[id] = n
	return n
}

func (w *world) nameOfKey(providerKey string) string {
	return w.name(strings.TrimPrefix(providerKey, "paymentsapi:"))
}

// fail records a broken invariant, once per kind and resource.
func (w *world) fail(kind, resource, format string, args ...any) {
	if w.failed[kind+"/"+resource] {
		return
	}
	w.failed[kind+"/"+resource] = true
	msg := fmt.Sprintf("[%s] at %s: ", kind, w.at(w.clock.Now())) + fmt.Sprintf(format, args...)
	w.failures = append(w.failures, msg)
	w.tracef("INVARIANT BROKEN %s", msg)
}

// note records something worth a look that breaks no invariant: kind,
// then what; it is traced and logged (go test -v).
func (w *world) note(kind, format string, args ...any) {
	msg := fmt.Sprintf("[%s] at %s: ", kind, w.at(w.clock.Now())) + fmt.Sprintf(format, args...)
	w.notes = append(w.notes, msg)
	w.tracef("NOTE %s", msg)
}

func (w *world) schedule(at time.Time, client bool, what string, fn func()) {
	if now := w.clock.Now(); at.Before(now) {
		at = now
	}
	w.seq++
	if client {
		w.clients++
	}
	heap.Push(&w.q, &event{at: at, seq: w.seq, client: client, what: what, fn: fn})
}

// hooks are the payments' failpoints: while faults are on, an owner
// passing one dies there with probability PCrash.
func (w *world) hooks() payments.Hooks {
	at := func(point string) func(context.Context, string) error {
		return func(_ context.Context, id string) error {
			if !w.faults || w.rng.Float64() >= w.knobs.PCrash {
				return nil
			}
			w.tracef("crash: owner of %s dies %s", w.name(id), point)
			return errors.New("simulated crash " + point)
		}
	}
	return payments.Hooks{
		AfterClaim: at("after claim"), AfterRequestSent: at("after request sent"), AfterProviderAnswer: at("after provider answer"),
	}
}

// objectCreated is the provider's news of a new object: its events are
// delivered (or not) as webhooks, duplicated, early or late.
func (w *world) objectCreated(o *object) {
	if w.rng.Float64() >= w.knobs.PWebhook {
		return
	}
	n := 1
	if w.rng.Float64() < 0.3 {
		n += 1 + w.rng.IntN(2)
	}
	res := idempotency.Resource{Type: payments.ResourceType, ID: o.OurID}
	if o.Refund {
		res.Type = refunds.ResourceType
	}
	for range n {
		var d time.Duration
		switch r := w.rng.Float64(); {
		case r < 0.4: // early: before lookups can see the object
			d = between(w.rng, 0, 15*time.Second)
		case r < 0.75:
			d = w.knobs.LookupLag + between(w.rng, 0, 2*time.Minute)
		default: // late: hours, perhaps past the abandon time
			d = between(w.rng, time.Hour, 30*time.Hour)
		}
		w.schedule(o.ProcessedAt.Add(d), false, "webhook "+o.ID, func() { w.webhook(res, o.ID) })
	}
}

// webhook delivers an event about provider object objID that names res.
// An event about the charge of a payment that waits for its customer names
// its authentication too (a charge stands for both: webhooks.kindsOf), in
// the modules' order.
func (w *world) webhook(res idempotency.Resource, objID string) {
	w.actor = "webhook"
	outcome, err := w.core.Reconciler.ResolveNow(w.ctx, res)
	w.tracef("webhook for %s (%s): ResolveNow -> %s %v", w.name(res.ID), objID, outcome, errText(err))
	if res.Type == payments.ResourceType && w.threeDS[res.ID] {
		auth := idempotency.Resource{Type: payments.ResourceAuthentication, ID: res.ID}
		outcome, err := w.core.Reconciler.ResolveNow(w.ctx, auth)
		if errors.Is(err, idempotency.ErrNotFound) {
			outcome, err = "no authentication key", nil
		}
		w.tracef("webhook for %s's authentication (%s): ResolveNow -> %s %v", w.name(res.ID), objID, outcome, errText(err))
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return "error: " + err.Error()
}

// nextTick is the next reconciler pass worth running: the first tick of
// the grid at or after the earliest time a key becomes due, and after the
// last pass. ok is false when no key will ever be due.
func (w *world) nextTick() (time.Time, bool) {
	var due *time.Time
	err := w.pool.QueryRow(w.ctx, `
		SELECT min(GREATEST(recovery_next_at, COALESCE(lease_expires_at, recovery_next_at)))
		FROM idempotency_keys
		WHERE response_status IS NULL AND manual_review_at IS NULL AND recovery_next_at IS NOT NULL`).Scan(&due)
	if err != nil {
		w.t.Fatal(err)
	}
	if due == nil {
		return time.Time{}, false
	}
	at := *due
	if min := w.lastTick.Add(tick); at.Before(min) {
		at = min
	}
	n := (at.Sub(w.start) + tick - 1) / tick
	return w.start.Add(n * tick), true
}

func (w *world) reconcile(at time.Time) {
	w.clock.Set(at)
	w.lastTick = at
	w.actor = "reconciler"
	stats, err := w.core.Reconciler.RunOnce(w.ctx, 50)
	if err != nil {
		w.t.Fatalf("reconciler: %v", err)
	}
	if len(stats) > 0 {
		w.tracef("reconciler pass: %v", map[string]int(stats))
	}
	w.alignLooks()
}

// alignLooks rounds every booked look up to the reconciler's grid. The
// reconciler books its next look at a key it could not resolve after a
// wait that package backoff jitters with the global random source, which
// a seed cannot control: on the grid, the pass that claims the key is the
// seed's all the same, but the order of the keys due in one pass (by
// recovery_next_at, then id) would not be, and with it the order of the
// provider's calls and of the faults they draw. Rounded up, a key is
// claimed by the same pass as before (passes run on the grid only), and
// the keys of one pass in the order of their ids.
func (w *world) alignLooks() {
	_, err := w.pool.Exec(w.ctx, `
		UPDATE idempotency_keys
		SET recovery_next_at = $1::timestamptz
		    + ceil(extract(epoch FROM recovery_next_at - $1::timestamptz) / $2::numeric) * $2::numeric * interval '1 second'
		WHERE response_status IS NULL AND recovery_next_at IS NOT NULL
		  AND recovery_next_at <> $1::timestamptz
		    + ceil(extract(epoch FROM recovery_next_at - $1::timestamptz) / $2::numeric) * $2::numeric * interval '1 second'`,
		w.start, int64(tick/time.Second))
	if err != nil {
		w.t.Fatalf("align the reconciler's looks: %v", err)
	}
}

// run plays the run: the clients' requests, the webhooks, clean-up and
// the reconciler's passes in time order; once no client action is left
// the faults stop (healing), and the run ends when nothing is due.
func (w *world) run() {
	for i := range w.knobs.Payments {
		w.newPayClient(i + 1)
	}
	for d := 6 * time.Hour; d <= 10*24*time.Hour; d += 6 * time.Hour {
		w.schedule(w.start.Add(d), false, "clean-up", w.cleanup)
	}
	limit := w.start.Add(20 * 24 * time.Hour)
	for steps := 0; ; steps++ {
		if w.faults && w.clients == 0 {
			w.faults = false
			w.actor = "sim"
			w.tracef("faults stop: healing")
		}
		tickAt, due := w.nextTick()
		var next *event
		if len(w.q) > 0 {
			next = w.q[0]
		}
		if next == nil && !due {
			break
		}
		if steps > 20000 || (due && tickAt.After(limit)) || (next != nil && next.at.After(limit)) {
			w.fail("quiescence", "run", "the run did not settle by %s (%d steps)", w.at(limit), steps)
			break
		}
		if due && (next == nil || !tickAt.After(next.at)) {
			w.reconcile(tickAt)
		} else {
			heap.Pop(&w.q)
			if next.client {
				w.clients--
			}
			if next.at.After(w.clock.Now()) {
				w.clock.Set(next.at)
			}
			next.fn()
		}
		w.checkTimeliness()
	}
	// Past every window: abandon, replay, provider key window.
	w.clock.Set(w.clock.Now().Add(replayTTL + keyWindow + time.Hour))
	w.actor = "sim"
	w.tracef("clock moved past every window")
	w.reconcile(w.clock.Now())
	if _, due := w.nextTick(); due {
		w.fail("quiescence", "run", "keys still due after the healing phase")
	}
	w.checkFinal()
}

func (w *world) cleanup() {
	w.actor = "clean-up"
	st, err := w.janitor.RunOnce(w.ctx)
	if err != nil {
		w.t.Fatalf("clean-up: %v", err)
	}
	if st.BodiesErased+st.KeysDeleted > 0 {
		w.tracef("clean-up: %d bodies erased, %d keys deleted", st.BodiesErased, st.KeysDeleted)
	}
}

// report fails t with the run's broken invariants, its knobs, the trace
// of the resources involved, and the command that replays it.
func (w *world) report() {
	if len(w.failures) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d broke %d invariant(s):\n", w.seed, len(w.failures))
	for _, f := range w.failures {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	fmt.Fprintf(&b, "knobs: %+v\n", w.knobs)
	mode := ""
	if m := pgtest.CommitMode(); m != "" {
		mode = "TEST_COMMIT_MODE=" + m + " "
	}
	fmt.Fprintf(&b, "replay: %sgo test ./internal/moneysim -run 'TestSimulation$' -count=1 -v -sim.seed=%d   (or SIM_SEED=%d; SIM_TRACE=1 for the whole trace)\n", mode, w.seed, w.seed)
	involved := map[string]bool{}
	for _, f := range w.failures {
		for _, word := range strings.FieldsFunc(f, func(r rune) bool { return r == ' ' || r == ',' || r == ':' || r == '(' || r == ')' }) {
			if (strings.HasPrefix(word, "pay") || strings.HasPrefix(word, "ref")) && len(word) > 3 && word[3] >= '0' && word[3] <= '9' {
				involved[word] = true
				// An action (pay3.cap) involves its payment (pay3).
				if base, _, ok := strings.Cut(word, "."); ok && strings.HasPrefix(word, "pay") {
					involved[base] = true
				}
			}
		}
	}
	fmt.Fprintf(&b, "trace (lines about the resources involved):\n")
	for _, line := range w.trace {
		keep := os.Getenv("SIM_TRACE") == "1" || strings.Contains(line, "INVARIANT") || strings.Contains(line, "faults stop")
		for n := range involved {
			if containsName(line, n) {
				keep = true
			}
		}
		if keep {
			fmt.Fprintf(&b, "  %s\n", line)
		}
	}
	w.t.Error(b.String())
}

// containsName reports whether line names n as a whole word (pay1 is not
// pay11).
func containsName(line, n string) bool {
	for i := 0; ; {
		j := strings.Index(line[i:], n)
		if j < 0 {
			return false
		}
		end := i + j + len(n)
		if end == len(line) || !(line[end] >= '0' && line[end] <= '9' || line[end] == '.' && end+1 < len(line) && line[end+1] >= '0' && line[end+1] <= '9') {
			return true
		}
		i = end
	}
}
