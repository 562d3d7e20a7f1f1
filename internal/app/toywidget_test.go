package app_test

// This file is a toy operation, create_widget, written the way docs/design.md's
// chapter "Adding an operation" says an operation is written (that chapter
// walks this file), as if it were its own package: a command and its
// fingerprint, a resource on its own table (statemachinetest's widget, with
// the columns a widget needs beside it), a state machine, a provider port
// of its own, and one operation.Module value. toy_test.go registers it only
// through app.Config.ExtraModules and proves that everything else comes
// from that one registration.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/providerflow"
	smt "github.com/paymentsapi/paymentsapi/internal/statemachine/statemachinetest"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// The toy's names: its operation (its keys' scope), its resource type, its
// events, its ledger entry, its problem codes.
const (
	widgetOperation = "create_widget"
	widgetType      = "widget"

	eventWidgetCreated  = "WidgetCreated"
	eventWidgetMade     = "WidgetMade"
	eventWidgetDeclined = "WidgetDeclined"
	entryWidgetMade     = "WIDGET_MADE"

	codeWidgetDeclined      problem.Code = "WIDGET_DECLINED"
	codeWidgetNotFound      problem.Code = "WIDGET_NOT_FOUND"
	codeWidgetAccountClosed problem.Code = "WIDGET_ACCOUNT_CLOSED"

	// widgetMetadataID is the metadata key under which the widget factory's
	// objects name our widget (as stripeprovider.MetadataPaymentID does).
	widgetMetadataID = "widget_id"
)

// widgetMigration is what the toy's migration adds to statemachinetest's
// widget module (its table, audit table, state_machine_moves rows and
// trigger): the command's columns, and its ledger entry type, which
// ledger_entries' CHECK must allow.
const widgetMigration = `
ALTER TABLE widgets
    ADD COLUMN account_id   text   NOT NULL DEFAULT '',
    ADD COLUMN amount_minor bigint NOT NULL DEFAULT 0,
    ADD COLUMN currency     text   NOT NULL DEFAULT '';
ALTER TABLE ledger_entries
    DROP CONSTRAINT ledger_entries_entry_type_check,
    ADD CONSTRAINT ledger_entries_entry_type_check
        CHECK (entry_type IN ('PAYMENT_SUCCEEDED', 'REFUND_SUCCEEDED', 'WIDGET_MADE'));
`

// --- the command ---------------------------------------------------------

// widgetRequest is the JSON body of POST /widgets.
type widgetRequest struct {
	AccountID string `json:"accountId"`
	Amount    string `json:"amount"`
	Currency  string `json:"currency"`
	Note      string `json:"note"`
}

// widgetCommand is a validated widget order.
type widgetCommand struct {
	AccountID   string
	AmountMinor int64
	Currency    string
	Note        string
}

func (r widgetRequest) validate() (widgetCommand, error) {
	var errs validate.Collector
	cmd := widgetCommand{AccountID: r.AccountID, Note: r.Note}
	if r.AccountID == "" {
		errs.Add("accountId", "is required")
	}
	currency, err := money.NormalizeCurrency(r.Currency)
	if err != nil {
		errs.Add("currency", "must be an ISO 4217 code")
	} else if cmd.AmountMinor, err = money.Parse(r.Amount, currency); err != nil {
		errs.Add("amount", "must be a decimal string greater than zero")
	}
	cmd.Currency = currency
	if len(r.Note) > 100 || !validate.StorableText(r.Note) {
		errs.Add("note", "must be text of at most 100 bytes")
	}
	return cmd, errs.Err()
}

// fingerprint is the one definition of "the same widget order".
func (c widgetCommand) fingerprint() []byte {
	canonical, _ := json.Marshal([]any{widgetOperation, c.AccountID, c.AmountMinor, c.Currency, c.Note})
	sum := sha256.Sum256(canonical)
	return sum[:]
}

// --- the provider port ---------------------------------------------------

// widgetAnswer is what the widget factory says about one of its widgets.
type widgetAnswer struct {
	Ref         string
	Status      provider.Status
	DeclineCode string
}

