package payments

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Transition is one record of a payment's audit trail (AuditSQL): a move of
// its state, when, why and by whom.
type Transition struct {
	From       State // "" for its creation
	To         State
	Reason     string
	OccurredAt time.Time
	Actor      string // "" in records written before migration 00044
	RequestID  string
}

// Transitions returns the audit trail of the tenant's payment id, oldest
// first, or ErrNotFound (also when the payment is another tenant's).
func (s *Service) Transitions(ctx context.Context, tenant, id string) ([]Transition, error) {
	if _, err := getPayment(ctx, s.d.DB, tenant, id); err != nil {
		return nil, err
	}
	rows, err := s.d.DB.Query(ctx, `SELECT from_state, to_state, reason, occurred_at, actor, request_id FROM (`+AuditSQL+`) a ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("read the audit trail of payment %s: %w", id, err)
	}
	trail, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Transition, error) {
		var (
			t                Transition
			from, act, reqID *string
		)
		err := r.Scan(&from, &t.To, &t.Reason, &t.OccurredAt, &act, &reqID)
		if from != nil {
			t.From = State(*from)
		}
		if act != nil {
			t.Actor = *act
		}
		if reqID != nil {
			t.RequestID = *reqID
		}
		t.OccurredAt = t.OccurredAt.UTC()
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the audit trail of payment %s: %w", id, err)
	}
	return trail, nil
}
