// Package bench holds the files of `make bench` (tools/paymentsbench) that are
// not Go: the reference flow that pgbench runs against the same schema.
package bench

import "embed"

// PGBench holds the pgbench scripts, under pgbench/.
//
//go:embed pgbench/*.sql
var PGBench embed.FS

// FlowScript is the path in PGBench of the reference payment flow.
const FlowScript = "pgbench/flow.sql"