// widgetMaker is the toy's provider port: the widget factory. Its errors
// are the provider package's sentinels, which providerflow reads
// (ErrUnavailable, ErrUnknownOutcome, ErrNotFound, ErrAmbiguous).
type widgetMaker interface {
	// Make asks the factory for a widget under key (idempotent per key).
	Make(ctx context.Context, key string) (widgetAnswer, error)
	// Find asks what became of key.
	Find(ctx context.Context, key string) (widgetAnswer, error)
	// LookupLag is how long after a Make a Find may still miss it.
	LookupLag() time.Duration
}

// widgetProviderKey is the key the factory knows widget id by.
func widgetProviderKey(id string) string { return "paymentsapi-widget:" + id }

// --- the resource ----------------------------------------------------------

// widget is the toy's resource, and its result.
type widget struct {
	ID, TenantID            string
	State                   smt.WidgetState
	Note                    string
	AccountID               string
	AmountMinor             int64
	Currency                string
	ProviderReference       string
	DeclineCode             string
	FirstSentAt, LastSentAt *time.Time
	CreatedAt, UpdatedAt    time.Time
}

func (w widget) Outcome() string {
	switch w.State {
	case smt.WidgetSucceeded:
		return "succeeded"
	case smt.WidgetDeclined:
		return "declined"
	}
	return "processing"
}

// widgetView is a widget in answers and events.
type widgetView struct {
	WidgetID          string `json:"widgetId"`
	Status            string `json:"status"`
	AccountID         string `json:"accountId"`
	Amount            string `json:"amount"`
	Currency          string `json:"currency"`
	Note              string `json:"note"`
	ProviderReference string `json:"providerReference,omitempty"`
}

func (w widget) view() widgetView {
	return widgetView{WidgetID: w.ID, Status: string(w.State), AccountID: w.AccountID,
		Amount: money.Format(w.AmountMinor, w.Currency), Currency: w.Currency, Note: w.Note,
		ProviderReference: w.ProviderReference}
}

// eventPayload is the widget's view with its tenant.
func (w widget) eventPayload() any {
	return struct {
		widgetView
		TenantID string `json:"tenantId"`
	}{w.view(), w.TenantID}
}

// The toy's own errors.
var (
	errWidgetNotFound = errors.New("widget not found")
	// errAccountClosed: the account may order no widget (a rule of the
	// toy's, checked before anything is written).
	errAccountClosed = errors.New("this account is closed for widget orders")
)

// closedAccount is the one account errAccountClosed refuses.
const closedAccount = "acc_closed"

// --- the module ------------------------------------------------------------

// widgetModule is the toy's one registration, on the factory maker.
func widgetModule(maker widgetMaker) operation.Module {
	return operation.Module{
		Name:     widgetOperation,
		Resource: operation.Resource{Type: widgetType, IDField: "widgetId", ProviderKey: widgetProviderKey},
		Events: []operation.Event{
			{Type: eventWidgetCreated},
			{Type: eventWidgetMade, Ledger: widgetLedgerEntry},
			{Type: eventWidgetDeclined},
		},
		ProviderEvents: []operation.ProviderEvent{
			{Type: "widget.made", Object: "widget", MetadataID: widgetMetadataID},
		},
		New: func(env operation.Env) (operation.Instance, error) {
			if maker == nil {
				return nil, errors.New("widgets: no widget maker")
			}
			return newWidgets(env, maker), nil
		},
	}
}

// widgetLedgerEntry reads the entry a WidgetMade event books.
func widgetLedgerEntry(e outbox.Event) (operation.LedgerEntry, error) {
	var w struct {
		widgetView
		TenantID string `json:"tenantId"`
	}
	if err := json.Unmarshal(e.Payload, &w); err != nil {
		return operation.LedgerEntry{}, fmt.Errorf("payload is not a widget: %w", err)
	}
	if w.WidgetID != e.AggregateID || w.Status != string(smt.WidgetSucceeded) || w.AccountID == "" {
		return operation.LedgerEntry{}, fmt.Errorf("not a made widget: %s", e.Payload)
	}
	minor, err := money.Parse(w.Amount, w.Currency)
	if err != nil {
		return operation.LedgerEntry{}, err
	}
	return operation.LedgerEntry{Type: entryWidgetMade, PaymentID: w.WidgetID, TenantID: w.TenantID,
		AccountID: w.AccountID, AmountMinor: minor, Currency: w.Currency, ProviderReference: w.ProviderReference}, nil
}

