package servicetest

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/statemachine/statemachinetest"
)

// Operation is an operation under the contract every operation keeps: how
// to send its command, and the payment methods that make the provider
// answer it each way.
type Operation struct {
	// Path is where the command is posted; it creates what the command
	// needs (the payment a refund refunds), paid with method.
	Path func(e *Env, method string) string
	// Body is a command that succeeds, with method where the command names
	// one; OtherBody is another command.
	Body      func(method string) string
	OtherBody func(method string) string
	// Method is the payment method of a command the provider accepts.
	Method string
	// SlowMethod keeps the command at the provider for the simulator's
	// SlowDelay ("": the operation has none, and the in-flight case is
	// skipped).
	SlowMethod string
	// LostMethod makes the provider act and its answer get lost.
	LostMethod string
	// Options start each case's environment (the operation registered
	// through app.Config.ExtraModules, a provider with the operation's
	// port); nil: New's defaults.
	Options []Option
	// Machine checks the operation's state machine against the database
	// (statemachinetest.Bind of its machine, its states and an insert);
	// nil: the case is skipped.
	Machine statemachinetest.Check
}

// Contract runs the tests every operation passes: a retry replays the
// first answer byte for byte, another command under the same key is 422,
// a retry while the first is in flight is 409, and an answer lost after
// the provider acted is resolved by the reconciler, and the database
// refuses every move the operation's state machine does not allow.
func Contract(t *testing.T, op Operation) {
	t.Run("the database enforces the state machine", func(t *testing.T) {
		if op.Machine == nil {
			t.Skip("no state machine given")
		}
		t.Parallel()
		op.Machine(t, pgtest.NewPool(t))
	})
	t.Run("a retry replays the first answer byte for byte", func(t *testing.T) {
		t.Parallel()
		e := New(t, op.Options...)
		path := op.Path(e, op.Method)
		first := e.Do("POST", path, []byte(op.Body(op.Method)), CreateHeaders(SecretA, "k-replay"))
		retry := e.Do("POST", path, []byte(op.Body(op.Method)), CreateHeaders(SecretA, "k-replay"))
		if first.Status >= 300 || retry.Status != first.Status || !bytes.Equal(retry.Body, first.Body) ||
			retry.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("first %d %s, retry %d %s (replayed %q): want the first answer, marked replayed",
				first.Status, first.Body, retry.Status, retry.Body, retry.Header.Get("Idempotent-Replayed"))
		}
	})
	t.Run("another command under the same key is 422", func(t *testing.T) {
		t.Parallel()
		e := New(t, op.Options...)
		path := op.Path(e, op.Method)
		if r := e.Do("POST", path, []byte(op.Body(op.Method)), CreateHeaders(SecretA, "k-reuse")); r.Status >= 300 {
			t.Fatalf("first: %d %s", r.Status, r.Body)
		}
		r := e.Do("POST", path, []byte(op.OtherBody(op.Method)), CreateHeaders(SecretA, "k-reuse"))
		if r.Status != http.StatusUnprocessableEntity || r.JSON(t)["code"] != "IDEMPOTENCY_KEY_REUSED" {
			t.Errorf("another command: %d %s, want 422 IDEMPOTENCY_KEY_REUSED", r.Status, r.Body)
		}
	})
	t.Run("a retry while the first is in flight is 409", func(t *testing.T) {
		if op.SlowMethod == "" {
			t.Skip("the provider cannot hold this operation's command")
		}
		t.Parallel()
		e := New(t, append([]Option{WithSlowDelay(2 * time.Second)}, op.Options...)...)
		path := op.Path(e, op.SlowMethod)
		done := make(chan Response, 1)
		go func() { done <- e.Do("POST", path, []byte(op.Body(op.SlowMethod)), CreateHeaders(SecretA, "k-flight")) }()
		WaitFor(t, func() bool {
			return e.Count("idempotency_keys WHERE idempotency_key = 'k-flight' AND response_status IS NULL") == 1
		})
		r := e.Do("POST", path, []byte(op.Body(op.SlowMethod)), CreateHeaders(SecretA, "k-flight"))
		if r.Status != http.StatusConflict {
			t.Errorf("retry in flight: %d %s, want 409", r.Status, r.Body)
		}
		if first := <-done; first.Status >= 300 {
			t.Errorf("first: %d %s", first.Status, first.Body)
		}
	})
	t.Run("a lost answer is resolved by the reconciler", func(t *testing.T) {
		t.Parallel()
		e := New(t, append([]Option{WithProviderTimeout(300 * time.Millisecond)}, op.Options...)...)
		path := op.Path(e, op.LostMethod)
		if r := e.Do("POST", path, []byte(op.Body(op.LostMethod)), CreateHeaders(SecretA, "k-lost")); r.Status != http.StatusAccepted {
			t.Fatalf("lost answer: %d %s, want 202", r.Status, r.Body)
		}
		e.Clock.Advance(time.Hour)
		e.Reconcile()
		r := e.Do("POST", path, []byte(op.Body(op.LostMethod)), CreateHeaders(SecretA, "k-lost"))
		if r.Status >= 300 || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry after the reconciler: %d %s, want the final answer replayed", r.Status, r.Body)
		}
	})
}
