package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/audit"
	"github.com/paymentsapi/paymentsapi/internal/clock"
)

const keysUsage = `usage:
  paymentsapi keys create [flags] TENANT [-test]   create a key and print its secret, the only time it is shown
  paymentsapi keys list [flags] [TENANT]           list the keys (every tenant's without TENANT), one JSON object a line
  paymentsapi keys revoke [flags] KEY_ID           revoke a key for good

Flags are those of paymentsapi serve (DATABASE_URL, API_KEY_PEPPER, ...):
create hashes the secret under API_KEY_PEPPER, so give it the servers' one.
A secret is sk_live_ (sk_test_ with -test) and 32 random bytes. A tenant may
hold several keys: to rotate, create the new key, move the clients to it,
then revoke the old one. A revoked key is refused by every instance within
10 s, and nothing brings it back (API_KEYS naming it adds nothing).
`

// keysCommand runs `paymentsapi keys ...` (args after "keys"), the
// operator's tools for API keys. It works on the servers' database and may
// run while servers run.
func keysCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "list" && args[0] != "revoke") {
		fmt.Fprint(stderr, keysUsage)
		return errUsage
	}
	sub, test, positional, rest := args[0], false, []string(nil), []string(nil)
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case sub == "create" && (a == "-test" || a == "--test"):
			test = true
		case !strings.HasPrefix(a, "-"):
			positional = append(positional, a)
		default:
			rest = append(rest, a)
			// Every flag of the configuration takes a value: -name value
			// holds two arguments.
			if !strings.Contains(a, "=") && !isHelp(a) && i+1 < len(args) {
				i++
				rest = append(rest, args[i])
			}
		}
	}
	help := false
	for _, a := range rest {
		help = help || isHelp(a)
	}
	wantArgs := map[string][2]int{"create": {1, 1}, "list": {0, 1}, "revoke": {1, 1}}[sub]
	if !help && (len(positional) < wantArgs[0] || len(positional) > wantArgs[1]) {
		fmt.Fprint(stderr, keysUsage)
		return fmt.Errorf("keys %s: wrong number of arguments: %q", sub, positional)
	}
	ctx = asOperator(ctx, getenv)
	a, err := openDatabaseTool(ctx, rest, getenv, stderr, keysUsage)
	if err != nil {
		return err
	}
	defer a.close()
	log := a.log
	now := clock.System{}.Now()
	out := json.NewEncoder(stdout)
	switch sub {
	case "create":
		if !a.apiKeys.Peppered() {
			log.Warn("API_KEY_PEPPER is not set: the key is stored as a plain SHA-256")
		}
		var k apikeys.Key
		var secret string
		err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) (err error) {
			if k, secret, err = apikeys.Create(ctx, tx, a.apiKeys, positional[0], test, now); err != nil {
				return err
			}
			return audit.Record(ctx, tx, now, audit.Change{Action: apikeys.AuditCreated, TenantID: k.Tenant, TargetID: k.ID,
				Details: map[string]any{"test": test}})
		})
		if err != nil {
			return err
		}
		log.Info("API key created", "key_id", k.ID, "tenant", k.Tenant)
		return out.Encode(struct {
			apikeys.Key
			Secret string `json:"secret"`
		}{k, secret})
	case "list":
		tenant := ""
		if len(positional) == 1 {
			tenant = positional[0]
		}
		keys, err := apikeys.List(ctx, a.pool, tenant)
		return printLines(out, keys, err)
	default:
		var k apikeys.Key
		err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) (err error) {
			if k, err = apikeys.Revoke(ctx, tx, positional[0], now); err != nil {
				return err
			}
			return audit.Record(ctx, tx, now, audit.Change{Action: apikeys.AuditRevoked, TenantID: k.Tenant, TargetID: k.ID})
		})
		if errors.Is(err, apikeys.ErrNoSuchKey) {
			return fmt.Errorf("keys revoke: no key has the id %q (keys list shows them)", positional[0])
		}
		if err != nil {
			return err
		}
		log.Info("API key revoked", "key_id", k.ID, "tenant", k.Tenant)
		return out.Encode(k)
	}
}

func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" }