// --- the service -----------------------------------------------------------

// widgets is the built operation (operation.Instance).
type widgets struct {
	env   operation.Env
	maker widgetMaker
	flow  *providerflow.Flow[smt.WidgetState]
}

var _ operation.Instance = (*widgets)(nil)

func newWidgets(env operation.Env, maker widgetMaker) *widgets {
	c := env.Config
	return &widgets{env: env, maker: maker, flow: &providerflow.Flow[smt.WidgetState]{
		Machine: smt.WidgetMachine,
		States: providerflow.States[smt.WidgetState]{
			Sent: smt.WidgetSent, Succeeded: smt.WidgetSucceeded, Declined: smt.WidgetDeclined,
			Retryable: smt.WidgetRetryable, Unknown: smt.WidgetUnknown,
		},
		Clock: env.Clock, KeyWindow: c.ProviderKeyWindow, Timeout: c.ProviderTimeout,
		// Env's lag is PROVIDER_LOOKUP_LAG and the payment provider's: the
		// port of this operation declares its own.
		LookupLag: max(c.ProviderLookupLag, maker.LookupLag()), RefusalGrace: c.RefusalRecheck,
		Metrics: env.Metrics, SendOp: "widget_make", LookupOp: "widget_find",
	}}
}

func (s *widgets) Name() string { return widgetOperation }

// create orders a widget under the tenant's key.
func (s *widgets) create(ctx context.Context, tenant, key string, cmd widgetCommand, wait time.Duration) (idempotency.Reply, error) {
	if cmd.AccountID == closedAccount {
		return idempotency.Reply{}, errAccountClosed
	}
	now := s.env.Clock.Now()
	w := widget{ID: ids.New("wdg_"), TenantID: tenant, State: smt.WidgetMachine.Initial(), Note: cmd.Note,
		AccountID: cmd.AccountID, AmountMinor: cmd.AmountMinor, Currency: cmd.Currency, CreatedAt: now, UpdatedAt: now}
	event, err := outbox.NewEvent(ctx, eventWidgetCreated, widgetType, w.ID, w.eventPayload(), now)
	if err != nil {
		return idempotency.Reply{}, err
	}
	return s.env.Engine.Do(ctx, s, idempotency.Request{
		Scope:       idempotency.Scope{Tenant: tenant, Operation: widgetOperation, Key: key},
		Fingerprint: cmd.fingerprint(),
		Resource:    idempotency.Resource{Type: widgetType, ID: w.ID},
		Create: func(b *claim.Batch) {
			b.Queue(claim.Gated(func(claimed string) string {
				return `INSERT INTO widgets (id, tenant_id, state, note, account_id, amount_minor, currency, created_at, updated_at)
				SELECT $1, $2, $3, $4, $5, $6, $7, $8, $8 WHERE ` + claimed
			}, w.ID, w.TenantID, string(w.State), w.Note, w.AccountID, w.AmountMinor, w.Currency, now))
			b.Queue(smt.WidgetMachine.Created(context.Background(), w.ID, "request accepted", now))
			b.Queue(outbox.IfClaimed(event))
		},
		Wait: wait,
	})
}

// get returns the tenant's widget id, or errWidgetNotFound.
func (s *widgets) get(ctx context.Context, tenant, id string) (widget, error) {
	var w widget
	err := s.env.DB.QueryRow(ctx, `
		SELECT id, tenant_id, state, note, account_id, amount_minor, currency, coalesce(provider_reference, ''),
		       coalesce(decline_code, ''), first_sent_at, last_sent_at, created_at, updated_at
		FROM widgets WHERE id = $1 AND tenant_id = $2`, id, tenant).
		Scan(&w.ID, &w.TenantID, &w.State, &w.Note, &w.AccountID, &w.AmountMinor, &w.Currency, &w.ProviderReference,
			&w.DeclineCode, &w.FirstSentAt, &w.LastSentAt, &w.CreatedAt, &w.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return widget{}, errWidgetNotFound
	}
	return w, err
}

