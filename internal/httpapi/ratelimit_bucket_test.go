package httpapi

import (
	"math"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
)

func TestTokenBucket(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	l := newLimiter(RateLimit{PerSecond: 4, Burst: 2}, clk)
	take := func(tenant string, wantOK bool, wantWait time.Duration) {
		t.Helper()
		ok, wait := l.take(tenant)
		if ok != wantOK || (math.Abs(float64(wait-wantWait)) > float64(time.Microsecond)) {
			t.Errorf("take(%s) = %v, %s; want %v, %s", tenant, ok, wait, wantOK, wantWait)
		}
	}
	take("a", true, 0)
	take("a", true, 0)
	take("a", false, 250*time.Millisecond) // 4 per second: a token every 250 ms
	take("b", true, 0)                     // another tenant, another bucket
	clk.Advance(100 * time.Millisecond)
	take("a", false, 150*time.Millisecond)
	clk.Advance(150 * time.Millisecond)
	take("a", true, 0)
	take("a", false, 250*time.Millisecond)

	clk.Set(clk.Now().Add(-time.Hour)) // a clock set back refills nothing
	take("a", false, 250*time.Millisecond)
	clk.Advance(time.Hour)
	clk.Advance(10 * time.Second) // a long pause refills up to the burst only
	take("a", true, 0)
	take("a", true, 0)
	take("a", false, 250*time.Millisecond)
}

func TestRateLimitDefaultsAndOff(t *testing.T) {
	for _, off := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if newLimiter(RateLimit{PerSecond: off}, clock.System{}) != nil {
			t.Errorf("PerSecond %v: want no limit", off)
		}
	}
	for rate, burst := range map[float64]float64{0.5: 1, 1: 1, 2.5: 3, 100: 100} {
		if l := newLimiter(RateLimit{PerSecond: rate}, clock.System{}); l == nil || l.burst != burst {
			t.Errorf("PerSecond %v without a burst: %+v, want a burst of %v", rate, l, burst)
		}
	}
}
