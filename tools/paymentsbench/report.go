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

// This file holds the arithmetic of the report: per-operation deltas, the
// rounds added up, the ratios, the targets, and the table. None
// of it measures anything, so it is what the tests check.

// counters is one reading of the cluster's cumulative counters: WAL from
// pg_stat_wal (the whole cluster), transactions and rows from
// pg_stat_database (one database).
type counters struct {
	WALRecords int64
	WALFPI     int64 // full-page images
	WALBytes   int64
	WALSyncs   int64 // fsyncs of the WAL
	Commits    int64 // xact_commit: read-only transactions count too
	Rollbacks  int64
	Inserted   int64
	Updated    int64
	Deleted    int64
}

// sub returns c - o, field by field: the work done between two readings.
func (c counters) sub(o counters) counters {
	return counters{
		WALRecords: c.WALRecords - o.WALRecords,
		WALFPI:     c.WALFPI - o.WALFPI,
		WALBytes:   c.WALBytes - o.WALBytes,
		WALSyncs:   c.WALSyncs - o.WALSyncs,
		Commits:    c.Commits - o.Commits,
		Rollbacks:  c.Rollbacks - o.Rollbacks,
		Inserted:   c.Inserted - o.Inserted,
		Updated:    c.Updated - o.Updated,
		Deleted:    c.Deleted - o.Deleted,
	}
}

// add returns c + o, field by field.
func (c counters) add(o counters) counters {
	return counters{
		WALRecords: c.WALRecords + o.WALRecords,
		WALFPI:     c.WALFPI + o.WALFPI,
		WALBytes:   c.WALBytes + o.WALBytes,
		WALSyncs:   c.WALSyncs + o.WALSyncs,
		Commits:    c.Commits + o.Commits,
		Rollbacks:  c.Rollbacks + o.Rollbacks,
		Inserted:   c.Inserted + o.Inserted,
		Updated:    c.Updated + o.Updated,
		Deleted:    c.Deleted + o.Deleted,
	}
}

// phaseKind says what a phase measured.
type phaseKind int

const (
	kindReference phaseKind = iota // the pgbench flow
	kindNew                        // new payments through the API
	kindReplay                     // replays through the API
	kindFloor                      // new payments through the floor (tools/bench/floorapi)
	kindNewB                       // new payments through a second build of the API (-api-bin-b)
)

// phase is one measured stretch of the run, or several of one kind added up.
type phase struct {
	Name string
	Kind phaseKind
	// Ops is how many operations ended as expected: payments created (201),
	// replays answered (201, Idempotent-Replayed), pgbench flows committed.
	Ops int
	// Failed counts the other answers; Unexpected says which (status or
	// error, and how often).
	Failed     int
	Unexpected map[string]int
	// Elapsed is the time the operations took: from the first request to
	// the last answer (pgbench: processed / tps, connection time excluded).
	Elapsed time.Duration
	// Latencies are the operations' latencies, sorted.
	Latencies []time.Duration
	// DB is the work the cluster did, from the start of the phase until the
	// outbox was drained (the relay's work included).
	DB counters
	// OwnWAL is the WAL of the phase's database alone, over the same span
	// (walOf); zero if pg_waldump could not read it.
	OwnWAL walShare
	// APICPU is the API process's CPU time over the same span; PGCPU the
	// PostgreSQL server's (every process of the cluster).
	APICPU time.Duration
	PGCPU  time.Duration
	// ClientCPU is the CPU time of what drove the phase over the same
	// span: pgbench's process, or the bench's own (its load generator and
	// the provider simulator, which share the machine with the API).
	ClientCPU time.Duration
	// Groups is what the API's group commit sent over the phase (zero
	// for a service that does not say: the floor, an older build).
	Groups groupCommits
	// Drain is how long the relay took, after the last answer, to publish
	// the events left in the outbox: its lag behind the load.
	Drain time.Duration
	// Maintenance is, for the growth mode, autovacuum's runs on each table
	// during the phase (Read: vacuums, Hit: analyzes); nil elsewhere.
	Maintenance relIO
}

