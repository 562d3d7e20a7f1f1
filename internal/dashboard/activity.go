package dashboard

import (
	"sync"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/payments"
)

// activity is the Overview's record of the last hour, kept in this
// instance's memory from the events its relay published: per tenant and
// for all of them, one bucket a minute. It is bounded: windowMinutes
// buckets per tenant, for at most maxTenants tenants (past that, only the
// whole service's is kept); a restart starts it empty.
type activity struct {
	mu      sync.Mutex
	tenants map[string]*window // "" is every tenant's
}

const (
	windowMinutes = 60
	maxTenants    = 10_000
)

// The outcomes the Overview counts, in the order its chart stacks them.
var outcomes = []string{payments.OutcomeSucceeded, payments.OutcomeDeclined, payments.OutcomeCanceled, "authorized"}

// latencyBounds are the upper bounds, in seconds, of the histogram a
// minute keeps of the time from a payment's creation to its outcome: its
// p95 is read as the bound of the bucket it falls in.
var latencyBounds = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600}

// minute is one minute's counts.
type minute struct {
	start    time.Time
	outcomes [4]int
	latency  [13]int // by latencyBounds, the last one beyond them
	lag      float64 // the longest relay lag, in seconds (from an event's creation to its publication)
}

type window struct {
	minutes [windowMinutes]minute
}

func newActivity() *activity { return &activity{tenants: map[string]*window{}} }

// add counts e, an event of tenant published at publishedAt, in the minute
// it happened (an event older than the window, or from a clock ahead, is
// left out): a payment's outcome, how long after its creation it came, and
// how long the relay took to publish it.
func (a *activity) add(tenant string, e outbox.Event, publishedAt time.Time) {
	at := e.OccurredAt.Truncate(time.Minute)
	if now := publishedAt.Truncate(time.Minute); at.After(now) || !at.After(now.Add(-windowMinutes*time.Minute)) {
		return
	}
	lag := publishedAt.Sub(e.OccurredAt).Seconds()
	outcome, latency := outcomeOf(e.Type), 0.0
	if outcome >= 0 {
		created, ok := peek(e.Payload, "createdAt")
		if t, err := time.Parse(time.RFC3339Nano, created); ok && err == nil {
			latency = e.OccurredAt.Sub(t).Seconds()
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, tenant := range []string{"", tenant} {
		w := a.tenants[tenant]
		if w == nil {
			if len(a.tenants) >= maxTenants {
				continue
			}
			w = &window{}
			a.tenants[tenant] = w
		}
		m := w.at(at)
		m.lag = max(m.lag, lag)
		if outcome >= 0 {
			m.outcomes[outcome]++
			m.latency[latencyBucket(latency)]++
		}
	}
}

// outcomeOf is the index in outcomes of a payment's outcome event of type
// typ; -1 for another event.
func outcomeOf(typ string) int {
	switch typ {
	case payments.EventSucceeded:
		return 0
	case payments.EventDeclined:
		return 1
	case payments.EventCanceled:
		return 2
	case payments.EventAuthorized:
		return 3
	}
	return -1
}

func latencyBucket(seconds float64) int {
	for i, b := range latencyBounds {
		if seconds <= b {
			return i
		}
	}
	return len(latencyBounds)
}

// at is the bucket of the minute that starts at start, reset if it held
// another minute (an hour older: add leaves out the events of minutes
// outside the window).
func (w *window) at(start time.Time) *minute {
	m := &w.minutes[start.Unix()/60%windowMinutes]
	if !m.start.Equal(start) {
		*m = minute{start: start}
	}
	return m
}

// lastHour returns the tenant's minutes ("": every tenant's) of the hour
// that ends with now's minute, oldest first; a minute without events is
// zero.
func (a *activity) lastHour(tenant string, now time.Time) []minute {
	end := now.Truncate(time.Minute)
	out := make([]minute, windowMinutes)
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.tenants[tenant]
	for i := range out {
		start := end.Add(time.Duration(i-windowMinutes+1) * time.Minute)
		out[i] = minute{start: start}
		if w != nil {
			if m := w.minutes[start.Unix()/60%windowMinutes]; m.start.Equal(start) {
				out[i] = m
			}
		}
	}
	return out
}

// p95 is the bound of the bucket that holds the minute's 95th percentile
// latency, in seconds; 0 without outcomes.
func (m minute) p95() float64 {
	total := 0
	for _, n := range m.latency {
		total += n
	}
	if total == 0 {
		return 0
	}
	seen, rank := 0, (total*95+99)/100
	for i, n := range m.latency {
		seen += n
		if seen >= rank {
			if i < len(latencyBounds) {
				return latencyBounds[i]
			}
			return latencyBounds[len(latencyBounds)-1]
		}
	}
	return 0
}
