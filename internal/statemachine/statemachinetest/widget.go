package statemachinetest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// WidgetState is a state of the widget, a toy resource with the shape of a
// payment: the tests of statemachine and providerflow run on it, so that
// neither needs a real operation.
type WidgetState string

// The widget's states, named as a payment's.
const (
	WidgetReceived  WidgetState = "RECEIVED"
	WidgetSent      WidgetState = "PROVIDER_REQUEST_SENT"
	WidgetSucceeded WidgetState = "SUCCEEDED"
	WidgetDeclined  WidgetState = "DECLINED"
	WidgetRetryable WidgetState = "FAILED_RETRYABLE"
	WidgetUnknown   WidgetState = "UNKNOWN_REQUIRES_RECOVERY"
	WidgetCanceled  WidgetState = "CANCELED"
)

// WidgetStates lists every state of the widget.
func WidgetStates() []WidgetState {
	return []WidgetState{WidgetReceived, WidgetSent, WidgetSucceeded, WidgetDeclined,
		WidgetRetryable, WidgetUnknown, WidgetCanceled}
}

// WidgetMachine is the widget's machine: a payment's moves, in the toy
// table CreateWidgets makes.
var WidgetMachine = statemachine.New("widget",
	statemachine.Table{Name: "widgets", Transitions: "widget_transitions", ForeignKey: "widget_id"},
	WidgetReceived,
	map[WidgetState][]WidgetState{
		WidgetReceived:  {WidgetSent, WidgetCanceled},
		WidgetSent:      {WidgetSucceeded, WidgetDeclined, WidgetRetryable, WidgetUnknown},
		WidgetUnknown:   {WidgetSucceeded, WidgetDeclined, WidgetSent},
		WidgetRetryable: {WidgetSent, WidgetCanceled},
	}).CreatedIn(WidgetSent) // as a payment is (00029)

// Final reports whether no move leaves s.
func (s WidgetState) Final() bool { return WidgetMachine.Final(s) }

// NeedsRecovery reports whether a widget in s may have reached the
// provider without its outcome being recorded.
func (s WidgetState) NeedsRecovery() bool { return s == WidgetSent || s == WidgetUnknown }

// widgetSQL is the widget module's migration: its table, its audit table,
// its machine's rows in state_machine_moves and the shared trigger, as
// migrations 00006, 00007, 00009, 00017 and 00029 install them for
// payments and refunds.
const widgetSQL = `
CREATE TABLE widgets (
    id                 text        PRIMARY KEY,
    tenant_id          text        NOT NULL,
    state              text        NOT NULL,
    note               text        NOT NULL DEFAULT '',
    provider_reference text,
    decline_code       text,
    first_sent_at      timestamptz,
    last_sent_at       timestamptz,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);
CREATE TABLE widget_transitions (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    widget_id   text        NOT NULL REFERENCES widgets (id),
    from_state  text,
    to_state    text        NOT NULL,
    reason      text        NOT NULL,
    occurred_at timestamptz NOT NULL,
    actor       text,
    request_id  text
);
INSERT INTO state_machine_moves (machine, from_state, to_state) VALUES
    ('widget', '', 'RECEIVED'),
    ('widget', '', 'PROVIDER_REQUEST_SENT'),
    ('widget', 'RECEIVED', 'PROVIDER_REQUEST_SENT'),
    ('widget', 'RECEIVED', 'CANCELED'),
    ('widget', 'PROVIDER_REQUEST_SENT', 'SUCCEEDED'),
    ('widget', 'PROVIDER_REQUEST_SENT', 'DECLINED'),
    ('widget', 'PROVIDER_REQUEST_SENT', 'FAILED_RETRYABLE'),
    ('widget', 'PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY'),
    ('widget', 'UNKNOWN_REQUIRES_RECOVERY', 'SUCCEEDED'),
    ('widget', 'UNKNOWN_REQUIRES_RECOVERY', 'DECLINED'),
    ('widget', 'UNKNOWN_REQUIRES_RECOVERY', 'PROVIDER_REQUEST_SENT'),
    ('widget', 'FAILED_RETRYABLE', 'PROVIDER_REQUEST_SENT'),
    ('widget', 'FAILED_RETRYABLE', 'CANCELED');
CREATE TRIGGER widgets_state_machine_insert BEFORE INSERT ON widgets
    FOR EACH ROW EXECUTE FUNCTION enforce_state_machine('widget');
CREATE TRIGGER widgets_state_machine_update BEFORE UPDATE OF state ON widgets
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION enforce_state_machine('widget');
`

// CreateWidgets installs the widget module in db, a test's own migrated
// database (pgtest.NewPool).
func CreateWidgets(t testing.TB, db *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, widgetSQL); err != nil {
		t.Fatalf("install the widget module: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// InsertWidget creates widget id of tenant "t" in state at `at` with plain
// SQL (an Insert for CheckEnforced).
func InsertWidget(ctx context.Context, tx pgx.Tx, id string, state WidgetState, at time.Time) error {
	_, err := tx.Exec(ctx, `INSERT INTO widgets (id, tenant_id, state, created_at, updated_at) VALUES ($1, 't', $2, $3, $3)`,
		id, string(state), at)
	return err
}
