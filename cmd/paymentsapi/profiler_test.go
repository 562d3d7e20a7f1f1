package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// DEBUG_ADDR serves Go's profiler on a listener of its own: its index
// answers there, and the API's routes do not.
func TestProfilerServesOnItsOwnAddress(t *testing.T) {
	url, stop, err := serveProfiler("127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := get(url); status != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("GET %s: %d %.200s", url, status, body)
	}
	if status, _ := get(strings.TrimSuffix(url, "debug/pprof/") + "payments"); status != http.StatusNotFound {
		t.Errorf("the profiler's listener answered /payments with %d", status)
	}
}
