// Package migrations holds the goose SQL migrations of the payments database.
// They are embedded in the binary and applied at start-up, or by
// `paymentsapi migrate` for servers started with MIGRATE=false.
package migrations

import "embed"

// FS holds every *.sql migration, in goose's naming order.
//
//go:embed *.sql
var FS embed.FS

// Pending holds the contract steps written but not released yet
// (pending/*.sql, docs/operations.md, "Migrations"): each drops what the previous release
// still uses, and becomes a migration of FS one release later. Nothing
// applies them but tests of the schema they lead to
// (pgtest.NewContractedPool).
//
//go:embed pending
var Pending embed.FS
