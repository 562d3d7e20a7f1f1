package outbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/backoff"
	"github.com/paymentsapi/paymentsapi/internal/clock"
)

// Sessions is how a reader's Run starts its sessions over.
type Sessions struct {
	// Backoff spaces the starts after failures, counted from the last
	// session that started.
	Backoff backoff.Policy
	// Standby is how long a reader waits when another holds the outbox
	// (a session that returned Busy), before it tries again.
	Standby time.Duration
	Busy    error
	Log     *slog.Logger
	// Interrupted is the warning logged when a session ends in a failure.
	Interrupted string
}

// Run runs session until ctx ends, starting over after each failure;
// session calls started once it holds the outbox.
func (p Sessions) Run(ctx context.Context, session func(ctx context.Context, started func()) error) {
	failures := 0
	for ctx.Err() == nil {
		err := session(ctx, func() { failures = 0 })
		if ctx.Err() != nil {
			return
		}
		wait := p.Standby
		if !errors.Is(err, p.Busy) {
			failures++
			wait = p.Backoff.Delay(failures)
			p.Log.WarnContext(ctx, p.Interrupted, "error", err, "wait", wait)
		}
		if clock.Sleep(ctx, wait) != nil {
			return
		}
	}
}