// rate is operations per second.
func (p phase) rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Ops) / p.Elapsed.Seconds()
}

// perOp divides v by the operations; NaN when there were none.
func (p phase) perOp(v float64) float64 {
	if p.Ops == 0 {
		return math.NaN()
	}
	return v / float64(p.Ops)
}

// walPerOp is the WAL per operation that the targets judge: the phase's
// own database's records when they were read (walOf), else the whole
// cluster's counters.
func (p phase) walPerOp() float64 {
	if p.OwnWAL.Records > 0 {
		return p.perOp(float64(p.OwnWAL.Bytes))
	}
	return p.perOp(float64(p.DB.WALBytes))
}

// cpuPerOp is a CPU time per operation, in milliseconds.
func (p phase) cpuPerOp(d time.Duration) float64 {
	return p.perOp(float64(d) / float64(time.Millisecond))
}

// percentile returns the q-quantile (0 < q <= 1) of sorted latencies by the
// nearest-rank method; 0 when there are none.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// combine adds up phases of one kind (the rounds) into one: counts, times
// and deltas summed, latencies merged.
func combine(name string, ps []phase) phase {
	out := phase{Name: name, Unexpected: map[string]int{}}
	for i, p := range ps {
		if i == 0 {
			out.Kind = p.Kind
		}
		out.Ops += p.Ops
		out.Failed += p.Failed
		for k, n := range p.Unexpected {
			out.Unexpected[k] += n
		}
		out.Elapsed += p.Elapsed
		out.Latencies = append(out.Latencies, p.Latencies...)
		out.DB = out.DB.add(p.DB)
		out.OwnWAL = out.OwnWAL.add(p.OwnWAL)
		out.APICPU += p.APICPU
		out.PGCPU += p.PGCPU
		out.ClientCPU += p.ClientCPU
		out.Drain = max(out.Drain, p.Drain)
	}
	slices.Sort(out.Latencies)
	return out
}

// stormResult is the same-key storm: n requests at once with one key.
type stormResult struct {
	Requests int
	Elapsed  time.Duration // from the release of the requests to the last answer
	Answers  map[string]int
	Failed   int // answers other than 201 (original or replayed), errors included
	// Charges is how many charges the provider holds for the key's payment,
	// ChargeRequests how many create requests reached them.
	Charges        int
	ChargeRequests int
}

// soakResult is the steady load at the end of the run.
type soakResult struct {
	Duration         time.Duration
	Payments         int
	Failed           int
	RSSStart, RSSEnd int64 // bytes
	GoroutinesStart  int
	GoroutinesEnd    int
	// Drain is how long the relay took after the soak to publish the
	// outbox's backlog; Behind how much WAL its slot had still to read
	// when the bench stopped waiting (-1: the slot was not even created).
	Drain  time.Duration
	Behind int64
}

// summary is what the targets are judged on: the rounds of each kind added
// up, so that the ratios compare work done in the same run.
type summary struct {
	Reference, New, Replay phase
	// Floor is the reference flow behind a bare Go handler (tools/bench/floorapi):
	// what the targets can come to on this machine; Ops 0 if not run.
	Floor phase
	// NewB is new payments through a second build of the API
	// (-api-bin-b), in the same rounds as New; Ops 0 if not run.
	NewB  phase
	Storm stormResult
	Soak  soakResult
}

func summarize(phases []phase, storm stormResult, soak soakResult) summary {
	byKind := func(k phaseKind) []phase {
		var out []phase
		for _, p := range phases {
			if p.Kind == k {
				out = append(out, p)
			}
		}
		return out
	}
	return summary{
		Reference: combine("pgbench flow, all rounds", byKind(kindReference)),
		New:       combine("API new payments, all rounds", byKind(kindNew)),
		Replay:    combine("API replays", byKind(kindReplay)),
		Floor:     combine("Go floor, all rounds", byKind(kindFloor)),
		NewB:      combine("API B new payments, all rounds", byKind(kindNewB)),
		Storm:     storm,
		Soak:      soak,
	}
}

