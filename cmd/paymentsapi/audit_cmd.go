package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/audit"
)

const auditUsage = `usage:
  paymentsapi audit [flags] [-limit N] [-tenant TENANT] [-action ACTION]
      print the audit log, newest first (up to N events, 100 unless given),
      one JSON object a line

Flags are those of paymentsapi serve (DATABASE_URL, ...). The log holds API
keys created, added from API_KEYS and revoked, webhook endpoints created,
rotated and deleted, and operators' actions (outbox unpark and replay,
reconcile -once, secrets reseal), each with its actor (api:<key id>, operator:<name>,
system) and request id. GET /audit-events serves the same to operators.
`

// auditCommand runs `paymentsapi audit` (args after "audit").
func auditCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	q, rest := audit.Query{Limit: 100}, args[:0:0]
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") || (name != "limit" && name != "tenant" && name != "action") {
			rest = append(rest, args[i])
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				fmt.Fprint(stderr, auditUsage)
				return fmt.Errorf("audit: -%s needs a value", name)
			}
			i++
			value = args[i]
		}
		switch name {
		case "limit":
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 {
				return fmt.Errorf("audit: -limit must be a positive number, not %q", value)
			}
			q.Limit = n
		case "tenant":
			q.Tenant = value
		default:
			q.Action = value
		}
	}
	a, err := openDatabaseTool(ctx, rest, getenv, stderr, auditUsage)
	if err != nil {
		return err
	}
	defer a.close()
	page, err := audit.List(ctx, a.pool, q)
	return printLines(json.NewEncoder(stdout), page.Items, err)
}

// asOperator is ctx acting as the person who runs an operator's command,
// under a request id of the command's own: OPERATOR_NAME, or else the
// system's user (USER, LOGNAME). What the command changes is audited under
// that name (operator:<name>).
func asOperator(ctx context.Context, getenv func(string) string) context.Context {
	name := "unknown"
	for _, v := range []string{"OPERATOR_NAME", "USER", "LOGNAME"} {
		if s := strings.TrimSpace(getenv(v)); s != "" {
			name = s
			break
		}
	}
	return actor.Ensure(ctx, actor.Operator(name))
}
