package main

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/config"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

var profilerRE = regexp.MustCompile(`"msg":"profiler listening".*"url":"(http://[^"]+)"`)

// With DEBUG_ADDR set, the profiler answers on its own listener only: the
// API's listener answers its paths (and expvar's /debug/vars) as any
// unknown path, 404 problem+json NOT_FOUND, with or without an API key, and
// never with a profile, the goroutines or the process's command line.
func TestAPIListenerDoesNotServeTheProfiler(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL": pgtest.NewURL(t), "API_KEYS": config.DevAPIKeys, "PROVIDER": "sim", "PROVIDER_SIM_IN_PROCESS": "true",
		"DEBUG_ADDR": "127.0.0.1:0",
	}
	base, stderr := startServer(t, env)
	debugURL, _ := stderr.Await(t, profilerRE, 10*time.Second)

	client := &http.Client{Timeout: 10 * time.Second}
	get := func(u, secret string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}

	// DEBUG_ADDR was honoured: the profiler is up, on another address.
	if status, _, body := get(debugURL, ""); status != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("GET %s: %d %.200s, want the profiler's index", debugURL, status, body)
	}
	if strings.HasPrefix(debugURL, base+"/") {
		t.Fatalf("the profiler (%s) listens on the API's address (%s)", debugURL, base)
	}

	_, secret, _ := strings.Cut(config.DevAPIKeys, ":")
	for _, path := range []string{
		"/debug/pprof/", "/debug/pprof", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1",
		"/debug/pprof/heap", "/debug/pprof/symbol", "/debug/pprof/profile?seconds=1",
		"/debug/pprof/trace?seconds=1", "/debug/vars",
	} {
		for _, key := range []string{"", secret} {
			status, header, body := get(base+path, key)
			var p problem.Problem
			err := json.Unmarshal([]byte(body), &p)
			if status != http.StatusNotFound || header.Get("Content-Type") != problem.ContentType ||
				err != nil || p.Code != problem.NotFound || p.Status != http.StatusNotFound {
				t.Errorf("GET %s (API key: %t) on the API: %d %s %.200q, want 404 problem+json NOT_FOUND",
					path, key != "", status, header.Get("Content-Type"), body)
			}
			for _, leak := range []string{"goroutine", "Types of profiles", "paymentsapi.test", "cmdline", "memstats"} {
				if strings.Contains(body, leak) {
					t.Errorf("GET %s (API key: %t) on the API answered with the profiler's %q: %.200q", path, key != "", leak, body)
				}
			}
		}
	}
}
