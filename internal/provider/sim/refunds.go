package sim

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// RefundRecord is the simulator's record of a refund, as answered by the
// HTTP API and returned by Simulator.Refunds.
type RefundRecord struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotencyKey"`
	ChargeID       string          `json:"chargeId"`
	Status         provider.Status `json:"status"`
	DeclineCode    string          `json:"declineCode,omitempty"`
	AmountMinor    int64           `json:"amountMinor"`
	Amount         string          `json:"amount"` // decimal, per currency: "3.00"
	Currency       string          `json:"currency"`
	Reason         string          `json:"reason,omitempty"`
	RefundID       string          `json:"refundId,omitempty"`
	CreatedAt      time.Time       `json:"createdAt"`
	// RequestCount is how many create requests were answered with this
	// refund (the first one included).
	RequestCount int `json:"requestCount"`
	// LookupCount is how many lookups by key reached this refund.
	LookupCount int `json:"lookupCount"`
}

// The reasons a refund may give.
var refundReasons = map[string]bool{"": true, "requested_by_customer": true, "duplicate": true, "fraudulent": true}

// refundRequest is the body of POST /v1/refunds.
type refundRequest struct {
	ChargeID    string `json:"chargeId"`
	AmountMinor int64  `json:"amountMinor"`
	Currency    string `json:"currency"`
	Reason      string `json:"reason"`
	RefundID    string `json:"refundId"`
}

func (q *refundRequest) matches(r *RefundRecord) bool {
	return q.ChargeID == r.ChargeID && q.AmountMinor == r.AmountMinor &&
		q.Currency == r.Currency && q.Reason == r.Reason && q.RefundID == r.RefundID
}

func (rf *RefundRecord) created() time.Time { return rf.CreatedAt }
func (rf *RefundRecord) countRequest() int  { rf.RequestCount++; return rf.RequestCount }
func (rf *RefundRecord) countLookup() int   { rf.LookupCount++; return rf.LookupCount }
func (rf *RefundRecord) logAttrs() []any {
	return []any{"refundId", rf.ID, "chargeId", rf.ChargeID, "status", rf.Status, "declineCode", rf.DeclineCode,
		"amount", rf.Amount, "currency", rf.Currency}
}

// Refunds returns a copy of every refund the simulator holds, in creation
// order.
func (s *Simulator) Refunds() []RefundRecord { return s.refunds.copies(s) }

func (s *Simulator) handleRefund(w http.ResponseWriter, r *http.Request) {
	key, req, ok := createInput(w, r, s.checkRefund)
	if !ok {
		return
	}
	log := s.log.With("idempotencyKey", key)
	create(s, w, r, log, "refund", &s.refunds, key, req.matches, func() (*RefundRecord, Effect, *refusal) {
		charge, ok := s.chargeByID[req.ChargeID]
		if !ok {
			return nil, 0, &refusal{http.StatusNotFound, CodeChargeNotFound, "no charge has this id"}
		}
		b := s.behaviour(charge.PaymentMethod)
		if b.Refund == Refuse {
			return nil, 0, &refusal{http.StatusServiceUnavailable, CodeUnavailable, "the provider is unavailable; nothing was processed"}
		}
		rf := &RefundRecord{
			ID:             newID("re_"),
			IdempotencyKey: key,
			ChargeID:       charge.ID,
			Status:         provider.StatusSucceeded,
			AmountMinor:    req.AmountMinor,
			Amount:         s.rules.Format(req.AmountMinor, req.Currency),
			Currency:       req.Currency,
			Reason:         req.Reason,
			RefundID:       req.RefundID,
			CreatedAt:      s.clock.Now(),
			RequestCount:   1,
		}
		if code := s.refundDecline(charge, b, req); code != "" {
			rf.Status, rf.DeclineCode = provider.StatusDeclined, code
		} else {
			s.refunded[charge.ID] += req.AmountMinor
		}
		return rf, b.Refund, nil
	})
}

// refundDecline returns why a new refund of charge, whose method behaves as
// b, is declined, or "" when it succeeds. Only what was captured can be
// refunded: an authorization not (yet) captured, or voided, cannot. Callers
// hold s.mu.
func (s *Simulator) refundDecline(charge *ChargeRecord, b Behaviour, req refundRequest) string {
	switch {
	case charge.Status != provider.StatusSucceeded:
		return DeclineChargeNotRefundable
	case req.Currency != charge.Currency:
		return DeclineCurrencyMismatch
	case req.AmountMinor > charge.AmountCapturedMinor-s.refunded[charge.ID]:
		return DeclineAmountTooLarge
	}
	return b.RefundDecline
}

func (s *Simulator) checkRefund(req *refundRequest) error {
	if req.ChargeID == "" {
		return errors.New("chargeId is required")
	}
	if err := s.checkAmount(req.AmountMinor, req.Currency); err != nil {
		return err
	}
	if !refundReasons[req.Reason] {
		return fmt.Errorf("unknown reason %q (requested_by_customer, duplicate or fraudulent)", req.Reason)
	}
	return nil
}

func (s *Simulator) handleLookupRefund(w http.ResponseWriter, r *http.Request) {
	chargeID := r.URL.Query().Get("chargeId")
	rf, log, ok := lookup(s, w, r, "refund", func(key string) *RefundRecord {
		if rf := s.refunds.byKey[key]; rf == nil || chargeID == "" || rf.ChargeID == chargeID {
			return rf
		}
		// An older refund with the key may be of that charge.
		for _, rf := range slices.Backward(s.refunds.all) {
			if rf.IdempotencyKey == key && rf.ChargeID == chargeID {
				return rf
			}
		}
		return nil
	})
	if !ok {
		return
	}
	log.Info("sim: refund lookup found the refund")
	writeJSON(w, http.StatusOK, rf)
}

func (s *Simulator) handleListRefunds(w http.ResponseWriter, r *http.Request) {
	since, ok := listSince(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Refunds []RefundRecord `json:"refunds"`
	}{s.refunds.since(s, since)})
}
