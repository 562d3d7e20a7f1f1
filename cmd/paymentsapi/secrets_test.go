package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/config"
)

// In dev mode the secrets key is generated once and kept in the data
// directory, so that the demo database's webhook secrets open after a
// restart; outside dev mode an unset SECRETS_KEY is no key, and a server
// warns that webhook endpoints cannot be created.
func TestTheSecretsKeyIsKeptInDevModeAndMissingOtherwise(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	dev := config.Config{DataDir: dir}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	first, err := secretsBox(dev, useServer, log)
	if err != nil || first == nil {
		t.Fatalf("dev mode: %v, %v", first, err)
	}
	sealed, err := first.Seal("whsec_x", "we_1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := secretsBox(dev, useServer, log)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := again.Open(sealed, "we_1"); err != nil || got != "whsec_x" {
		t.Errorf("after a restart: %q, %v; want the key kept", got, err)
	}
	if info, err := os.Stat(filepath.Join(dir, "secrets_key")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("secrets key file: %v %v, want mode 0600", info, err)
	}
	if logged.Len() != 0 {
		t.Errorf("dev mode warned: %s", logged.String())
	}

	prod := config.Config{DatabaseURL: "postgres://db", DataDir: dir}
	box, err := secretsBox(prod, useServer, log)
	if err != nil || box != nil || !strings.Contains(logged.String(), "SECRETS_KEY is not set") {
		t.Errorf("outside dev mode without SECRETS_KEY: %v, %v, logged %q; want no key and a warning", box, err, logged.String())
	}
	prod.SecretsKey = "c2hvcnQ="
	if _, err := secretsBox(prod, useServer, log); err == nil || strings.Contains(err.Error(), "c2hvcnQ") {
		t.Errorf("a short SECRETS_KEY: %v", err)
	}
}

// A STRIPE_WEBHOOK_SECRET that is not a webhook signing secret stops the
// server before it starts anything, saying why.
func TestAStripeWebhookSecretWithoutWhsecStopsTheStart(t *testing.T) {
	env := map[string]string{"STRIPE_WEBHOOK_SECRET": "sk_live_not_a_webhook_secret", "DATA_DIR": t.TempDir()}
	err := run(context.Background(), nil, func(k string) string { return env[k] }, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "STRIPE_WEBHOOK_SECRET must start with whsec_") ||
		strings.Contains(err.Error(), "sk_live_not") {
		t.Fatalf("run: %v, want a refusal naming whsec_, without the value", err)
	}
}
