package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/paymentsapi/paymentsapi/internal/audit"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/endpoints"
)

const secretsUsage = `usage:
  paymentsapi secrets reseal [flags]
      seal every stored webhook signing secret again under SECRETS_KEY,
      opening those sealed under a key of SECRETS_KEY_OTHERS; it prints
      what it did as JSON and fails while a secret is left that no key
      it holds opens

Flags are those of paymentsapi serve (DATABASE_URL, SECRETS_KEY,
SECRETS_KEY_OTHERS, ...). This is the step of a SECRETS_KEY rotation
after which the old key can leave SECRETS_KEY_OTHERS: docs/operations.md,
"Rotating".
`

// auditSecretsResealed names, in the audit log, an operator's reseal of
// the webhook secrets under a new SECRETS_KEY.
const auditSecretsResealed = "webhook_secrets.resealed"

// secretsCommand runs `paymentsapi secrets` (args after "secrets").
func secretsCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "reseal" {
		fmt.Fprint(stderr, secretsUsage)
		return errUsage
	}
	ctx = asOperator(ctx, getenv)
	a, err := openDatabaseTool(ctx, args[1:], getenv, stderr, secretsUsage)
	if err != nil {
		return err
	}
	defer a.close()
	if a.secrets == nil {
		return errors.New("secrets reseal: SECRETS_KEY is not set: there is no key to seal under")
	}
	r, err := endpoints.Reseal(ctx, a.pool, a.secrets)
	if err != nil {
		return err
	}
	if r.Resealed > 0 {
		if err := audit.Record(ctx, a.pool, clock.System{}.Now(), audit.Change{Action: auditSecretsResealed,
			Details: map[string]any{"endpoints": r.Resealed}}); err != nil {
			return err
		}
	}
	report := map[string]any{"resealed": r.Resealed, "unreadable": nonNil(r.Unreadable), "changedMeanwhile": nonNil(r.Changed)}
	if err := json.NewEncoder(stdout).Encode(report); err != nil {
		return err
	}
	switch {
	case len(r.Unreadable) > 0:
		return fmt.Errorf("secrets reseal: %d endpoints hold a secret that neither SECRETS_KEY nor SECRETS_KEY_OTHERS opens (keep the key that sealed them, or rotate them): %s",
			len(r.Unreadable), strings.Join(r.Unreadable, ", "))
	case len(r.Changed) > 0:
		return fmt.Errorf("secrets reseal: %d endpoints were rotated while this ran; run it again: %s", len(r.Changed), strings.Join(r.Changed, ", "))
	}
	return nil
}

// nonNil is s, or an empty list where s is nil, so that JSON shows [].
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
