package client

import (
	"testing"
	"time"
)

func TestBackoffIsFullJitterUnderAnExponentialCeilingWithACap(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{BaseDelay: 250 * time.Millisecond, MaxDelay: 5 * time.Second}
	ceilings := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, ceiling := range ceilings {
		n := i + 1
		if got := p.backoff(n, 0); got != 0 {
			t.Errorf("retry %d with r=0: %s, want 0 (full jitter starts at zero)", n, got)
		}
		if got := p.backoff(n, 0.5); got != ceiling/2 {
			t.Errorf("retry %d with r=0.5: %s, want %s", n, got, ceiling/2)
		}
		if got := p.backoff(n, 0.9999); got >= ceiling || got < ceiling*99/100 {
			t.Errorf("retry %d with r→1: %s, want just under %s", n, got, ceiling)
		}
	}
	// Far past the cap, the ceiling neither overflows nor passes MaxDelay.
	if got := p.backoff(200, 0.9999); got >= p.MaxDelay || got <= 0 {
		t.Errorf("retry 200: %s, want just under %s", got, p.MaxDelay)
	}
}

func TestBudgetAllowsRetriesUpToItsRatioOfCalls(t *testing.T) {
	t.Parallel()
	b := newRetryBudget(Budget{Ratio: 0.1, Burst: 3})
	retries := 0
	for range 1000 {
		b.call()
		for b.retry() {
			retries++
		}
	}
	// The burst (the first call's credit is lost: the bucket was full),
	// then one retry per ten calls for the 999 others.
	if want := 3 + 99; retries != want {
		t.Errorf("%d retries for 1000 calls with ratio 0.1 and burst 3, want %d", retries, want)
	}
}

func TestParseRetryAfterReadsSecondsAndDates(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"0", 0}, {"-3", 0}, {"nonsense", 0}, {"3", 3 * time.Second}, {" 12 ", 12 * time.Second},
		{"Sun, 22 Nov 2026 12:00:07 GMT", 7 * time.Second},
		{"Sun, 22 Nov 2026 11:59:00 GMT", 0}, // in the past
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("Retry-After %q: %s, want %s", tc.in, got, tc.want)
		}
	}
}
