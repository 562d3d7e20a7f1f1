package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/tools/bench"
)

// pgbench15Output is what pgbench 15 prints for a run of a custom script.
const pgbench15Output = `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: /work/.data/bench/pgbench-flow.sql
scaling factor: 1
query mode: prepared
number of clients: 16
number of threads: 2
maximum number of tries: 1
duration: 15 s
number of transactions actually processed: 13742
number of failed transactions: 0 (0.000%)
latency average = 17.412 ms
initial connection time = 12.345 ms
tps = 916.123456 (without initial connection time)
`

func TestParsePGBenchOutput(t *testing.T) {
	r, err := parsePGBenchOutput(pgbench15Output)
	if err != nil {
		t.Fatal(err)
	}
	if r.Processed != 13742 || r.Failed != 0 || r.TPS != 916.123456 || r.Latency != 17412*time.Microsecond {
		t.Errorf("parsed %+v", r)
	}
	failed := strings.Replace(pgbench15Output, "failed transactions: 0 (0.000%)", "failed transactions: 12 (0.087%)", 1)
	if r, err := parsePGBenchOutput(failed); err != nil || r.Failed != 12 {
		t.Errorf("failed transactions: %+v, %v; want 12", r, err)
	}
	// Before PostgreSQL 15 there is no failed line: none failed.
	old := strings.Replace(pgbench15Output, "number of failed transactions: 0 (0.000%)\n", "", 1)
	if r, err := parsePGBenchOutput(old); err != nil || r.Processed != 13742 || r.Failed != 0 {
		t.Errorf("pgbench 14 output: %+v, %v", r, err)
	}
	for name, out := range map[string]string{
		"empty":  "",
		"no tps": strings.Replace(pgbench15Output, "tps = ", "tpx = ", 1),
	} {
		if _, err := parsePGBenchOutput(out); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParsePGBenchLog(t *testing.T) {
	log := `0 0 17412 0 1763891234 123456
1 0 9001 0 1763891234 223456
2 0 failed 0 1763891234 323456
3 0 skipped 0 1763891234 423456
4 0 250 0 1763891234 523456 0
`
	got, err := parsePGBenchLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{17412 * time.Microsecond, 9001 * time.Microsecond, 250 * time.Microsecond}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("latency %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestPGBenchPathPrefersExplicitThenPGBinDir(t *testing.T) {
	noEnv := func(string) string { return "" }
	if got, err := pgbenchPath("/opt/pg/pgbench", noEnv, 15); err != nil || got != "/opt/pg/pgbench" {
		t.Errorf("explicit: %q, %v", got, err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "pgbench")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		if k == "PG_BIN_DIR" {
			return dir
		}
		return ""
	}
	if got, err := pgbenchPath("", env, 15); err != nil || got != bin {
		t.Errorf("PG_BIN_DIR: %q, %v; want %q", got, err, bin)
	}
}

func TestParseProcStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	stat := "4242 (postgres: a (b) c) S 4200 4242 4242 0 -1 4194560 900 0 0 0 1234 567 89 11 20 0 1 0 100 200000000 3000 18446744073709551615"
	st, err := parseProcStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != 4200 || st.CPU != (1234+567)*clockTick || st.ChildrenCPU != (89+11)*clockTick {
		t.Errorf("parsed %+v", st)
	}
	for _, bad := range []string{"", "12 (x) S 1 2", "12 (x) S one 2 3 4 5 6 7 8 9 10 11 12 13 14 15"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseVmRSSAndMetric(t *testing.T) {
	status := "Name:\tpaymentsapi\nVmPeak:\t  900000 kB\nVmRSS:\t   34100 kB\nThreads:\t9\n"
	if got, err := parseVmRSS(status); err != nil || got != 34100*1024 {
		t.Errorf("VmRSS = %d, %v", got, err)
	}
	if _, err := parseVmRSS("Name:\tx\n"); err == nil {
		t.Error("no VmRSS: no error")
	}
	exposition := "# HELP go_goroutines Number of goroutines that currently exist.\n# TYPE go_goroutines gauge\n" +
		"go_goroutines_total_created 7\ngo_goroutines 52\ngo_threads 9\n"
	if got, err := parseMetric(exposition, "go_goroutines"); err != nil || got != 52 {
		t.Errorf("go_goroutines = %v, %v", got, err)
	}
	if _, err := parseMetric(exposition, "go_gc_duration_seconds"); err == nil {
		t.Error("missing metric: no error")
	}
	cpuinfo := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n"
	if got, ok := procField(cpuinfo, "model name"); !ok || got != "AMD EPYC" {
		t.Errorf("model name = %q, %v", got, ok)
	}
}

func TestCutPaymentID(t *testing.T) {
	if id, ok := cutPaymentID("/payments/pay_abc"); !ok || id != "pay_abc" {
		t.Errorf("got %q, %v", id, ok)
	}
	for _, bad := range []string{"", "/payments/", "/refunds/re_1"} {
		if _, ok := cutPaymentID(bad); ok {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestParseConfig(t *testing.T) {
	c, err := parseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Connections != 16 || c.Rounds != 2 || c.Duration != 15*time.Second || c.StormRequests != 1000 || c.Soak != 30*time.Second {
		t.Errorf("defaults: %+v", c)
	}
	c, err = parseConfig([]string{"-connections", "32", "-duration", "1m", "-soak", "0"}, io.Discard)
	if err != nil || c.Connections != 32 || c.Duration != time.Minute || c.Soak != 0 || c.APIBinB != "" {
		t.Errorf("flags: %+v, %v", c, err)
	}
	if c, err = parseConfig([]string{"-api-bin-b", "/tmp/paymentsapi.before"}, io.Discard); err != nil || c.APIBinB != "/tmp/paymentsapi.before" {
		t.Errorf("-api-bin-b: %+v, %v", c, err)
	}
	if c, err = parseConfig([]string{"-relay-b", "poll"}, io.Discard); err != nil || c.RelayB != "poll" {
		t.Errorf("-relay-b: %+v, %v", c, err)
	}
	for _, args := range [][]string{{"-connections", "0"}, {"-rounds", "0"}, {"-duration", "10ms"}, {"-storm", "-1"}, {"extra"},
		{"-growth", "-api-bin-b", "bin/other"}, {"-relay-b", "kafka"}, {"-growth", "-relay-b", "poll"}} {
		if _, err := parseConfig(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// The reference flow commits three times per payment, as the flow it stands
// for does:
// two transactions and one statement between them.
func TestFlowScriptCommitsThreeTimes(t *testing.T) {
	b, err := bench.PGBench.ReadFile(bench.FlowScript)
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	if n, m := strings.Count(script, "\nBEGIN;\n"), strings.Count(script, "\nCOMMIT;\n"); n != 2 || m != 2 {
		t.Errorf("%d BEGIN and %d COMMIT, want 2 transactions", n, m)
	}
	between := script[strings.Index(script, "\nCOMMIT;\n"):strings.LastIndex(script, "\nBEGIN;\n")]
	if strings.Count(between, ";") != 2 { // the first COMMIT's and the statement's
		t.Errorf("want exactly one statement between the transactions:\n%s", between)
	}
	for _, table := range []string{"idempotency_keys", "payments", "outbox_events"} {
		if !strings.Contains(script, "INSERT INTO "+table) {
			t.Errorf("the flow inserts no %s", table)
		}
	}
}

// The group commit's histogram is read by kind, and a phase's share is
// the difference of two readings; an API without it reads as none.
func TestParseGroupCommits(t *testing.T) {
	exposition := func(claims, claimTx, steps, stepTx int) string {
		return "# TYPE paymentsapi_group_commit_batches histogram\n" +
			`paymentsapi_group_commit_batches_bucket{kind="claims",le="1"} 3` + "\n" +
			fmt.Sprintf("paymentsapi_group_commit_batches_sum{kind=\"claims\"} %d\n", claims) +
			fmt.Sprintf("paymentsapi_group_commit_batches_count{kind=\"claims\"} %d\n", claimTx) +
			fmt.Sprintf("paymentsapi_group_commit_batches_sum{kind=\"steps\"} %d\n", steps) +
			fmt.Sprintf("paymentsapi_group_commit_batches_count{kind=\"steps\"} %d\n", stepTx)
	}
	before, ok := parseGroupCommits(exposition(10, 10, 4, 4))
	if !ok {
		t.Fatal("not read")
	}
	after, ok := parseGroupCommits(exposition(360, 110, 404, 104))
	if !ok {
		t.Fatal("not read")
	}
	g := after.sub(before)
	if g.Claims.perTransaction() != 3.5 || g.Steps.perTransaction() != 4 {
		t.Fatalf("per transaction: claims %v, steps %v; want 3.5 and 4", g.Claims.perTransaction(), g.Steps.perTransaction())
	}
	if d := g.describe(); d != "; group commit: 3.5 claims per transaction, 4.0 owner steps per transaction" {
		t.Fatalf("described as %q", d)
	}
	// An API that merges like batches says what share it merged.
	merging := func(claims, steps int) string {
		return fmt.Sprintf("paymentsapi_group_commit_merged_batches_total{kind=\"claims\"} %d\n", claims) +
			fmt.Sprintf("paymentsapi_group_commit_merged_batches_total{kind=\"steps\"} %d\n", steps)
	}
	before, _ = parseGroupCommits(exposition(10, 10, 4, 4) + merging(0, 0))
	after, _ = parseGroupCommits(exposition(360, 110, 404, 104) + merging(175, 100))
	if d := after.sub(before).describe(); d != "; group commit: 3.5 claims per transaction (50% merged), 4.0 owner steps per transaction (25% merged)" {
		t.Fatalf("described as %q", d)
	}
	if _, ok := parseGroupCommits("go_goroutines 52\n"); ok {
		t.Fatal("an API without the histogram read as having one")
	}
	if d := (groupCommits{}).describe(); d != "" {
		t.Fatalf("nothing sent described as %q", d)
	}
}
