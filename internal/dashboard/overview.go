package dashboard

import (
	"math"
	"net/http"
	"net/url"
	"time"
)

// overviewView is the Overview's: the tenant's payments over the last hour
// and, for operators, the service's health.
type overviewView struct {
	Charts []chart
	Health []chart // operators only
	// Totals of the hour.
	Outcomes    int
	SuccessRate string
}

// overview draws the last hour of the tenant's payments (an operator who
// chose no tenant: every tenant's), from the events this instance's relay
// published, and for operators the service's metrics, as this instance
// read them.
func (s *server) overview(w http.ResponseWriter, r *http.Request) {
	now := s.Clock.Now()
	tenant := tenantOf(r)
	minutes := s.Live.activity.lastHour(tenant, now)
	stacks := make([]series, len(outcomes))
	for i, o := range outcomes {
		stacks[i] = series{Name: titleCase(o), Class: "s" + string(rune('0'+i)), Values: make([]float64, len(minutes))}
	}
	rate := series{Name: "Success rate", Class: "s0", Values: make([]float64, len(minutes))}
	p95 := series{Name: "p95 time to outcome", Class: "s4", Values: make([]float64, len(minutes))}
	lag := series{Name: "Relay lag (longest)", Class: "s4", Values: make([]float64, len(minutes))}
	var ov overviewView
	succeeded, decided := 0, 0
	for i, m := range minutes {
		for j := range outcomes {
			stacks[j].Values[i] = float64(m.outcomes[j])
			ov.Outcomes += m.outcomes[j]
		}
		succeeded += m.outcomes[0]
		decided += m.outcomes[0] + m.outcomes[1]
		rate.Values[i], p95.Values[i], lag.Values[i] = math.NaN(), math.NaN(), math.NaN()
		if d := m.outcomes[0] + m.outcomes[1]; d > 0 {
			rate.Values[i] = 100 * float64(m.outcomes[0]) / float64(d)
		}
		if v := m.p95(); v > 0 {
			p95.Values[i] = v
		}
		if m.lag > 0 {
			lag.Values[i] = m.lag
		}
	}
	if decided > 0 {
		ov.SuccessRate = num(100*float64(succeeded)/float64(decided)) + "%"
	}
	ov.Charts = []chart{
		bars("outcomes", "Payments per minute, by outcome", "", stacks),
		lines("success", "Success rate per minute (succeeded of succeeded and declined)", "%", []series{rate}),
		lines("latency", "p95 time from a payment's creation to its outcome", "s", []series{p95}),
	}
	v := newView(r, "Overview", "/", &ov)
	if v.Operator {
		ov.Charts = append(ov.Charts, lines("lag", "Outbox relay lag: from an event's creation to its publication", "s", []series{lag}))
		ov.Health = s.health(now)
	}
	live := url.Values{"topic": {"overview"}}
	if v.Operator && tenant != "" {
		live.Set("tenant", tenant)
	}
	v.Live = live.Encode()
	s.render(w, r, http.StatusOK, "overview.html", v)
}

// health draws the service's metrics over the last hour; none without a
// sampler.
func (s *server) health(now time.Time) []chart {
	if s.Health == nil {
		return nil
	}
	samples, ok := s.Health.lastHour(now)
	backlog := series{Name: "Keys without a final answer", Class: "s1", Values: make([]float64, len(samples))}
	review := series{Name: "Keys in manual review", Class: "s2", Values: make([]float64, len(samples))}
	oldest := series{Name: "Oldest event not yet published", Class: "s4", Values: make([]float64, len(samples))}
	failures := series{Name: "Failed webhook attempts", Class: "s1", Values: make([]float64, len(samples))}
	api := series{Name: "POST /payments p95", Class: "s4", Values: make([]float64, len(samples))}
	for i, smp := range samples {
		backlog.Values[i], review.Values[i], oldest.Values[i], api.Values[i] = math.NaN(), math.NaN(), math.NaN(), math.NaN()
		if !ok[i] {
			continue
		}
		backlog.Values[i], review.Values[i], oldest.Values[i] = smp.unfinishedKeys, smp.manualReview, smp.relayOldest
		if i > 0 && ok[i-1] {
			failures.Values[i] = math.Max(smp.webhookFailures-samples[i-1].webhookFailures, 0)
			if p := smp.api.p95Since(samples[i-1].api); p > 0 {
				api.Values[i] = p
			}
		}
	}
	return []chart{
		lines("backlog", "Reconciler backlog", "", []series{backlog, review}),
		lines("relay", "Outbox relay: age of the oldest event not yet published", "s", []series{oldest}),
		bars("webhooks", "Failed webhook attempts per minute", "", []series{failures}),
		lines("api", "API latency: p95 of POST /payments on this instance", "s", []series{api}),
	}
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
