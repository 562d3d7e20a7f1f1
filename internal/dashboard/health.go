package dashboard

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/paymentsapi/paymentsapi/internal/clock"
)

// Health is the operators' part of the Overview: the service's own metrics
// (the registry /metrics serves), read once a minute into a ring of the
// last hour, in this instance's memory. Its gauges are read from the
// database as a scrape reads them, so the ring costs one scrape a minute
// per instance, whoever looks; nothing on a request's path.
type Health struct {
	gatherer prometheus.Gatherer
	clock    clock.Clock
	log      *slog.Logger

	mu      sync.Mutex
	samples [windowMinutes]sample
}

// sample is one reading of the metrics the Overview draws.
type sample struct {
	start time.Time // its minute
	// Gauges, as read.
	unfinishedKeys, manualReview, relayOldest float64
	// Counters, cumulative: the charts draw their increase per minute.
	webhookFailures float64
	api             histogram // POST /payments' durations
}

// histogram is a cumulative histogram: counts[i] requests took at most
// bounds[i] seconds.
type histogram struct {
	bounds []float64
	counts []uint64
	total  uint64
}

// NewHealth returns the sampler of gatherer's metrics; Run it.
func NewHealth(gatherer prometheus.Gatherer, clk clock.Clock, log *slog.Logger) *Health {
	return &Health{gatherer: gatherer, clock: clk, log: log}
}

// Run reads the metrics now and then every interval (a minute when 0)
// until ctx ends; after each reading it calls tick (the pages showing the
// Overview refresh).
func (h *Health) Run(ctx context.Context, interval time.Duration, tick func()) {
	if interval <= 0 {
		interval = time.Minute
	}
	for {
		h.Sample()
		if tick != nil {
			tick()
		}
		if clock.Sleep(ctx, interval) != nil {
			return
		}
	}
}

// Sample reads the metrics once, into the ring's bucket of this minute.
func (h *Health) Sample() {
	families, err := h.gatherer.Gather()
	if err != nil && len(families) == 0 {
		h.log.Warn("the dashboard could not read the service's metrics", "error", err)
		return
	}
	s := sample{start: h.clock.Now().Truncate(time.Minute)}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			h.read(&s, f.GetName(), m)
		}
	}
	h.mu.Lock()
	h.samples[s.start.Unix()/60%windowMinutes] = s
	h.mu.Unlock()
}

// read adds what m, of the family name, says to s.
func (h *Health) read(s *sample, name string, m *dto.Metric) {
	switch name {
	case "paymentsapi_idempotency_unfinished_keys":
		s.unfinishedKeys = m.GetGauge().GetValue()
	case "paymentsapi_idempotency_manual_review_keys":
		s.manualReview += m.GetGauge().GetValue()
	case "paymentsapi_outbox_oldest_pending_age_seconds":
		s.relayOldest = m.GetGauge().GetValue()
	case "paymentsapi_webhook_attempts_total":
		switch label(m, "outcome") {
		case "retrying", "failed", "gone":
			s.webhookFailures += m.GetCounter().GetValue()
		}
	case "paymentsapi_http_request_duration_seconds":
		if label(m, "route") != "/payments" || label(m, "method") != "POST" {
			return
		}
		s.api.total += m.GetHistogram().GetSampleCount()
		for i, b := range m.GetHistogram().GetBucket() {
			if i >= len(s.api.bounds) {
				s.api.bounds = append(s.api.bounds, b.GetUpperBound())
				s.api.counts = append(s.api.counts, 0)
			}
			s.api.counts[i] += b.GetCumulativeCount()
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// lastHour returns the samples of the hour that ends with now's minute,
// oldest first; a minute without a sample has ok false.
func (h *Health) lastHour(now time.Time) (out []sample, ok []bool) {
	end := now.Truncate(time.Minute)
	out, ok = make([]sample, windowMinutes), make([]bool, windowMinutes)
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range out {
		start := end.Add(time.Duration(i-windowMinutes+1) * time.Minute)
		out[i] = sample{start: start}
		if s := h.samples[start.Unix()/60%windowMinutes]; s.start.Equal(start) {
			out[i], ok[i] = s, true
		}
	}
	return out, ok
}

// p95Since is the bound of the bucket that holds the 95th percentile of the
// requests between prev and h, in seconds; 0 when there were none.
func (h histogram) p95Since(prev histogram) float64 {
	if len(h.counts) == 0 {
		return 0
	}
	// A restart starts the counters again: then the whole reading is new.
	restarted := prev.total > h.total
	delta := func(i int) uint64 {
		if restarted || i >= len(prev.counts) {
			return h.counts[i]
		}
		return h.counts[i] - prev.counts[i]
	}
	total := h.total - prev.total
	if restarted {
		total = h.total
	}
	if total == 0 {
		return 0
	}
	rank := (total*95 + 99) / 100
	for i := range h.counts {
		if delta(i) >= rank {
			return h.bounds[i]
		}
	}
	return h.bounds[len(h.bounds)-1]
}
