package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestChunksCoverEveryPaymentOnce(t *testing.T) {
	got := chunks(120_001, 50_000)
	want := [][2]int64{{1, 50_000}, {50_001, 100_000}, {100_001, 120_001}}
	if len(got) != len(want) {
		t.Fatalf("chunks = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("chunk %d = %v, want %v", i, got[i], want[i])
		}
	}
	if got := chunks(3, 5); len(got) != 1 || got[0] != [2]int64{1, 3} {
		t.Errorf("chunks(3, 5) = %v, want [[1 3]]", got)
	}
	if got := chunks(0, 5); len(got) != 0 {
		t.Errorf("chunks(0, 5) = %v, want none", got)
	}
}

// growthRun is a growth run: 600/s on empty tables with p99 40 ms, 550/s
// with the rows loaded and p99 50 ms, 520/s during clean-up.
func growthRun(erased int64) growthResult {
	lat := func(p50, p99 int) []time.Duration {
		l := make([]time.Duration, 100)
		for i := range l {
			l[i] = time.Duration(p50) * time.Millisecond
		}
		l[98], l[99] = time.Duration(p99)*time.Millisecond, time.Duration(p99)*time.Millisecond
		return l
	}
	empty := phase{Name: "empty", Kind: kindNew, Ops: 6000, Elapsed: 10 * time.Second, Latencies: lat(20, 40), DB: counters{WALBytes: 6000 * 9 * 1024}}
	grown := phase{Name: "grown", Kind: kindNew, Ops: 5500, Elapsed: 10 * time.Second, Latencies: lat(22, 50)}
	cleanup := phase{Name: "growth: during clean-up, round 1", Kind: kindNew, Ops: 5200, Elapsed: 10 * time.Second, Latencies: lat(25, 60)}
	return growthResult{
		Rows: 2_000_000, TTL: 50 * time.Minute,
		Phases:  []phase{empty, grown, cleanup},
		Empty:   combine("growth: empty tables, all rounds", []phase{empty}),
		Grown:   combine("growth: 2M rows, all rounds", []phase{grown}),
		Cleanup: combine("growth: during clean-up, all rounds", []phase{cleanup}),
		Load: loadResult{Insert: 400 * time.Second, Vacuum: 30 * time.Second, WALBytes: 2_000_000 * 4700,
			Tables: []tableSize{{Name: "payments", Rows: 2_000_000, Table: 600 << 20, Indexes: 700 << 20}}},
		Erase: eraseResult{Expired: 1_900_000, BeforePhase: 100_000, During: erased,
			PerRound: []erasedRound{{Erased: erased, Window: 25 * time.Second}}},
	}
}

func TestGrowthTargets(t *testing.T) {
	got := map[string]growthTarget{}
	for _, tg := range growthTargets(growthRun(250_000)) {
		got[tg.Name] = tg
	}
	want := map[string]struct {
		measured string
		met      bool
	}{
		"new payments, 2M rows / empty tables":         {"0.92×", true},
		"p99 of a new payment, 2M rows / empty tables": {"1.25×", false},
		"new payments during clean-up / empty tables":  {"0.87×", false},
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
		if tg.Measured != w.measured || tg.Met != w.met {
			t.Errorf("%s: measured %q met %v, want %q %v", name, tg.Measured, tg.Met, w.measured, w.met)
		}
	}
}

func TestGrowthTargetsAtTheirBounds(t *testing.T) {
	g := growthRun(1)
	// Exactly 0.9× the rate and 1.2× the p99 meet the targets.
	g.Grown = phase{Ops: 5400, Elapsed: 10 * time.Second, Latencies: []time.Duration{48 * time.Millisecond}}
	g.Empty = phase{Ops: 6000, Elapsed: 10 * time.Second, Latencies: []time.Duration{40 * time.Millisecond}}
	g.Cleanup = phase{Ops: 5400, Elapsed: 10 * time.Second}
	for _, tg := range growthTargets(g) {
		if !tg.Met {
			t.Errorf("%s: %s not met at the bound", tg.Name, tg.Measured)
		}
	}
	// Clean-up's target is not met by a phase during which nothing was erased.
	g.Erase.During = 0
	tg := growthTargets(g)[2]
	if tg.Met || !strings.Contains(tg.Measured, "nothing erased") {
		t.Errorf("nothing erased: %+v, want not met and said", tg)
	}
	// Nothing measured meets nothing.
	for _, tg := range growthTargets(growthResult{Erase: eraseResult{During: 1}}) {
		if tg.Met || tg.Measured != "n/a" {
			t.Errorf("empty run: %+v, want n/a and not met", tg)
		}
	}
}

