package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// This file holds the growth mode's arithmetic and report: none
// of it measures anything, so it is what the tests check.

// The growth mode's targets, against the phase on empty tables.
const (
	targetGrowthRatio   = 0.9 // throughput with the rows loaded
	targetGrowthP99     = 1.2 // p99 with the rows loaded, at most
	targetCleanupRatio  = 0.9 // throughput while clean-up erases
	growthRateTolerance = 1e-9
)

// tableSize is one loaded table after the load.
type tableSize struct {
	Name           string
	Rows           int64
	Table, Indexes int64 // bytes: pg_table_size, pg_indexes_size
}

// loadResult is the load of the growth mode.
type loadResult struct {
	Insert   time.Duration // the INSERT ... SELECT chunks
	Vacuum   time.Duration // VACUUM (ANALYZE) after it
	WALBytes int64         // written by the inserts (the whole cluster)
	Tables   []tableSize
	Sizes    map[string]int64 // bytes of each table and index after the load
}

// blocks are a relation's block reads (not in shared buffers: from the OS
// cache or the disk) and hits (in shared buffers).
type blocks struct{ Read, Hit int64 }

// relIO is the blocks of each table and index, by name.
type relIO map[string]blocks

// sub returns m - o, relation by relation (a relation only in m counts
// from zero).
func (m relIO) sub(o relIO) relIO {
	out := relIO{}
	for k, v := range m {
		out[k] = blocks{Read: v.Read - o[k].Read, Hit: v.Hit - o[k].Hit}
	}
	return out
}

// add returns m + o, relation by relation.
func (m relIO) add(o relIO) relIO {
	out := relIO{}
	for k, v := range m {
		out[k] = v
	}
	for k, v := range o {
		out[k] = blocks{Read: out[k].Read + v.Read, Hit: out[k].Hit + v.Hit}
	}
	return out
}