// ratio is a/b, NaN when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// target is one of the bench's targets, measured.
type target struct {
	Name     string
	Measured string
	// Floor is what the floor measured, in the same run ("-": not run, or
	// not a measure of the floor's).
	Floor string
	Want  string
	Met   bool
}

// The targets: the API against the plain-SQL flow (pgbench) and the
// same flow behind a bare Go handler (the floor), in the same run.
const (
	targetRatio         = 1.0 // new payments / the pgbench flow, and / the floor
	targetCPUOfFloor    = 1.2 // API CPU per payment / the floor's
	targetReplayRatio   = 5.0
	targetStorm         = time.Second
	targetStormCharges  = 1
	targetStormRequests = 1000
)

// targets judges s against the targets. A NaN (nothing measured)
// never meets a target, and a target judged against the floor is not met
// without it.
func targets(s summary) []target {
	m := s.New.measures(s.Reference)
	f := s.Floor.measures(s.Reference)
	ofFloor := ratio(s.New.rate(), s.Floor.rate())
	refP99 := percentile(s.Reference.Latencies, 0.99)
	rr := ratio(s.Replay.rate(), s.New.rate())
	storm := s.Storm
	stormOK := storm.Requests > 0 && storm.Failed == 0 && storm.Elapsed < targetStorm && storm.Charges == targetStormCharges
	hasFloor := s.Floor.Ops > 0
	floor := func(v string) string {
		if !hasFloor {
			return "-"
		}
		return v
	}
	cpu := fmt.Sprintf("%.3f ms", m.cpu)
	if hasFloor {
		cpu += fmt.Sprintf(" (%s the floor's)", fmtX(ratio(m.cpu, f.cpu)))
	}
	wal := fmtBytes(m.wal)
	if hasFloor {
		wal += fmt.Sprintf(" (%s the floor's)", fmtX(ratio(m.wal, f.wal)))
	}
	return []target{
		{"new payments / pgbench flow", fmtX(m.ratio), floor(fmtX(f.ratio)), fmt.Sprintf("≥ %.2f×", targetRatio), m.ratio >= targetRatio},
		{"new payments / the floor", fmtX(ofFloor), "-", fmt.Sprintf("≥ %.2f×", targetRatio), hasFloor && ofFloor >= targetRatio},
		{"WAL per payment (its database's, relay included)", wal, floor(fmtBytes(f.wal)), "the floor's at most", hasFloor && m.wal <= f.wal},
		{"API CPU per payment", cpu, floor(fmt.Sprintf("%.3f ms", f.cpu)), fmt.Sprintf("%.1f× the floor's at most", targetCPUOfFloor),
			hasFloor && m.cpu <= targetCPUOfFloor*f.cpu},
		{"p99 latency of a new payment", fmtDuration(m.p99), floor(fmtDuration(f.p99)), "the pgbench flow's at most (" + fmtDuration(refP99) + ")",
			len(s.New.Latencies) > 0 && len(s.Reference.Latencies) > 0 && m.p99 <= refP99},
		{"replays / new payments", fmtX(rr), "-", fmt.Sprintf("≥ %.0f×", targetReplayRatio), rr >= targetReplayRatio},
		{fmt.Sprintf("same-key storm of %d requests", storm.Requests),
			fmt.Sprintf("%s, %d charge(s), %d failed", fmtDuration(storm.Elapsed), storm.Charges, storm.Failed), "-",
			fmt.Sprintf("%d requests < %s, 1 charge", targetStormRequests, fmtDuration(targetStorm)), stormOK},
	}
}

// newPaymentMeasures are what the targets judge of a phase of new payments.
type newPaymentMeasures struct {
	ratio, wal, cpu float64
	p99             time.Duration
}

