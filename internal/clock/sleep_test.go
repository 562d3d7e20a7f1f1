package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Sleep waits its duration, or returns the context's error as soon as the
// context ends.
func TestSleepWaitsOrStopsWithItsContext(t *testing.T) {
	began := time.Now()
	if err := Sleep(context.Background(), 20*time.Millisecond); err != nil || time.Since(began) < 20*time.Millisecond {
		t.Errorf("Sleep(20ms) = %v after %v", err, time.Since(began))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	began = time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) || time.Since(began) > time.Minute {
		t.Errorf("Sleep(1h) with a 10ms context = %v after %v", err, time.Since(began))
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Sleep(0) with an ended context = %v", err)
	}
}
