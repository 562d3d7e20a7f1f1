package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/config"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// Key administration and an operator's action are in the audit log, which
// `paymentsapi audit` prints newest first: each names the operator who ran
// the command (OPERATOR_NAME) and the command's own request id; a key
// added from API_KEYS at start-up names the system.
func TestOperatorCommandsAreAudited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	env := map[string]string{
		"DATABASE_URL": url, "PROVIDER": "sim", "PROVIDER_SIM_IN_PROCESS": "true",
		"API_KEY_PEPPER": "a-pepper-of-at-least-thirty-two-characters", "LOG_LEVEL": "warn",
		"OPERATOR_NAME": "bob", "USER": "root",
	}
	cmd := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(ctx, args, func(k string) string { return env[k] }, nil, &out, &errOut); err != nil {
			t.Fatalf("paymentsapi %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
		return out.String()
	}

	cfg := config.Config{DatabaseURL: url, APIKeys: "demo:sk_bootstrap_of_more_than_24_chars"}
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := setUpAPIKeys(ctx, db, cfg, apikeys.Hasher{}, clock.System{}, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	var k struct{ ID string }
	if err := json.Unmarshal([]byte(cmd("keys", "create", "demo")), &k); err != nil || k.ID == "" {
		t.Fatalf("keys create: %v", err)
	}
	cmd("keys", "revoke", k.ID)
	cmd("outbox", "unpark", "-all")

	var events []struct {
		Action, Actor, RequestID, TenantID, TargetID string
		Details                                      map[string]any
	}
	for _, line := range strings.Split(strings.TrimSpace(cmd("audit")), "\n") {
		var ev struct {
			Action, Actor, RequestID, TenantID, TargetID string
			Details                                      map[string]any
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit printed %q: %v", line, err)
		}
		events = append(events, ev)
	}
	var got []string
	requests := map[string]bool{}
	for _, ev := range events {
		got = append(got, fmt.Sprintf("%s %s %s %s", ev.Action, ev.Actor, ev.TenantID, ev.TargetID))
		if ev.RequestID == "" || requests[ev.RequestID] {
			t.Errorf("%s is under request %q: want one of each command's own", ev.Action, ev.RequestID)
		}
		requests[ev.RequestID] = true
	}
	want := []string{
		"outbox.events_unparked operator:bob  ",
		"api_key.revoked operator:bob demo " + k.ID,
		"api_key.created operator:bob demo " + k.ID,
		"api_key.added system demo " + events[len(events)-1].TargetID,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("paymentsapi audit:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(cmd("audit", "-action", "api_key.created"), "api_key.revoked") || !strings.Contains(cmd("audit", "-limit", "1"), "outbox.events_unparked") {
		t.Error("paymentsapi audit -action or -limit does not select")
	}
}