// measures are p's, with its rate as a ratio to ref's.
func (p phase) measures(ref phase) newPaymentMeasures {
	return newPaymentMeasures{
		ratio: ratio(p.rate(), ref.rate()),
		wal:   p.walPerOp(),
		cpu:   p.cpuPerOp(p.APICPU),
		p99:   percentile(p.Latencies, 0.99),
	}
}

// compareBuilds says how the second build of the API (-api-bin-b) did
// against the first, in the same rounds: each measure as B's over A's.
func compareBuilds(a, b phase) string {
	return fmt.Sprintf("API B against API A, same rounds (B / A): new payments %s, API CPU per payment %s, "+
		"PostgreSQL CPU per payment %s, WAL per payment %s, p99 %s",
		fmtX(ratio(b.rate(), a.rate())),
		fmtX(ratio(b.cpuPerOp(b.APICPU), a.cpuPerOp(a.APICPU))),
		fmtX(ratio(b.cpuPerOp(b.PGCPU), a.cpuPerOp(a.PGCPU))),
		fmtX(ratio(b.walPerOp(), a.walPerOp())),
		fmtX(ratio(float64(percentile(b.Latencies, 0.99)), float64(percentile(a.Latencies, 0.99)))))
}

// header is what the report says about where it ran.
type header struct {
	Machine     string // CPUs, model, memory
	PostgreSQL  string // version
	Settings    string // the durability settings, as read from the server
	Go          string
	Load        string // the machine's load average before and after the run
	Connections int
	Rounds      int
	Duration    time.Duration
	Started     time.Time
	// PlainB: API B is this binary in its plain configuration (its
	// settings), not another build.
	PlainB string
	// ReplayCache: the API ran with REPLAY_CACHE=memory.
	ReplayCache bool
}