// Resume takes a widget whose key the caller owns through the factory.
func (s *widgets) Resume(ctx context.Context, own *idempotency.Owner) (idempotency.Result, error) {
	w, err := s.get(ctx, own.Tenant, own.Resource.ID)
	if err != nil {
		return nil, err
	}
	return s.flow.Resume(ctx, own, providerflow.Subject[smt.WidgetState]{
		ID: w.ID, State: w.State, CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt,
		FirstSentAt: w.FirstSentAt, LastSentAt: w.LastSentAt, Op: widgetInFlow{s, w},
	})
}

// widgetInFlow is widget w as the provider flow takes it through the
// factory.
type widgetInFlow struct {
	s *widgets
	w widget
}

func (f widgetInFlow) Send(ctx context.Context) (providerflow.Answer, error) {
	return flowAnswer(f.s.maker.Make(ctx, widgetProviderKey(f.w.ID)))
}

func (f widgetInFlow) Lookup(ctx context.Context) (providerflow.Answer, error) {
	return flowAnswer(f.s.maker.Find(ctx, widgetProviderKey(f.w.ID)))
}

func (f widgetInFlow) Settle(ctx context.Context, b *pgx.Batch, to smt.WidgetState, a providerflow.Answer, now time.Time) (idempotency.Result, error) {
	w := f.w
	if to != w.State {
		w.UpdatedAt = now
	}
	w.State = to
	var eventType string
	switch to {
	case smt.WidgetSucceeded:
		w.ProviderReference, eventType = a.ID, eventWidgetMade
	case smt.WidgetDeclined:
		w.ProviderReference, w.DeclineCode, eventType = a.ID, a.DeclineCode, eventWidgetDeclined
	}
	if eventType != "" {
		e, err := outbox.NewEvent(ctx, eventType, widgetType, w.ID, w.eventPayload(), now)
		if err != nil {
			return nil, err
		}
		outbox.Queue(b, e)
	}
	return w, nil
}

func flowAnswer(a widgetAnswer, err error) (providerflow.Answer, error) {
	return providerflow.Answer{ID: a.Ref, Status: a.Status, DeclineCode: a.DeclineCode}, err
}

// Routes adds POST /widgets and GET /widgets/{widgetId}.
func (s *widgets) Routes(r chi.Router, api operation.HTTP) {
	r.Post("/widgets", func(w http.ResponseWriter, r *http.Request) {
		var req widgetRequest
		key, ok := api.Command(w, r, &req)
		if !ok {
			return
		}
		cmd, err := req.validate()
		if err != nil {
			api.Error(w, r, err)
			return
		}
		reply, err := s.create(r.Context(), api.Tenant(r), key, cmd, api.Wait(r))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		api.Reply(w, r, reply)
	})
	r.Get("/widgets/{widgetId}", func(w http.ResponseWriter, r *http.Request) {
		wd, err := s.get(r.Context(), api.Tenant(r), chi.URLParam(r, "widgetId"))
		if err != nil {
			api.Error(w, r, err)
			return
		}
		api.JSON(w, http.StatusOK, wd.view())
	})
}

// Render answers a widget: 201 made, 402 WIDGET_DECLINED (stored, as any
// final answer), else 202 with Retry-After (not stored).
func (s *widgets) Render(res idempotency.Result) (idempotency.Response, error) {
	w, ok := res.(widget)
	if !ok {
		return idempotency.Response{}, fmt.Errorf("widgets: cannot render a %T", res)
	}
	location := "/widgets/" + w.ID
	switch w.State {
	case smt.WidgetSucceeded:
		return httpapi.ResourceResponse(http.StatusCreated, w.view(), location, 0), nil
	case smt.WidgetDeclined:
		p := problem.Titled(http.StatusPaymentRequired, codeWidgetDeclined, "Widget declined", "The widget factory declined the order.")
		return httpapi.ProblemResponse(p.Set("widgetId", w.ID).Set("declineCode", w.DeclineCode)), nil
	default:
		return httpapi.ResourceResponse(http.StatusAccepted, w.view(), location, s.env.Engine.RetryAfter()), nil
	}
}

