package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// apiProcess is the payments API, the binary built from cmd/paymentsapi,
// running as a child process with the production assembly: its HTTP server,
// outbox relay (log publisher, stdout), reconciler, clean-up and LISTEN
// connection.
type apiProcess struct {
	cmd  *exec.Cmd
	URL  string
	Pid  int
	done chan struct{} // closed when the process has exited
	err  error         // how it exited; read after done
}

// apiSettings is what the API is started with.
type apiSettings struct {
	Bin         string
	DatabaseURL string
	ProviderURL string
	APIKeys     string // tenant:secret
	LogPath     string // the API's stderr (its JSON logs)
	// Env is added to the API's environment (NAME=value), after the
	// settings above: the growth mode's clean-up phase sets its replay
	// window and clean-up interval here.
	Env       []string
	AppendLog bool // a restart: keep the log of the process before
	getenv    func(string) string
}

// startAPI starts the API on a free loopback port and returns once it
// answers /readyz (database reachable, migrations applied).
func startAPI(ctx context.Context, s apiSettings) (*apiProcess, error) {
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if s.AppendLog {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	logFile, err := os.OpenFile(s.LogPath, flags, 0o666)
	if err != nil {
		return nil, fmt.Errorf("API log: %w", err)
	}
	defer logFile.Close() // the child has its own copy
	cmd := exec.Command(s.Bin)
	cmd.Env = []string{
		"DATABASE_URL=" + s.DatabaseURL,
		"HTTP_ADDR=127.0.0.1:0",
		"API_KEYS=" + s.APIKeys,
		"PROVIDER=sim",
		"PROVIDER_URL=" + s.ProviderURL,
		"OUTBOX_PUBLISHER=log",
		"LOG_LEVEL=info",
	}
	for _, name := range []string{"PATH", "HOME", "TMPDIR", "GOMAXPROCS", "GOGC", "GOMEMLIMIT", "DEBUG_ADDR"} {
		if v := s.getenv(name); v != "" {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, s.Env...)
	cmd.Stderr = logFile
	cmd.SysProcAttr = childProcAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("API stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the API (%s; `make build` builds it): %w", s.Bin, err)
	}
	p := &apiProcess{cmd: cmd, Pid: cmd.Process.Pid, done: make(chan struct{})}
	urls := make(chan string, 1)
	go func() {
		// The banner names the address; then the relay's events (one JSON
		// line each) follow and are read to the end, so that the API never
		// blocks on a full pipe.
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if u, ok := strings.CutPrefix(strings.TrimSpace(line), "paymentsapi is listening on "); ok {
				urls <- u
				break
			}
			if err != nil {
				return
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()

	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	select {
	case p.URL = <-urls:
	case <-p.done:
		return nil, fmt.Errorf("the API exited during start-up (%v); its log: %s", p.err, s.LogPath)
	case <-ctx.Done():
		p.stop()
		return nil, fmt.Errorf("the API did not start: %w; its log: %s", ctx.Err(), s.LogPath)
	}
	for {
		resp, err := http.Get(p.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("the API exited during start-up (%v); its log: %s", p.err, s.LogPath)
		case <-ctx.Done():
			p.stop()
			return nil, fmt.Errorf("the API did not become ready: %w; its log: %s", ctx.Err(), s.LogPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop asks the API to shut down (SIGTERM: in-flight requests finish) and
// waits; it kills it if it has not exited after 30 s.
func (p *apiProcess) stop() error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop the API: %w", err)
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("the API did not stop within 30 s after SIGTERM: killed")
	}
}

// exited reports whether the API has exited, and how.
func (p *apiProcess) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// metrics reads the API's /metrics.
func (p *apiProcess) metrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("API metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("API metrics: %w", err)
	}
	return string(b), nil
}

// goroutines reads go_goroutines from the API's /metrics.
func (p *apiProcess) goroutines(ctx context.Context) (int, error) {
	m, err := p.metrics(ctx)
	if err != nil {
		return 0, err
	}
	v, err := parseMetric(m, "go_goroutines")
	return int(v), err
}

// groupCommits is what the API's group commit sent, by kind (claims,
// steps): transactions and the requests' batches in them
// (paymentsapi_group_commit_batches). ok is false for a service without
// it (the floor, an API built before it), or if it could not be read.
func (p *apiProcess) groupCommits(ctx context.Context) (g groupCommits, ok bool) {
	m, err := p.metrics(ctx)
	if err != nil {
		return g, false
	}
	return parseGroupCommits(m)
}

// groupCommits counts the group commit's transactions and the batches
// they held, by kind, and of those the batches sent merged with like ones
// (paymentsapi_group_commit_merged_batches_total; Merging is false for an
// API built before it).
type groupCommits struct {
	Claims, Steps groupTally
	Merging       bool
}

type groupTally struct{ Transactions, Batches, Merged float64 }

// sub is g less earlier, counted from then.
func (g groupCommits) sub(earlier groupCommits) groupCommits {
	less := func(a, b groupTally) groupTally {
		return groupTally{a.Transactions - b.Transactions, a.Batches - b.Batches, a.Merged - b.Merged}
	}
	return groupCommits{Claims: less(g.Claims, earlier.Claims), Steps: less(g.Steps, earlier.Steps), Merging: g.Merging}
}

// perTransaction is the batches per transaction; 0 when none was sent.
func (t groupTally) perTransaction() float64 {
	if t.Transactions == 0 {
		return 0
	}
	return t.Batches / t.Transactions
}

// parseGroupCommits reads paymentsapi_group_commit_batches from a
// Prometheus text exposition.
func parseGroupCommits(exposition string) (g groupCommits, ok bool) {
	for kind, t := range map[string]*groupTally{"claims": &g.Claims, "steps": &g.Steps} {
		var err1, err2 error
		t.Transactions, err1 = parseMetric(exposition, `paymentsapi_group_commit_batches_count{kind="`+kind+`"}`)
		t.Batches, err2 = parseMetric(exposition, `paymentsapi_group_commit_batches_sum{kind="`+kind+`"}`)
		if err1 != nil || err2 != nil {
			return groupCommits{}, false
		}
		merged, err := parseMetric(exposition, `paymentsapi_group_commit_merged_batches_total{kind="`+kind+`"}`)
		if err == nil {
			t.Merged, g.Merging = merged, true
		}
	}
	return g, true
}

// describe says, for a progress line, how many requests' batches each
// group-commit transaction held; "" if nothing was sent.
func (g groupCommits) describe() string {
	if g.Claims.Transactions == 0 && g.Steps.Transactions == 0 {
		return ""
	}
	return fmt.Sprintf("; group commit: %.1f claims per transaction%s, %.1f owner steps per transaction%s",
		g.Claims.perTransaction(), g.merged(g.Claims), g.Steps.perTransaction(), g.merged(g.Steps))
}

// merged says what share of t's batches were merged, if g's API merges.
func (g groupCommits) merged(t groupTally) string {
	if !g.Merging || t.Batches == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.0f%% merged)", 100*t.Merged/t.Batches)
}