// writeReport prints the whole report: where it ran, one row per phase and
// per kind, the targets, the storm and the soak.
func writeReport(w io.Writer, h header, phases []phase, s summary) error {
	var b strings.Builder
	writeHeader(&b, "paymentsbench", h)
	fmt.Fprintf(&b, "load:       %d connections; %d round(s) of %s per phase, pgbench, the floor and the API interleaved\n\n",
		h.Connections, h.Rounds, h.Duration)

	rows := slices.Clone(phases)
	rows = append(rows, s.Reference)
	if s.Floor.Ops > 0 {
		rows = append(rows, s.Floor)
	}
	rows = append(rows, s.New)
	if s.NewB.Ops > 0 {
		rows = append(rows, s.NewB)
	}
	if err := writePhaseTable(&b, rows); err != nil {
		return err
	}
	if s.NewB.Ops > 0 {
		if h.PlainB != "" {
			fmt.Fprintf(&b, "\nAPI B is the plain configuration (%s), which has no target: new payments %s pgbench's, %s the floor's; WAL per payment %s\n",
				h.PlainB, fmtX(ratio(s.NewB.rate(), s.Reference.rate())), fmtX(ratio(s.NewB.rate(), s.Floor.rate())), fmtBytes(s.NewB.walPerOp()))
		}
		fmt.Fprintf(&b, "%s\n", compareBuilds(s.New, s.NewB))
	}
	for _, p := range append(slices.Clone(phases), s.Replay) {
		if p.Failed > 0 {
			fmt.Fprintf(&b, "  %s: %d unexpected answers: %s\n", p.Name, p.Failed, fmtCounts(p.Unexpected))
		}
	}

	fmt.Fprintf(&b, "\ntargets; floor: the same flow behind a bare Go handler, no relay (tools/bench/floorapi)\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tmeasured\tfloor\twanted\tmet")
	for _, t := range targets(s) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Measured, t.Floor, t.Want, yesNo(t.Met))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	st := s.Storm
	fmt.Fprintf(&b, "\nstorm: %d requests with one key and Prefer: wait, all released at once: answered in %s (%s); "+
		"charges at the provider for the key: %d (create requests that reached it: %d)\n",
		st.Requests, fmtDuration(st.Elapsed), fmtCounts(st.Answers), st.Charges, st.ChargeRequests)
	so := s.Soak
	fmt.Fprintf(&b, "soak:  %s of new payments at %d connections: %d payments (%d failed); RSS %s -> %s; goroutines %d -> %d; "+
		"relay drained the outbox %s after the last answer",
		so.Duration, h.Connections, so.Payments, so.Failed, fmtMiB(so.RSSStart), fmtMiB(so.RSSEnd),
		so.GoroutinesStart, so.GoroutinesEnd, fmtDuration(so.Drain))
	if so.Behind != 0 {
		fmt.Fprintf(&b, " (not drained: the relay's slot was %d bytes of WAL behind when the bench stopped waiting)", so.Behind)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writePhaseTable prints one row per phase: rate, latency, and the work
// per operation.
func writePhaseTable(w io.Writer, phases []phase) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tops\tops/s\tp50\tp99\tcommits/op\tWAL/op\tWAL rec/op\tFPI/op\town WAL/op\town FPI/op\tins/op\tupd/op\tAPI CPU/op\tPG CPU/op\tclient CPU/op\tdrain\t")
	for _, p := range phases {
		api, drain, ownWAL, ownFPI := "-", "-", "-", "-"
		if p.OwnWAL.Records > 0 {
			ownWAL, ownFPI = fmtBytes(p.perOp(float64(p.OwnWAL.Bytes))), fmtFloat(p.perOp(float64(p.OwnWAL.FPI)), 2)
		}
		if p.Kind != kindReference {
			api, drain = fmtMillis(p.cpuPerOp(p.APICPU)), fmtDuration(p.Drain)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			p.Name, p.Ops, p.rate(),
			fmtDuration(percentile(p.Latencies, 0.5)), fmtDuration(percentile(p.Latencies, 0.99)),
			fmtFloat(p.perOp(float64(p.DB.Commits)), 2), fmtBytes(p.perOp(float64(p.DB.WALBytes))),
			fmtFloat(p.perOp(float64(p.DB.WALRecords)), 1), fmtFloat(p.perOp(float64(p.DB.WALFPI)), 2), ownWAL, ownFPI,
			fmtFloat(p.perOp(float64(p.DB.Inserted)), 1), fmtFloat(p.perOp(float64(p.DB.Updated)), 1),
			api, fmtMillis(p.cpuPerOp(p.PGCPU)), fmtMillis(p.cpuPerOp(p.ClientCPU)), drain)
	}
	return tw.Flush()
}

func fmtX(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", v)
}

func fmtFloat(v float64, decimals int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.*f", decimals, v)
}

// fmtBytes prints a byte count as B or KB (1 KB = 1024 B).
func fmtBytes(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v < 1024:
		return fmt.Sprintf("%.0f B", v)
	default:
		return fmt.Sprintf("%.1f KB", v/1024)
	}
}

func fmtMiB(v int64) string { return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20)) }

func fmtMillis(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2f ms", v)
}

// fmtDuration prints d in ms below a second, else in s.
func fmtDuration(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// fmtCounts prints a count per kind, most frequent first: "201 ×12, 409 ×3".
func fmtCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// writeHeader writes the lines that say where a report ran.
func writeHeader(b *strings.Builder, title string, h header) {
	fmt.Fprintf(b, "%s %s\n", title, h.Started.UTC().Format(time.RFC3339))
	fmt.Fprintf(b, "machine:    %s; load average %s\n", h.Machine, h.Load)
	fmt.Fprintf(b, "postgres:   %s; %s\n", h.PostgreSQL, h.Settings)
	fmt.Fprintf(b, "go:         %s\n", h.Go)
	if h.ReplayCache {
		fmt.Fprintf(b, "the API:    REPLAY_CACHE=memory (replays answered from its memory of answers)\n")
	}
}

// yesNo is a target's "met" column.
func yesNo(met bool) string {
	if met {
		return "yes"
	}
	return "no"
}
