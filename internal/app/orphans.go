package app

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/orphans"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
)

// Auditor is the audit of the provider (package orphans) for the
// registered operations that create the provider's objects: its charges
// are payments, its refunds refunds. Captures and voids act on a charge and
// create none.
func Auditor(db *pgxpool.Pool, l provider.Listing) orphans.Auditor {
	return orphans.Auditor{
		DB: db, Listing: l,
		Charges: []orphans.Source{{Resource: payments.Module(payments.Hooks{}).Resource, ExistingIDs: payments.ExistingIDs}},
		Refunds: []orphans.Source{{Resource: refunds.Module().Resource, ExistingIDs: refunds.ExistingIDs}},
	}
}