// Problem is the problem of one of the toy's own errors, else nil.
func (s *widgets) Problem(err error) *problem.Problem {
	switch {
	case errors.Is(err, errWidgetNotFound):
		return problem.Titled(http.StatusNotFound, codeWidgetNotFound, "Widget not found", "No such widget.")
	case errors.Is(err, errAccountClosed):
		return problem.Titled(http.StatusConflict, codeWidgetAccountClosed, "Account closed", err.Error())
	}
	return nil
}

// --- the fake widget factory ---------------------------------------------

// makeBehaviour is what the fake factory does with one Make.
type makeBehaviour int

const (
	makes       makeBehaviour = iota + 1 // makes the widget and says so
	declines                             // declines (out of stock)
	losesAnswer                          // makes it; the answer is lost (timeout)
	blocks                               // waits for release, then makes it
)

// fakeMaker is a widget factory in memory: idempotent per key, with a
// queue of behaviours for the next Makes (a Make nobody queued fails the
// test), and counts of the calls per key.
type fakeMaker struct {
	t *testing.T

	mu      sync.Mutex
	next    []makeBehaviour
	held    map[string]widgetAnswer
	makes   map[string]int
	finds   map[string]int
	entered chan string   // a blocking Make says it has begun
	release chan struct{} // and waits for this
}

func newFakeMaker(t *testing.T) *fakeMaker {
	return &fakeMaker{t: t, held: map[string]widgetAnswer{}, makes: map[string]int{}, finds: map[string]int{},
		entered: make(chan string, 1), release: make(chan struct{})}
}

// will queues what the next Makes do.
func (f *fakeMaker) will(b ...makeBehaviour) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next = append(f.next, b...)
}

func (f *fakeMaker) Make(ctx context.Context, key string) (widgetAnswer, error) {
	f.mu.Lock()
	f.makes[key]++
	if a, ok := f.held[key]; ok {
		f.mu.Unlock()
		return a, nil
	}
	if len(f.next) == 0 {
		f.mu.Unlock()
		f.t.Errorf("an unexpected Make of %s", key)
		return widgetAnswer{}, provider.ErrUnavailable
	}
	b := f.next[0]
	f.next = f.next[1:]
	ref := "wm_" + strconv.Itoa(len(f.held)+1)
	made := widgetAnswer{Ref: ref, Status: provider.StatusSucceeded}
	switch b {
	case declines:
		f.held[key] = widgetAnswer{Ref: ref, Status: provider.StatusDeclined, DeclineCode: "out_of_stock"}
		f.mu.Unlock()
		return f.held[key], nil
	case losesAnswer:
		f.held[key] = made
		f.mu.Unlock()
		return widgetAnswer{}, fmt.Errorf("%w: timeout", provider.ErrUnknownOutcome)
	case blocks:
		f.mu.Unlock()
		f.entered <- key
		select {
		case <-f.release:
		case <-ctx.Done():
			return widgetAnswer{}, fmt.Errorf("%w: %v", provider.ErrUnknownOutcome, ctx.Err()) //nolint:errorlint
		}
		f.mu.Lock()
		f.held[key] = made
		f.mu.Unlock()
		return made, nil
	default:
		f.held[key] = made
		f.mu.Unlock()
		return made, nil
	}
}

func (f *fakeMaker) Find(_ context.Context, key string) (widgetAnswer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finds[key]++
	if a, ok := f.held[key]; ok {
		return a, nil
	}
	return widgetAnswer{}, fmt.Errorf("%w: no widget for %s", provider.ErrNotFound, key)
}

func (f *fakeMaker) LookupLag() time.Duration { return 0 }

// calls returns the Makes and Finds of widget id's key.
func (f *fakeMaker) calls(id string) (makes, finds int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.makes[widgetProviderKey(id)], f.finds[widgetProviderKey(id)]
}