// topReads returns the n relations with the most block reads per
// operation in any of the phases (io[i] over ops[i]), most first, then by
// name; relations never read are left out.
func topReads(io [3]relIO, ops [3]int, n int) []string {
	most := map[string]float64{}
	for i := range io {
		for k, v := range io[i] {
			if v.Read > 0 && ops[i] > 0 {
				most[k] = max(most[k], float64(v.Read)/float64(ops[i]))
			}
		}
	}
	names := make([]string, 0, len(most))
	for k := range most {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		if most[a] != most[b] {
			if most[a] > most[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return names[:min(n, len(names))]
}

// eraseResult is what clean-up erased around and during phase 3.
type eraseResult struct {
	// Stored0: answers stored before the API was restarted for phase 3.
	Stored0 int64
	// Expired: stored answers past the replay window when phase 3 began
	// (what was left for clean-up to erase).
	Expired int64
	// BeforePhase: erased between the restart and phase 3 (its warm-up).
	BeforePhase int64
	// During: erased during phase 3's rounds, each from its start to the
	// end of its counters (the load, the relay's drain, the statistics'
	// flush: the span its WAL is counted over); PerRound each round's.
	During   int64
	PerRound []erasedRound
	// ExpiredLeft: expired answers still stored after phase 3.
	ExpiredLeft int64
	// ErasedTotal: finished keys without an answer at the end.
	ErasedTotal int64
}

// erasedRound is what clean-up erased during one round of phase 3.
type erasedRound struct {
	Erased int64
	Window time.Duration // from the round's start to the end of its counters
}

// growthResult is the whole growth run.
type growthResult struct {
	Rows                  int
	TTL                   time.Duration // phase 3's IDEMPOTENCY_TTL
	Phases                []phase       // every round, in order
	Empty, Grown, Cleanup phase         // the rounds of each phase added up
	Load                  loadResult
	Erase                 eraseResult
	// IO is the block reads and hits of each relation during the phases:
	// empty tables, rows loaded, during clean-up (their rounds added up).
	IO [3]relIO
}

// chunks splits payments 1…n into ranges [first, last] of at most size.
func chunks(n, size int) [][2]int64 {
	if size < 1 {
		size = 1
	}
	var out [][2]int64
	for first := 1; first <= n; first += size {
		out = append(out, [2]int64{int64(first), int64(min(first+size-1, n))})
	}
	return out
}

// growthTarget is one of the growth mode's targets, measured.
type growthTarget struct {
	Name, Measured, Want string
	Met                  bool
}

// growthTargets judges g against the growth mode's targets. A NaN (nothing
// measured) never meets a target, and clean-up's target is not met by a
// phase during which nothing was erased.
func growthTargets(g growthResult) []growthTarget {
	rate := ratio(g.Grown.rate(), g.Empty.rate())
	p99 := ratio(float64(percentile(g.Grown.Latencies, 0.99)), float64(percentile(g.Empty.Latencies, 0.99)))
	clean := ratio(g.Cleanup.rate(), g.Empty.rate())
	cleanMeasured := fmtX(clean)
	if g.Erase.During == 0 {
		cleanMeasured += " (nothing erased during the phase)"
	}
	rows := fmtCount(g.Rows)
	return []growthTarget{
		{"new payments, " + rows + " rows / empty tables", fmtX(rate), fmt.Sprintf("≥ %.2f×", targetGrowthRatio),
			rate >= targetGrowthRatio-growthRateTolerance},
		{"p99 of a new payment, " + rows + " rows / empty tables", fmtX(p99), fmt.Sprintf("≤ %.2f×", targetGrowthP99),
			p99 <= targetGrowthP99+growthRateTolerance},
		{"new payments during clean-up / empty tables", cleanMeasured, fmt.Sprintf("≥ %.2f×", targetCleanupRatio),
			g.Erase.During > 0 && clean >= targetCleanupRatio-growthRateTolerance},
	}
}

// perSecond is n per second of d; NaN when d is 0.
func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return math.NaN()
	}
	return float64(n) / d.Seconds()
}

// writeGrowthReport prints the growth mode's report: where it ran, one row
// per round and per phase, the targets, the load and the clean-up.
func writeGrowthReport(w io.Writer, h header, g growthResult) error {
	var b strings.Builder
	writeHeader(&b, "paymentsbench -growth", h)
	fmt.Fprintf(&b, "load:       %d connections; %d round(s) of %s per phase: empty tables, %s finished payments loaded, during clean-up\n\n",
		h.Connections, h.Rounds, h.Duration, fmtCount(g.Rows))

	rows := append(append([]phase{}, g.Phases...), g.Empty, g.Grown, g.Cleanup)
	if err := writePhaseTable(&b, rows); err != nil {
		return err
	}
	for _, p := range g.Phases {
		if p.Failed > 0 {
			fmt.Fprintf(&b, "  %s: %d unexpected answers: %s\n", p.Name, p.Failed, fmtCounts(p.Unexpected))
		}
	}

	fmt.Fprintf(&b, "\ntargets, against the phase on empty tables\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tmeasured\twanted\tmet")
	for _, t := range growthTargets(g) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, t.Measured, t.Want, yesNo(t.Met))
	}
	fmt.Fprintf(tw, "p99 during clean-up / empty tables\t%s\t-\t-\n",
		fmtX(ratio(float64(percentile(g.Cleanup.Latencies, 0.99)), float64(percentile(g.Empty.Latencies, 0.99)))))
	if err := tw.Flush(); err != nil {
		return err
	}

	l := g.Load
	fmt.Fprintf(&b, "\nload:     %s payments with their keys, transitions and events in %s (%.0f payments/s), %s of WAL (%s per payment); VACUUM (ANALYZE) %s\n",
		fmtCount(g.Rows), fmtDuration(l.Insert), perSecond(int64(g.Rows), l.Insert), fmtMiB(l.WALBytes),
		fmtBytes(ratio(float64(l.WALBytes), float64(g.Rows))), fmtDuration(l.Vacuum))
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "table\trows\ttable\tindexes\t")
	for _, t := range l.Tables {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t\n", t.Name, t.Rows, fmtMiB(t.Table), fmtMiB(t.Indexes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\nblocks read per payment (not in shared buffers), the relations that read most; hit: in shared buffers\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "relation\tsize after load\tempty tables\t"+fmtCount(g.Rows)+" rows\tduring clean-up\thit, empty\thit, "+fmtCount(g.Rows)+" rows\t")
	ps := [3]phase{g.Empty, g.Grown, g.Cleanup}
	ops := [3]int{g.Empty.Ops, g.Grown.Ops, g.Cleanup.Ops}
	for _, rel := range topReads(g.IO, ops, 12) {
		size := "-"
		if v, ok := g.Load.Sizes[rel]; ok {
			size = fmtMiB(v)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", rel, size,
			fmtFloat(ps[0].perOp(float64(g.IO[0][rel].Read)), 2), fmtFloat(ps[1].perOp(float64(g.IO[1][rel].Read)), 2),
			fmtFloat(ps[2].perOp(float64(g.IO[2][rel].Read)), 2),
			fmtFloat(ps[0].perOp(float64(g.IO[0][rel].Hit)), 1), fmtFloat(ps[1].perOp(float64(g.IO[1][rel].Hit)), 1))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range g.Phases {
		if m := fmtMaintenance(p.Maintenance); m != "" {
			fmt.Fprintf(&b, "autovacuum during %s: %s\n", p.Name, m)
		}
	}
	e := g.Erase
	fmt.Fprintf(&b, "clean-up: the API restarted with IDEMPOTENCY_TTL=%s; %d expired answers stored when the clean-up phase began, "+
		"%d erased before it (restart and warm-up), %d during it (%s), %d still expired after it; %d keys without their answer at the end\n",
		g.TTL, e.Expired, e.BeforePhase, e.During, fmtErasedPerRound(e.PerRound), e.ExpiredLeft, e.ErasedTotal)
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtErasedPerRound prints each clean-up round's erased answers with their
// rate over the round's window.
func fmtErasedPerRound(perRound []erasedRound) string {
	parts := make([]string, len(perRound))
	for i, r := range perRound {
		parts[i] = fmt.Sprintf("round %d: %d in %s, %.0f/s", i+1, r.Erased, fmtDuration(r.Window), perSecond(r.Erased, r.Window))
	}
	return strings.Join(parts, "; ")
}

// fmtMaintenance prints autovacuum's runs by table (Read: vacuums, Hit:
// analyzes), by name; "" when there were none.
func fmtMaintenance(m relIO) string {
	names := make([]string, 0, len(m))
	for k, v := range m {
		if v.Read > 0 || v.Hit > 0 {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s (vacuum ×%d, analyze ×%d)", k, m[k].Read, m[k].Hit)
	}
	return strings.Join(parts, ", ")
}

// fmtCount prints a count of rows: 2000000 as "2M", 100000 as "100k".
func fmtCount(n int) string {
	switch {
	case n >= 1_000_000 && n%100_000 == 0:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e6), ".0") + "M"
	case n >= 1_000 && n%100 == 0:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e3), ".0") + "k"
	default:
		return fmt.Sprint(n)
	}
}
