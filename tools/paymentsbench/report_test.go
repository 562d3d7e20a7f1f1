package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestCountersDelta(t *testing.T) {
	before := counters{WALRecords: 10, WALFPI: 1, WALBytes: 1000, WALSyncs: 2, Commits: 5, Rollbacks: 1, Inserted: 3, Updated: 4, Deleted: 0}
	after := counters{WALRecords: 70, WALFPI: 3, WALBytes: 8000, WALSyncs: 9, Commits: 14, Rollbacks: 1, Inserted: 10, Updated: 9, Deleted: 2}
	d := after.sub(before)
	want := counters{WALRecords: 60, WALFPI: 2, WALBytes: 7000, WALSyncs: 7, Commits: 9, Rollbacks: 0, Inserted: 7, Updated: 5, Deleted: 2}
	if d != want {
		t.Errorf("sub = %+v, want %+v", d, want)
	}
	if got := before.add(d); got != after {
		t.Errorf("add = %+v, want %+v", got, after)
	}
}

func TestPercentileIsNearestRank(t *testing.T) {
	var l []time.Duration
	for i := 1; i <= 100; i++ {
		l = append(l, time.Duration(i)*time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{0.5: 50 * time.Millisecond, 0.99: 99 * time.Millisecond, 1: 100 * time.Millisecond, 0.001: time.Millisecond} {
		if got := percentile(l, q); got != want {
			t.Errorf("percentile(%v) = %v, want %v", q, got, want)
		}
	}
	if got := percentile(nil, 0.99); got != 0 {
		t.Errorf("percentile of nothing = %v, want 0", got)
	}
	if got := percentile([]time.Duration{7}, 0.5); got != 7 {
		t.Errorf("percentile of one = %v, want 7", got)
	}
}

func TestPerOperationArithmetic(t *testing.T) {
	p := phase{Ops: 400, Elapsed: 2 * time.Second, APICPU: 520 * time.Millisecond, DB: counters{WALBytes: 400 * 7168, Commits: 1720}}
	if got := p.rate(); got != 200 {
		t.Errorf("rate = %v, want 200", got)
	}
	if got := p.perOp(float64(p.DB.WALBytes)); got != 7168 {
		t.Errorf("WAL per op = %v, want 7168", got)
	}
	if got := p.perOp(float64(p.DB.Commits)); got != 4.3 {
		t.Errorf("commits per op = %v, want 4.3", got)
	}
	if got := p.cpuPerOp(p.APICPU); math.Abs(got-1.3) > 1e-9 {
		t.Errorf("CPU per op = %v ms, want 1.3", got)
	}
	empty := phase{}
	if !math.IsNaN(empty.perOp(10)) || empty.rate() != 0 {
		t.Errorf("an empty phase: perOp %v, rate %v; want NaN and 0", empty.perOp(10), empty.rate())
	}
}

func TestCombineAddsRoundsUp(t *testing.T) {
	r1 := phase{Kind: kindNew, Ops: 300, Failed: 1, Unexpected: map[string]int{"409": 1}, Elapsed: time.Second,
		Latencies: []time.Duration{3, 1}, DB: counters{Commits: 900}, APICPU: time.Second, PGCPU: 2 * time.Second}
	r2 := phase{Kind: kindNew, Ops: 500, Unexpected: map[string]int{}, Elapsed: 2 * time.Second,
		Latencies: []time.Duration{2}, DB: counters{Commits: 1500}, APICPU: time.Second, PGCPU: time.Second}
	c := combine("all", []phase{r1, r2})
	if c.Kind != kindNew || c.Ops != 800 || c.Failed != 1 || c.Unexpected["409"] != 1 || c.Elapsed != 3*time.Second ||
		c.DB.Commits != 2400 || c.APICPU != 2*time.Second || c.PGCPU != 3*time.Second {
		t.Errorf("combine = %+v", c)
	}
	if got := c.Latencies; len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Errorf("latencies = %v, want merged and sorted", got)
	}
	// The rate of the rounds together is total work over total time, not
	// the mean of the rates (300/s and 250/s).
	if got := c.rate(); math.Abs(got-800.0/3) > 1e-9 {
		t.Errorf("combined rate = %v, want %v", got, 800.0/3)
	}
}

// sampleSummary is a slow run of the API: 408 new payments/s against
// 916 pgbench flows/s, replays 3,000/s, 4.3 commits and 7.1 KB of WAL per
// payment, 1.3 ms of API CPU.
func sampleSummary() summary {
	return summarize(samplePhases(), stormResult{Requests: 1000, Elapsed: 1500 * time.Millisecond, Charges: 1, ChargeRequests: 1, Answers: map[string]int{"201": 1, "201 replayed": 999}},
		soakResult{})
}

// samplePhases are the phases of sampleSummary.
func samplePhases() []phase {
	ms := func(n int) []time.Duration {
		l := make([]time.Duration, 100)
		for i := range l {
			l[i] = time.Duration(n) * time.Millisecond
		}
		return l
	}
	return []phase{
		{Name: "ref 1", Kind: kindReference, Ops: 916, Elapsed: time.Second},
		{Name: "new 1", Kind: kindNew, Ops: 408, Elapsed: time.Second, Latencies: ms(40),
			DB: counters{Commits: 1754, WALBytes: 408 * 7270}, APICPU: 408 * 1300 * time.Microsecond},
		{Name: "ref 2", Kind: kindReference, Ops: 916, Elapsed: time.Second},
		{Name: "new 2", Kind: kindNew, Ops: 408, Elapsed: time.Second, Latencies: ms(40),
			DB: counters{Commits: 1754, WALBytes: 408 * 7270}, APICPU: 408 * 1300 * time.Microsecond},
		{Name: "replays", Kind: kindReplay, Ops: 3000, Elapsed: time.Second},
	}
}

// sampleFloor is a floor phase beside sampleSummary's: 800 payments/s,
// 3 commits and 5 KB of WAL each, 0.5 ms of CPU, p99 30 ms.
func sampleFloor() phase {
	return phase{Name: "floor 1", Kind: kindFloor, Ops: 800, Elapsed: time.Second,
		Latencies: []time.Duration{30 * time.Millisecond},
		DB:        counters{Commits: 2400, WALBytes: 800 * 5120}, APICPU: 400 * time.Millisecond}
}

func TestTargetsJudgeASampleRun(t *testing.T) {
	s := summarize(append(samplePhases(), sampleFloor()), sampleSummary().Storm, soakResult{})
	got := map[string]target{}
	for _, tg := range targets(s) {
		got[tg.Name] = tg
	}
	want := map[string]struct {
		measured, floor string
		met             bool
	}{
		"new payments / pgbench flow":                      {"0.45×", "0.87×", false},
		"new payments / the floor":                         {"0.51×", "-", false},
		"WAL per payment (its database's, relay included)": {"7.1 KB (1.42× the floor's)", "5.0 KB", false},
		"API CPU per payment":                              {"1.300 ms (2.60× the floor's)", "0.500 ms", false},
		"p99 latency of a new payment":                     {"40.0 ms", "30.0 ms", false}, // the pgbench flow has no latencies here
		"replays / new payments":                           {"7.35×", "-", true},
		"same-key storm of 1000 requests":                  {"1.50 s, 1 charge(s), 0 failed", "-", false},
	}
	if len(got) != len(want) {
		t.Errorf("%d targets, want %d: %+v", len(got), len(want), got)
	}
	for name, w := range want {
		tg, ok := got[name]
		if !ok {
			t.Errorf("no target %q", name)
			continue
		}
		if tg.Measured != w.measured || tg.Floor != w.floor || tg.Met != w.met {
			t.Errorf("%s: measured %q floor %q met %v, want %q %q %v", name, tg.Measured, tg.Floor, tg.Met, w.measured, w.floor, w.met)
		}
	}
}

// Without the floor its column says nothing, and the targets judged
// against it are not met.
func TestTargetsAgainstTheFloorNeedTheFloor(t *testing.T) {
	for _, tg := range targets(sampleSummary()) {
		if tg.Floor != "-" {
			t.Errorf("%s: floor %q without a floor phase, want -", tg.Name, tg.Floor)
		}
		switch tg.Name {
		case "new payments / the floor", "WAL per payment (its database's, relay included)", "API CPU per payment":
			if tg.Met {
				t.Errorf("%s met without a floor", tg.Name)
			}
		}
	}
	var b strings.Builder
	if err := writeReport(&b, header{}, nil, summarize(append(samplePhases(), sampleFloor()), stormResult{}, soakResult{})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Go floor, all rounds") {
		t.Errorf("report lacks the floor's row:\n%s", b.String())
	}
}

// The floor's phases are of their own kind, never the API's new payments.
func TestFloorPaymentsAreTheFloors(t *testing.T) {
	if w := floorPayments("Go floor, round 1", "floor-r1", 16, time.Second); w.Kind != kindFloor {
		t.Errorf("floor workload of kind %v, want kindFloor", w.Kind)
	}
}

func TestTargetsAreMetAtTheirBounds(t *testing.T) {
	ms := func(n int) []time.Duration { return []time.Duration{time.Duration(n) * time.Millisecond} }
	s := summarize([]phase{
		{Kind: kindReference, Ops: 1000, Elapsed: time.Second, Latencies: ms(20)},
		{Kind: kindFloor, Ops: 1000, Elapsed: time.Second, Latencies: ms(25),
			DB: counters{Commits: 3000, WALBytes: 1000 * 6000}, APICPU: 250 * time.Millisecond},
		{Kind: kindNew, Ops: 1000, Elapsed: time.Second, Latencies: ms(20),
			DB: counters{Commits: 2000, WALBytes: 1000 * 6000}, APICPU: 300 * time.Millisecond},
		{Kind: kindReplay, Ops: 5000, Elapsed: time.Second},
	}, stormResult{Requests: 1000, Elapsed: 999 * time.Millisecond, Charges: 1}, soakResult{})
	for _, tg := range targets(s) {
		if !tg.Met {
			t.Errorf("%s: %s not met, want met (at the bound)", tg.Name, tg.Measured)
		}
	}
}

func TestTargetsNeverMetByNothing(t *testing.T) {
	for _, tg := range targets(summarize(nil, stormResult{}, soakResult{})) {
		if tg.Met {
			t.Errorf("%s met with nothing measured (%s)", tg.Name, tg.Measured)
		}
	}
	// A storm that charged twice, or left a request unanswered, fails
	// however fast it was.
	for _, st := range []stormResult{
		{Requests: 1000, Elapsed: time.Millisecond, Charges: 2},
		{Requests: 1000, Elapsed: time.Millisecond, Charges: 1, Failed: 1},
	} {
		ts := targets(summary{Storm: st})
		if last := ts[len(ts)-1]; last.Met {
			t.Errorf("storm %+v met the target", st)
		}
	}
}

func TestReportShowsEveryPhaseAndTarget(t *testing.T) {
	s := sampleSummary()
	s.Soak = soakResult{Duration: 30 * time.Second, Drain: 2 * time.Minute, Behind: 12}
	phases := []phase{
		{Name: "pgbench flow, round 1", Kind: kindReference, Ops: 916, Elapsed: time.Second},
		{Name: "API new payments, round 1", Kind: kindNew, Ops: 408, Elapsed: time.Second, Failed: 2, Unexpected: map[string]int{"409": 2}},
	}
	var b strings.Builder
	if err := writeReport(&b, header{Machine: "2 CPUs", PostgreSQL: "PostgreSQL 15", Settings: "fsync=on", Connections: 16, Rounds: 2, Duration: 15 * time.Second}, phases, s); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"fsync=on", "16 connections; 2 round(s) of 15s",
		"pgbench flow, round 1", "API new payments, round 1", "pgbench flow, all rounds", "API new payments, all rounds",
		"API new payments, round 1: 2 unexpected answers: 409 ×2",
		"new payments / pgbench flow", "0.45×", "≥ 1.00×",
		"storm: 1000 requests", "201 replayed ×999, 201 ×1", "charges at the provider for the key: 1",
		"soak:  30s of new payments", "not drained: the relay's slot was 12 bytes of WAL behind",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestFormatting(t *testing.T) {
	for got, want := range map[string]string{
		fmtBytes(512):                        "512 B",
		fmtBytes(7270):                       "7.1 KB",
		fmtBytes(math.NaN()):                 "-",
		fmtDuration(1500 * time.Microsecond): "1.5 ms",
		fmtDuration(2500 * time.Millisecond): "2.50 s",
		fmtX(math.NaN()):                     "n/a",
		fmtCounts(map[string]int{"409": 3, "201": 7, "500": 3}): "201 ×7, 409 ×3, 500 ×3",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

// A second build's rounds are summed apart from the first's, and compared
// with them measure by measure, B over A.
func TestASecondBuildIsComparedWithTheFirst(t *testing.T) {
	lat := func(ms ...int) []time.Duration {
		var l []time.Duration
		for _, m := range ms {
			l = append(l, time.Duration(m)*time.Millisecond)
		}
		return l
	}
	a := phase{Name: "API new payments, round 1", Kind: kindNew, Ops: 1000, Elapsed: time.Second, Latencies: lat(10, 20),
		APICPU: 300 * time.Millisecond, PGCPU: 800 * time.Millisecond, DB: counters{WALBytes: 10_000_000}}
	b := phase{Name: "API B new payments, round 1", Kind: kindNewB, Ops: 1100, Elapsed: time.Second, Latencies: lat(10, 18),
		APICPU: 297 * time.Millisecond, PGCPU: 880 * time.Millisecond, DB: counters{WALBytes: 11_000_000}}
	s := summarize([]phase{a, b}, stormResult{}, soakResult{})
	if s.New.Ops != 1000 || s.NewB.Ops != 1100 {
		t.Fatalf("summed A %d and B %d payments, want 1000 and 1100", s.New.Ops, s.NewB.Ops)
	}
	got := compareBuilds(s.New, s.NewB)
	for _, want := range []string{"new payments 1.10×", "API CPU per payment 0.90×", "PostgreSQL CPU per payment 1.00×", "WAL per payment 1.00×", "p99 0.90×"} {
		if !strings.Contains(got, want) {
			t.Errorf("comparison %q lacks %q", got, want)
		}
	}
	if s := summarize([]phase{a}, stormResult{}, soakResult{}); s.NewB.Ops != 0 {
		t.Errorf("a run without a second build summed %d of its payments", s.NewB.Ops)
	}
}
