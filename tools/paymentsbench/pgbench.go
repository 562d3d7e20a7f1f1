package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// pgbenchResult is what one pgbench run reports.
type pgbenchResult struct {
	Processed int           // "number of transactions actually processed"
	Failed    int           // "number of failed transactions" (PostgreSQL 15+)
	TPS       float64       // "tps = ... (without initial connection time)"
	Latency   time.Duration // "latency average"
	// Latencies are the latencies of every transaction, sorted, from the
	// per-transaction logs (-l).
	Latencies []time.Duration
	// CPU is pgbench's own CPU time (user + system): the client's cost.
	CPU time.Duration
}

var (
	pgbenchProcessedRE = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
	pgbenchFailedRE    = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
	pgbenchLatencyRE   = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
	pgbenchTPSRE       = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
)

// parsePGBenchOutput reads the summary pgbench prints on stdout.
func parsePGBenchOutput(out string) (pgbenchResult, error) {
	var r pgbenchResult
	m := pgbenchProcessedRE.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New("pgbench output has no \"number of transactions actually processed\"")
	}
	r.Processed, _ = strconv.Atoi(m[1])
	if m := pgbenchFailedRE.FindStringSubmatch(out); m != nil {
		r.Failed, _ = strconv.Atoi(m[1])
	}
	m = pgbenchTPSRE.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New("pgbench output has no \"tps = ... (without initial connection time)\"")
	}
	var err error
	if r.TPS, err = strconv.ParseFloat(m[1], 64); err != nil {
		return r, fmt.Errorf("pgbench tps: %w", err)
	}
	if m := pgbenchLatencyRE.FindStringSubmatch(out); m != nil {
		ms, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return r, fmt.Errorf("pgbench latency: %w", err)
		}
		r.Latency = time.Duration(ms * float64(time.Millisecond))
	}
	return r, nil
}

// parsePGBenchLog reads a per-transaction log of pgbench -l: one line per
// transaction, "client_id transaction_no time script_no time_epoch time_us
// ...", time in microseconds, or "failed"/"skipped" (not latencies).
func parsePGBenchLog(r io.Reader) ([]time.Duration, error) {
	var out []time.Duration
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		us, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue // failed or skipped
		}
		out = append(out, time.Duration(us)*time.Microsecond)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read pgbench log: %w", err)
	}
	return out, nil
}

// pgbenchRun is one pgbench invocation against the cluster.
type pgbenchRun struct {
	Bin      string
	Script   string // path of the script file
	Port     int
	Database string
	Clients  int
	Threads  int
	Duration time.Duration
	LogDir   string // where the per-transaction logs go; emptied first
}

// run runs pgbench: prepared statements, no vacuum, the script only.
func (p pgbenchRun) run(ctx context.Context) (pgbenchResult, error) {
	if err := os.RemoveAll(p.LogDir); err != nil {
		return pgbenchResult{}, fmt.Errorf("pgbench logs: %w", err)
	}
	if err := os.MkdirAll(p.LogDir, 0o755); err != nil {
		return pgbenchResult{}, fmt.Errorf("pgbench logs: %w", err)
	}
	args := []string{
		"-n", "-M", "prepared",
		"-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-U", "postgres",
		"-c", strconv.Itoa(p.Clients), "-j", strconv.Itoa(p.Threads),
		"-T", strconv.Itoa(max(1, int(p.Duration.Round(time.Second).Seconds()))),
		"-f", p.Script,
		"-l", "--log-prefix", filepath.Join(p.LogDir, "pgbench"),
		p.Database,
	}
	cmd := exec.CommandContext(ctx, p.Bin, args...)
	cmd.Dir = p.LogDir
	cmd.Env = []string{"PGAPPNAME=pgbench", "LC_ALL=C"}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return pgbenchResult{}, fmt.Errorf("pgbench: %w\n%s%s", err, stdout.String(), tail(stderr.String(), 4000))
	}
	res, err := parsePGBenchOutput(stdout.String())
	res.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if err != nil {
		return res, fmt.Errorf("%w\n%s", err, stdout.String())
	}
	logs, err := filepath.Glob(filepath.Join(p.LogDir, "pgbench.*"))
	if err != nil {
		return res, fmt.Errorf("pgbench logs: %w", err)
	}
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			return res, fmt.Errorf("pgbench log: %w", err)
		}
		l, err := parsePGBenchLog(f)
		f.Close()
		if err != nil {
			return res, err
		}
		res.Latencies = append(res.Latencies, l...)
	}
	slices.Sort(res.Latencies)
	return res, nil
}

// pgbenchPath returns the pgbench to run: explicit, else $PG_BIN_DIR's, else
// the one of the server's major version under /usr/lib/postgresql, else the
// one on $PATH.
func pgbenchPath(explicit string, getenv func(string) string, serverMajor int) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	var candidates []string
	if dir := getenv("PG_BIN_DIR"); dir != "" {
		candidates = append(candidates, filepath.Join(dir, "pgbench"))
	}
	candidates = append(candidates, fmt.Sprintf("/usr/lib/postgresql/%d/bin/pgbench", serverMajor))
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c, nil
		}
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("pgbench not found (tried %s and $PATH): install the PostgreSQL client programs or pass -pgbench",
		strings.Join(candidates, ", "))
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
