package config

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/setting"
)

func TestLoadFlagsOverEnvironment(t *testing.T) {
	env := map[string]string{"HTTP_ADDR": ":9000", "LEASE_DURATION": "40s", "DATABASE_URL": "postgres://env"}
	c, err := Load([]string{"-http-addr", ":9001", "-database-url", "postgres://flag"}, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":9001" || c.LeaseDuration != 40*time.Second || c.DatabaseURL != "postgres://flag" {
		t.Errorf("got %+v", c)
	}
	if c.DevMode() || c.APIKeys != "" {
		t.Errorf("with a database there is no default key: %q", c.APIKeys)
	}
	dev, err := Load(nil, func(string) string { return "" }, &bytes.Buffer{})
	if err != nil || !dev.DevMode() || dev.APIKeys != DevAPIKeys {
		t.Errorf("dev mode: %+v, %v", dev, err)
	}
	if !c.Migrate || !dev.Migrate {
		t.Error("MIGRATE defaults to false, want true: a server migrates unless told not to")
	}
	for args, env := range map[string]map[string]string{"-migrate=false": {}, "": {"MIGRATE": "false"}} {
		noMigrate, err := Load(strings.Fields(args), func(k string) string { return env[k] }, &bytes.Buffer{})
		if err != nil || noMigrate.Migrate {
			t.Errorf("%q %v: migrate %v, %v", args, env, noMigrate.Migrate, err)
		}
	}
	if dev.InboxRetention != 720*time.Hour {
		t.Errorf("INBOX_RETENTION defaults to %s, want 720h", dev.InboxRetention)
	}
	if dev.OutboxRelay != "auto" {
		t.Errorf("OUTBOX_RELAY defaults to %q, want auto", dev.OutboxRelay)
	}
	flagged, err := Load([]string{"-outbox-relay", "poll"}, func(string) string { return "" }, &bytes.Buffer{})
	if err != nil || flagged.OutboxRelay != "poll" {
		t.Errorf("-outbox-relay poll: %q, %v", flagged.OutboxRelay, err)
	}
}

func TestLoadRefusesInconsistentSettings(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"lease not above timeout":   {"LEASE_DURATION": "5s", "PROVIDER_TIMEOUT": "5s"},
		"bad duration":              {"IDEMPOTENCY_TTL": "a day"},
		"unknown provider":          {"PROVIDER": "paypal"},
		"stripe without key":        {"PROVIDER": "stripe"},
		"nats without url":          {"OUTBOX_PUBLISHER": "nats"},
		"unknown outbox relay":      {"OUTBOX_RELAY": "kafka"},
		"zero attempts":             {"RECONCILE_MAX_ATTEMPTS": "0"},
		"zero commits":              {"COMMIT_CONCURRENCY": "0"},
		"inbox retention too short": {"INBOX_RETENTION": "10m"},
		"no inbox retention":        {"INBOX_RETENTION": "0s"},
		"rate not a number":         {"RATE_LIMIT": "fast"},
		"negative rate":             {"RATE_LIMIT": "-1"},
		"rate NaN":                  {"RATE_LIMIT": "NaN"},
		"rate infinite":             {"RATE_LIMIT": "+Inf"},
		"burst not an integer":      {"RATE_LIMIT": "10", "RATE_LIMIT_BURST": "1.5"},
		"negative burst":            {"RATE_LIMIT": "10", "RATE_LIMIT_BURST": "-1"},
		"burst without a rate":      {"RATE_LIMIT_BURST": "20"},
		"webhook http not a bool":   {"WEBHOOK_ALLOW_HTTP": "sometimes"},
		"webhook private not bool":  {"WEBHOOK_ALLOW_PRIVATE": "yes please"},
		"migrate not a bool":        {"MIGRATE": "never"},
		"webhook timeout zero":      {"WEBHOOK_TIMEOUT": "0s"},
		"webhook schedule empty":    {"WEBHOOK_RETRY_SCHEDULE": "5s,,1m"},
		"webhook schedule negative": {"WEBHOOK_RETRY_SCHEDULE": "5s,-1m"},
		"cleanup share zero":        {"CLEANUP_SHARE": "0"},
		"cleanup share above one":   {"CLEANUP_SHARE": "1.5"},
		"cleanup share not a share": {"CLEANUP_SHARE": "a tenth"},
		"cleanup share NaN":         {"CLEANUP_SHARE": "NaN"},
	} {
		if _, err := Load(nil, func(k string) string { return env[k] }, &bytes.Buffer{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A module's setting is read as the service's own are: the flag over the
// variable over the default, listed in -help with its variable, and a
// value its Parse refuses is refused with the setting's name.
func TestLoadReadsTheSettingsModulesDeclare(t *testing.T) {
	ttl := setting.Duration("WIDGET_TTL", "2h", "how long a widget lasts")
	load := func(args []string, env map[string]string) (time.Duration, error) {
		c, err := Load(args, func(k string) string { return env[k] }, &bytes.Buffer{}, ttl)
		if err != nil {
			return 0, err
		}
		return setting.Value[time.Duration](c.Settings, ttl)
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
		want time.Duration
	}{
		{nil, nil, 2 * time.Hour},
		{nil, map[string]string{"WIDGET_TTL": "3h"}, 3 * time.Hour},
		{[]string{"-widget-ttl", "4h"}, map[string]string{"WIDGET_TTL": "3h"}, 4 * time.Hour},
	} {
		if got, err := load(c.args, c.env); err != nil || got != c.want {
			t.Errorf("%v over %v: %v %v, want %v", c.args, c.env, got, err, c.want)
		}
	}
	if _, err := load(nil, map[string]string{"WIDGET_TTL": "0s"}); err == nil || !strings.Contains(err.Error(), "WIDGET_TTL must be positive") {
		t.Errorf("a zero TTL: %v", err)
	}
	var help bytes.Buffer
	if _, err := Load([]string{"-h"}, func(string) string { return "" }, &help, ttl); err == nil {
		t.Fatal("-h did not stop")
	}
	if !strings.Contains(help.String(), "-widget-ttl") || !strings.Contains(help.String(), "how long a widget lasts (WIDGET_TTL)") {
		t.Errorf("-help does not list the module's setting:\n%s", help.String())
	}
	if _, err := Load(nil, func(string) string { return "" }, &bytes.Buffer{}, setting.Duration("LEASE_DURATION", "1s", "twice")); err == nil {
		t.Error("a module's setting named like one of the service's: accepted")
	}
}

func TestHelpNeverPrintsSecrets(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL": "postgres://u:hunter2@db/x", "API_KEYS": "demo:sk_live_secret",
		"STRIPE_API_KEY": "sk_live_stripe", "NATS_URL": "nats://u:natspass@n", "STRIPE_WEBHOOK_SECRET": "whsec_hook",
		"API_KEY_PEPPER": "pepper-pepper-pepper-pepper-pepper", "SECRETS_KEY": "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2U=",
	}
	var out bytes.Buffer
	if _, err := Load([]string{"-h"}, func(k string) string { return env[k] }, &out); err == nil {
		t.Fatal("-h did not stop")
	}
	if _, err := Load([]string{"-no-such-flag"}, func(k string) string { return env[k] }, &out); err == nil {
		t.Fatal("unknown flag accepted")
	}
	for _, secret := range []string{"hunter2", "sk_live_secret", "sk_live_stripe", "natspass", "whsec_hook", "pepper-pepper", "c2VjcmV0"} {
		if strings.Contains(out.String(), secret) {
			t.Errorf("usage output leaks %q", secret)
		}
	}
	c, err := Load(nil, func(k string) string { return env[k] }, &out)
	if err != nil || c.StripeAPIKey != "sk_live_stripe" || c.DatabaseURL != env["DATABASE_URL"] || c.APIKeys != env["API_KEYS"] ||
		c.StripeWebhookSecret != "whsec_hook" || c.APIKeyPepper != env["API_KEY_PEPPER"] || c.SecretsKey != env["SECRETS_KEY"] {
		t.Errorf("secrets from the environment no longer apply: %v", err)
	}
}

func TestProviderKeyTTLWithStripe(t *testing.T) {
	for _, tc := range []struct {
		provider, ttl string
		want          time.Duration // 0: refused
	}{
		{"stripe", "24h1s", 0},
		{"stripe", "720h", 0},
		{"stripe", "", 24 * time.Hour}, // the default
		{"stripe", "24h", 24 * time.Hour},
		{"stripe", "1h", time.Hour},
		{"sim", "720h", 720 * time.Hour}, // the simulator's -key-ttl is the operator's to match
	} {
		env := map[string]string{"PROVIDER": tc.provider, "STRIPE_API_KEY": "sk_test_x", "PROVIDER_KEY_TTL": tc.ttl}
		c, err := Load(nil, func(k string) string { return env[k] }, &bytes.Buffer{})
		switch {
		case tc.want == 0 && (err == nil || !strings.Contains(err.Error(), "PROVIDER_KEY_TTL")):
			t.Errorf("%s with PROVIDER_KEY_TTL=%s: err = %v, want a refusal that names PROVIDER_KEY_TTL", tc.provider, tc.ttl, err)
		case tc.want != 0 && (err != nil || c.ProviderKeyTTL != tc.want):
			t.Errorf("%s with PROVIDER_KEY_TTL=%q: %v, %v; want %v", tc.provider, tc.ttl, c.ProviderKeyTTL, err, tc.want)
		}
	}
}

func TestRateLimitIsOffByDefaultAndFlagsMirrorVariables(t *testing.T) {
	for name, db := range map[string]string{"dev mode": "", "with a database": "postgres://x"} {
		c, err := Load(nil, func(k string) string { return map[string]string{"DATABASE_URL": db}[k] }, &bytes.Buffer{})
		if err != nil || c.RateLimit != 0 || c.RateLimitBurst != 0 {
			t.Errorf("%s: rate limit %v burst %d (%v), want off", name, c.RateLimit, c.RateLimitBurst, err)
		}
	}
	env := map[string]string{"RATE_LIMIT": "2.5", "RATE_LIMIT_BURST": "10"}
	c, err := Load(nil, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil || c.RateLimit != 2.5 || c.RateLimitBurst != 10 {
		t.Errorf("from the environment: %v %d (%v)", c.RateLimit, c.RateLimitBurst, err)
	}
	c, err = Load([]string{"-rate-limit", "50", "-rate-limit-burst", "100"}, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil || c.RateLimit != 50 || c.RateLimitBurst != 100 {
		t.Errorf("flags over the environment: %v %d (%v)", c.RateLimit, c.RateLimitBurst, err)
	}
	if _, err := Load([]string{"-rate-limit", "-3"}, func(string) string { return "" }, &bytes.Buffer{}); err == nil {
		t.Error("a negative -rate-limit is accepted")
	}
}

// Clean-up takes at most a tenth of its time for statements while it
// catches up, unless CLEANUP_SHARE (or -cleanup-share) says otherwise; 1
// (no rest) is allowed.
func TestCleanupShare(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want float64
	}{{nil, "", 0.1}, {nil, "0.25", 0.25}, {[]string{"-cleanup-share", "1"}, "0.25", 1}} {
		got, err := Load(c.args, func(k string) string { return map[string]string{"CLEANUP_SHARE": c.env}[k] }, &bytes.Buffer{})
		if err != nil || got.CleanupShare != c.want {
			t.Errorf("%v, CLEANUP_SHARE=%q: share %v (%v), want %v", c.args, c.env, got.CleanupShare, err, c.want)
		}
	}
}

// Webhook destinations are relaxed in dev mode only, unless set; the
// timeout and the retry schedule have the contract's defaults.
func TestWebhookSettings(t *testing.T) {
	load := func(env map[string]string) Config {
		t.Helper()
		c, err := Load(nil, func(k string) string { return env[k] }, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dev := load(nil)
	if !dev.WebhookAllowHTTP || !dev.WebhookAllowPrivate {
		t.Errorf("dev mode: allow http %v, private %v; want both", dev.WebhookAllowHTTP, dev.WebhookAllowPrivate)
	}
	if dev.WebhookTimeout != 10*time.Second || len(dev.WebhookRetrySchedule) != 9 ||
		dev.WebhookRetrySchedule[0] != 5*time.Second || dev.WebhookRetrySchedule[8] != 24*time.Hour {
		t.Errorf("defaults: timeout %s, schedule %v", dev.WebhookTimeout, dev.WebhookRetrySchedule)
	}
	if !slices.Equal(dev.WebhookRetrySchedule, delivery.DefaultSchedule()) {
		t.Errorf("the default schedule %v is not the delivery worker's %v", dev.WebhookRetrySchedule, delivery.DefaultSchedule())
	}
	var total time.Duration
	for _, d := range dev.WebhookRetrySchedule {
		total += d
	}
	if total < 72*time.Hour {
		t.Errorf("the default schedule retries for %s, less than 3 days", total)
	}
	prod := load(map[string]string{"DATABASE_URL": "postgres://db"})
	if prod.WebhookAllowHTTP || prod.WebhookAllowPrivate {
		t.Errorf("with a database: allow http %v, private %v; want neither", prod.WebhookAllowHTTP, prod.WebhookAllowPrivate)
	}
	set := load(map[string]string{"DATABASE_URL": "postgres://db", "WEBHOOK_ALLOW_HTTP": "true",
		"WEBHOOK_TIMEOUT": "3s", "WEBHOOK_RETRY_SCHEDULE": "1s, 2m"})
	if !set.WebhookAllowHTTP || set.WebhookAllowPrivate || set.WebhookTimeout != 3*time.Second ||
		len(set.WebhookRetrySchedule) != 2 || set.WebhookRetrySchedule[1] != 2*time.Minute {
		t.Errorf("set: %+v", set)
	}
	if c := load(map[string]string{"WEBHOOK_ALLOW_PRIVATE": "false"}); !c.WebhookAllowHTTP || c.WebhookAllowPrivate {
		t.Errorf("dev mode with WEBHOOK_ALLOW_PRIVATE=false: http %v, private %v", c.WebhookAllowHTTP, c.WebhookAllowPrivate)
	}
}

// Outside dev mode a server names its provider, and runs the simulator in
// its own process only when told so: a forgotten PROVIDER would otherwise
// "pay" every payment through a simulator, moving no money. Dev mode starts
// with no configuration at all.
func TestAServerOutsideDevModeNamesItsProvider(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string // in the refusal; empty: accepted
	}{
		{map[string]string{}, ""},
		{map[string]string{"DATABASE_URL": "postgres://db"}, "PROVIDER must be named"},
		{map[string]string{"DATABASE_URL": "postgres://db", "PROVIDER": "sim"}, "PROVIDER_SIM_IN_PROCESS=true"},
		{map[string]string{"DATABASE_URL": "postgres://db", "PROVIDER": "sim", "PROVIDER_SIM_IN_PROCESS": "false"}, "PROVIDER_SIM_IN_PROCESS=true"},
		{map[string]string{"DATABASE_URL": "postgres://db", "PROVIDER": "sim", "PROVIDER_SIM_IN_PROCESS": "true"}, ""},
		{map[string]string{"DATABASE_URL": "postgres://db", "PROVIDER": "sim", "PROVIDER_URL": "http://sim:8081"}, ""},
		{map[string]string{"DATABASE_URL": "postgres://db", "PROVIDER": "stripe", "STRIPE_API_KEY": "sk_test_x"}, ""},
	} {
		c, err := Load(nil, func(k string) string { return tc.env[k] }, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		err = c.CheckServer()
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.env, err, tc.want)
		}
	}
	if _, err := Load(nil, func(k string) string {
		return map[string]string{"PROVIDER_SIM_IN_PROCESS": "maybe"}[k]
	}, &bytes.Buffer{}); err == nil {
		t.Error("PROVIDER_SIM_IN_PROCESS=maybe accepted")
	}
}

// STRIPE_WEBHOOK_SECRET is Stripe's webhook signing secret, whsec_...:
// anything else (most likely the API key, in the wrong place) is refused at
// start, saying why and never showing it.
func TestStripeWebhookSecretMustStartWithWhsec(t *testing.T) {
	for _, secret := range []string{"sk_live_51Habc", "rk_test_x", "hunter2hook", "WHSEC_x"} {
		_, err := Load(nil, func(k string) string { return map[string]string{"STRIPE_WEBHOOK_SECRET": secret}[k] }, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "STRIPE_WEBHOOK_SECRET must start with whsec_") || strings.Contains(err.Error(), secret) {
			t.Errorf("STRIPE_WEBHOOK_SECRET=%s: %v, want a refusal saying it must start with whsec_, without the value", secret, err)
		}
	}
	if c, err := Load(nil, func(k string) string { return map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_abc"}[k] }, &bytes.Buffer{}); err != nil || c.StripeWebhookSecret != "whsec_abc" {
		t.Errorf("whsec_abc: %v", err)
	}
}

// SECRETS_KEY, when set, is the base64 of 32 bytes, and so is each of
// SECRETS_KEY_OTHERS, which needs SECRETS_KEY; WEBHOOK_ALLOWED_PORTS a
// list of ports.
func TestSecretsKeyAndAllowedPorts(t *testing.T) {
	load := func(env map[string]string) (Config, error) {
		return Load(nil, func(k string) string { return env[k] }, &bytes.Buffer{})
	}
	for _, key := range []string{"short", "c2hvcnQ=", "not base64 at all!!"} {
		if _, err := load(map[string]string{"SECRETS_KEY": key}); err == nil || !strings.Contains(err.Error(), "SECRETS_KEY") || strings.Contains(err.Error(), key) {
			t.Errorf("SECRETS_KEY=%q: %v, want a refusal naming SECRETS_KEY without its value", key, err)
		}
	}
	const k1, k2 = "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2U=", "b3RoZXJvdGhlcm90aGVyb3RoZXJvdGhlcm90aGVyb3Q="
	c, err := load(map[string]string{"SECRETS_KEY": k1, "SECRETS_KEY_OTHERS": " " + k2 + ", "})
	if err != nil || !slices.Equal(c.SecretsKeyOthers, []string{k2}) {
		t.Errorf("SECRETS_KEY_OTHERS: %v, %v", c.SecretsKeyOthers, err)
	}
	for _, env := range []map[string]string{
		{"SECRETS_KEY": k1, "SECRETS_KEY_OTHERS": k2 + ",c2hvcnQ="},
		{"SECRETS_KEY_OTHERS": k2, "DATABASE_URL": "postgres://db"},
	} {
		if _, err := load(env); err == nil || !strings.Contains(err.Error(), "SECRETS_KEY_OTHERS") || strings.Contains(err.Error(), k2) {
			t.Errorf("%v: %v, want a refusal naming SECRETS_KEY_OTHERS without its value", env, err)
		}
	}
	c, err = load(map[string]string{"WEBHOOK_ALLOWED_PORTS": "9443, 10443"})
	if err != nil || !slices.Equal(c.WebhookAllowedPorts, []int{9443, 10443}) {
		t.Errorf("WEBHOOK_ALLOWED_PORTS: %v, %v", c.WebhookAllowedPorts, err)
	}
	for _, ports := range []string{"0", "65536", "https"} {
		if _, err := load(map[string]string{"WEBHOOK_ALLOWED_PORTS": ports}); err == nil || !strings.Contains(err.Error(), "WEBHOOK_ALLOWED_PORTS") {
			t.Errorf("WEBHOOK_ALLOWED_PORTS=%s: %v", ports, err)
		}
	}
}
