package backoff

import (
	"testing"
	"time"
)

func TestDelayDoublesIsCappedAndJittered(t *testing.T) {
	p := Policy{Base: time.Second, Max: 10 * time.Second}
	for n, ceiling := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 500: 10 * time.Second} {
		if got := p.Ceiling(n); got != ceiling {
			t.Errorf("Ceiling(%d) = %s, want %s", n, got, ceiling)
		}
		seen := map[time.Duration]bool{}
		for range 200 {
			d := p.Delay(n)
			if d < ceiling/2 || d > ceiling {
				t.Fatalf("Delay(%d) = %s, outside [%s, %s]", n, d, ceiling/2, ceiling)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Errorf("Delay(%d) is not jittered: always %v", n, seen)
		}
	}
	if s := p.Schedule(3); len(s) != 3 || s[2] < 2*time.Second || s[2] > 4*time.Second {
		t.Errorf("Schedule(3) = %v", s)
	}
}
