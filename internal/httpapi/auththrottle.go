package httpapi

import (
	"net/http"
	"sync"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// The throttle of failed authentication: an address that failed
// authFailureLimit times within authFailureWindow is refused for
// authBlock, whatever key it sends, so that guessing keys is slow.
const (
	authFailureLimit  = 20
	authFailureWindow = time.Minute
	authBlock         = time.Minute
	// maxThrottled bounds the addresses remembered: a flood from many
	// addresses must not grow memory without end.
	maxThrottled = 100_000
)

// authThrottle counts failed authentications per client address, in this
// instance's memory: behind N instances an address may fail N times as
// often, and a restart forgets the counts. Safe for concurrent use.
type authThrottle struct {
	clock clock.Clock

	mu    sync.Mutex
	addrs map[string]*authFailures
}

// authFailures are an address's last authFailureLimit failures (Unix
// nanoseconds, a ring: next is the oldest once it is full), and until when
// the address is refused.
type authFailures struct {
	times   [authFailureLimit]int64
	next    int
	full    bool
	blocked time.Time
}

// newest is the time of the address's last failure.
func (f *authFailures) newest() time.Time {
	return time.Unix(0, f.times[(f.next+authFailureLimit-1)%authFailureLimit])
}

func newAuthThrottle(clk clock.Clock) *authThrottle {
	return &authThrottle{clock: clk, addrs: map[string]*authFailures{}}
}

// refused reports whether addr is refused now, and for how long yet.
func (t *authThrottle) refused(addr string) (time.Duration, bool) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.addrs[addr]
	if f == nil || !now.Before(f.blocked) {
		return 0, false
	}
	return f.blocked.Sub(now), true
}

// fail counts a failed authentication of addr: if its last authFailureLimit
// failures all fell within authFailureWindow, it is refused for authBlock.
func (t *authThrottle) fail(addr string) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.addrs[addr]
	if f == nil {
		if len(t.addrs) >= maxThrottled {
			t.forgetIdle(now)
		}
		f = &authFailures{}
		t.addrs[addr] = f
	}
	f.times[f.next] = now.UnixNano()
	f.next = (f.next + 1) % authFailureLimit
	f.full = f.full || f.next == 0
	if f.full && now.Sub(time.Unix(0, f.times[f.next])) < authFailureWindow {
		f.blocked = now.Add(authBlock)
	}
}

// forgetIdle drops the addresses neither refused nor failed within the
// window; if that frees nothing, it starts over rather than grow.
func (t *authThrottle) forgetIdle(now time.Time) {
	for addr, f := range t.addrs {
		if now.Sub(f.newest()) >= authFailureWindow && !now.Before(f.blocked) {
			delete(t.addrs, addr)
		}
	}
	if len(t.addrs) >= maxThrottled {
		clear(t.addrs)
	}
}

func tooManyFailedAuthentications(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", retryAfterValue(wait))
	problem.New(http.StatusTooManyRequests, problem.TooManyFailedAuthentications,
		"This address failed authentication too many times; requests from it are refused until Retry-After, whatever their API key.").Write(w)
}
