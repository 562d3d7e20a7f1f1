package idempotency

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

// observedEngine is testEngine with its metrics' registry and its log
// written, as JSON lines, to the buffer it returns.
func observedEngine(t *testing.T) (*Engine, *pgxpool.Pool, *clock.Fake, *prometheus.Registry, *testio.SyncBuffer) {
	t.Helper()
	pool := pgtest.NewPool(t)
	clk := clock.NewFake(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	logs := &testio.SyncBuffer{}
	e := NewEngine(Deps{DB: pool, Clock: clk, Log: slog.New(slog.NewJSONHandler(logs, nil)), Metrics: metrics.New(reg)},
		Config{ReplayTTL: time.Hour, Lease: time.Minute, CommitMode: pgtest.CommitMode()})
	return e, pool, clk, reg, logs
}

// counter reads the counter name from reg (0 if it never moved).
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// Every takeover counts once in paymentsapi_idempotency_takeovers_total,
// whoever takes the key over: a retry, ResolveNow, or the reconciler,
// which takes keys over with a statement of its own (claimDue).
func TestEveryTakeoverIsCountedOnce(t *testing.T) {
	t.Parallel()
	e, pool, clk, reg, _ := observedEngine(t)
	ctx := context.Background()
	op := &recordingOp{}
	rc := NewReconciler(e, RecoveryPolicy{}, op)
	abandoned := func(key string) Request {
		t.Helper()
		req := Request{Scope: Scope{Tenant: "t", Operation: op.Name(), Key: key}, Fingerprint: []byte{1},
			Resource: Resource{Type: "widget", ID: "w_" + key}}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, _, err := claimKey(ctx, tx, req.Scope, req.Fingerprint, req.Resource, clk.Now(), time.Minute, new(clk.Now()))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	byRetry, byResolve, byReconciler := abandoned("retry"), abandoned("resolve"), abandoned("reconciler")
	clk.Advance(2 * time.Minute) // their owners' leases ran out
	takeovers := func() float64 { return counter(t, reg, "paymentsapi_idempotency_takeovers_total") }

	if _, err := e.Do(ctx, op, byRetry); err != nil {
		t.Fatal(err)
	}
	if got := takeovers(); got != 1 {
		t.Fatalf("after a retry's takeover: %v takeovers, want 1", got)
	}
	if got, err := rc.ResolveNow(ctx, byResolve.Resource); err != nil || got != "done" {
		t.Fatalf("resolve now: %q, %v", got, err)
	}
	if got := takeovers(); got != 2 {
		t.Fatalf("after ResolveNow's takeover: %v takeovers, want 2", got)
	}
	if stats, err := rc.RunOnce(ctx, 10); err != nil || stats["done"] != 1 {
		t.Fatalf("reconciler: %v, %v", stats, err)
	}
	if got := takeovers(); got != 3 {
		t.Errorf("after the reconciler's takeover of %s: %v takeovers, want 3", byReconciler.Resource.ID, got)
	}
}

// lateOp keeps its first owner in Resume until late is closed, and then
// has it finish the key, or fail with err: by then a retry has taken the
// key over and finished it. Every later owner finishes at once.
type lateOp struct {
	finishingOp
	started, late chan struct{}
	err           error
	cutOff        atomic.Bool
}

func (o *lateOp) Resume(ctx context.Context, own *Owner) (Result, error) {
	if o.cutOff.CompareAndSwap(false, true) {
		close(o.started)
		<-o.late
		if o.err != nil {
			return nil, o.err
		}
	}
	return o.finishingOp.Resume(ctx, own)
}

// A write refused by fencing, from an owner that was cut off while a retry
// took its key over, is logged once, at warn, with the key's row, tenant
// and operation, the fencing token the writer held and what was refused;
// never the client's key. Whether the late owner stores its answer (Commit)
// or, its work failed, hands the key back (letGo).
func TestAWriteRefusedByFencingIsLoggedOnce(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		err     error
		refused string
	}{
		{"store the answer", nil, "store the answer (done)"},
		{"hand the key back", errors.New("provider connection reset"), "hand the key back after a failure"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e, _, clk, _, logs := observedEngine(t)
			ctx := context.Background()
			op := &lateOp{finishingOp: finishingOp{resumes: new(atomic.Int32)}, started: make(chan struct{}), late: make(chan struct{}), err: c.err}
			req := Request{Scope: Scope{Tenant: "t_1", Operation: op.Name(), Key: "client-key-5e3b"}, Fingerprint: []byte{1},
				Resource: Resource{Type: "widget", ID: "w_late"}}
			first := make(chan error, 1)
			go func() {
				_, err := e.Do(ctx, op, req)
				first <- err
			}()
			<-op.started
			clk.Advance(2 * time.Minute) // the first owner is cut off: its lease runs out
			if reply, err := e.Do(ctx, op, req); err != nil || reply.Response.Status != 201 {
				t.Fatalf("the retry that took the key over: %+v, %v", reply, err)
			}
			close(op.late)
			if err := <-first; !errors.Is(err, c.err) {
				t.Fatalf("the late owner's request: %v", err)
			}

			var warnings []map[string]any
			for sc := bufio.NewScanner(strings.NewReader(logs.String())); sc.Scan(); {
				var line map[string]any
				if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
					t.Fatalf("log line %q: %v", sc.Text(), err)
				}
				if line["level"] == "WARN" {
					warnings = append(warnings, line)
				}
			}
			if len(warnings) != 1 {
				t.Fatalf("%d warnings, want 1: %v", len(warnings), warnings)
			}
			w := warnings[0]
			for attr, want := range map[string]any{"tenant": "t_1", "operation": "finish", "resource": "w_late",
				"fencing_token": 1.0, "refused": c.refused} {
				if w[attr] != want {
					t.Errorf("%s = %v, want %v (line %v)", attr, w[attr], want, w)
				}
			}
			if id, ok := w["key_id"].(float64); !ok || id <= 0 {
				t.Errorf("key_id = %v, want the key's row", w["key_id"])
			}
			if strings.Contains(logs.String(), req.Scope.Key) {
				t.Errorf("the log names the client's key: %s", logs.String())
			}
		})
	}
}