func TestGrowthReport(t *testing.T) {
	var b strings.Builder
	h := header{Machine: "2 CPUs", Connections: 16, Rounds: 1, Duration: 10 * time.Second, Started: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	if err := writeGrowthReport(&b, h, growthRun(250_000)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"paymentsbench -growth 2026-11-26T12:00:00Z",
		"1 round(s) of 10s per phase: empty tables, 2M finished payments loaded, during clean-up",
		"growth: empty tables, all rounds  6000    600  20.0 ms  40.0 ms",
		"new payments, 2M rows / empty tables          0.92×     ≥ 0.90×  yes",
		"p99 during clean-up / empty tables            1.50×",
		"2M payments with their keys, transitions and events in 400.00 s (5000 payments/s), 8964.5 MiB of WAL (4.6 KB per payment); VACUUM (ANALYZE) 30.00 s",
		"payments  2000000  600.0 MiB  700.0 MiB",
		"IDEMPOTENCY_TTL=50m0s; 1900000 expired answers stored when the clean-up phase began, 100000 erased before it",
		"250000 during it (round 1: 250000 in 25.00 s, 10000/s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestFmtCountAndPerSecond(t *testing.T) {
	for n, want := range map[int]string{2_000_000: "2M", 2_500_000: "2.5M", 100_000: "100k", 1_500: "1.5k", 999: "999", 1_234_567: "1234567"} {
		if got := fmtCount(n); got != want {
			t.Errorf("fmtCount(%d) = %q, want %q", n, got, want)
		}
	}
	if got := perSecond(500, 2*time.Second); got != 250 {
		t.Errorf("perSecond = %v, want 250", got)
	}
	if !math.IsNaN(perSecond(1, 0)) {
		t.Error("perSecond over no time is not NaN")
	}
}

func TestRelationBlocks(t *testing.T) {
	before := relIO{"payments_pkey": {Read: 10, Hit: 100}, "payments": {Read: 1, Hit: 50}}
	after := relIO{"payments_pkey": {Read: 40, Hit: 180}, "payments": {Read: 1, Hit: 90}, "events_pkey": {Read: 5, Hit: 5}}
	d := after.sub(before)
	if d["payments_pkey"] != (blocks{Read: 30, Hit: 80}) || d["payments"] != (blocks{Read: 0, Hit: 40}) || d["events_pkey"] != (blocks{Read: 5, Hit: 5}) {
		t.Errorf("sub = %v", d)
	}
	if sum := d.add(d); sum["payments_pkey"] != (blocks{Read: 60, Hit: 160}) || sum["events_pkey"] != (blocks{Read: 10, Hit: 10}) {
		t.Errorf("add = %v", sum)
	}
	// Ranked by the most reads per operation in any phase; never read: left out.
	io := [3]relIO{
		{"a": {Read: 100}, "b": {Read: 10}, "never": {Hit: 1000}},
		{"a": {Read: 100}, "b": {Read: 500}, "c": {Read: 100}},
		{"c": {Read: 100}},
	}
	got := topReads(io, [3]int{100, 100, 10}, 2)
	if len(got) != 2 || got[0] != "c" || got[1] != "b" {
		t.Errorf("topReads = %v, want [c b]", got)
	}
	if got := topReads(io, [3]int{100, 100, 10}, 10); len(got) != 3 {
		t.Errorf("topReads of all = %v, want a, b and c", got)
	}
}

func TestFmtMaintenance(t *testing.T) {
	m := relIO{"payments": {}, "outbox_events": {Hit: 1}, "idempotency_keys": {Read: 1, Hit: 2}}
	want := "idempotency_keys (vacuum ×1, analyze ×2), outbox_events (vacuum ×0, analyze ×1)"
	if got := fmtMaintenance(m); got != want {
		t.Errorf("fmtMaintenance = %q, want %q", got, want)
	}
	if got := fmtMaintenance(nil); got != "" {
		t.Errorf("fmtMaintenance(nil) = %q, want nothing", got)
	}
}
