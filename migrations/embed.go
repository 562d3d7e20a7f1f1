// Package migrations holds the goose SQL migrations of the payments database.
// They are embedded in the binary and applied at start-up.
package migrations

import "embed"

// FS holds every *.sql migration, in goose's naming order.
//
//go:embed *.sql
var FS embed.FS
