package outbox

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/clock"
)

// SQL of the relay and the metrics, for the tests that check their plans.
const (
	ClaimSQL   = claimSQL
	BacklogSQL = backlogSQL
)

// NewStatsCollector returns the backlog gauges' collector with a count cap
// of countCap.
func NewStatsCollector(db DB, clk clock.Clock, countCap int) prometheus.Collector {
	return newStatsCollector(db, clk, slog.New(slog.DiscardHandler), countCap)
}
