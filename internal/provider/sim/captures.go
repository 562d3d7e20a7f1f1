package sim

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// CaptureRecord is the simulator's record of a capture of a charge's
// authorization, as answered by the HTTP API and returned by
// Simulator.Captures.
type CaptureRecord struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotencyKey"`
	ChargeID       string          `json:"chargeId"`
	Status         provider.Status `json:"status"` // succeeded or declined
	DeclineCode    string          `json:"declineCode,omitempty"`
	AmountMinor    int64           `json:"amountMinor"` // asked to capture
	Amount         string          `json:"amount"`      // decimal, per currency: "8.00"
	Currency       string          `json:"currency"`
	PaymentID      string          `json:"paymentId,omitempty"`
	CreatedAt      time.Time       `json:"createdAt"`
	// Charge is the charge as this capture left it: what a replay of the
	// capture answers, as a real provider replays its stored answer.
	Charge ChargeRecord `json:"charge"`
	// RequestCount is how many capture requests were answered with this
	// capture (the first one included).
	RequestCount int `json:"requestCount"`
	// LookupCount is how many lookups by key reached this capture.
	LookupCount int `json:"lookupCount"`

	charge *ChargeRecord // the charge itself, for its request counts; only under s.mu
}

// VoidRecord is the simulator's record of a void (cancellation) of a
// charge's authorization, as answered by the HTTP API and returned by
// Simulator.Voids.
type VoidRecord struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotencyKey"`
	ChargeID       string          `json:"chargeId"`
	Status         provider.Status `json:"status"` // canceled or declined
	DeclineCode    string          `json:"declineCode,omitempty"`
	Reason         string          `json:"reason,omitempty"`
	PaymentID      string          `json:"paymentId,omitempty"`
	CreatedAt      time.Time       `json:"createdAt"`
	// Charge is the charge as this void left it.
	Charge ChargeRecord `json:"charge"`
	// RequestCount is how many void requests were answered with this void
	// (the first one included).
	RequestCount int `json:"requestCount"`
	// LookupCount is how many lookups by key reached this void.
	LookupCount int `json:"lookupCount"`

	charge *ChargeRecord // as in CaptureRecord
}

// The reasons a void may give.
var voidReasons = map[string]bool{"": true, "requested_by_customer": true, "duplicate": true, "fraudulent": true, "abandoned": true}

// captureRequest is the body of POST /v1/captures.
type captureRequest struct {
	ChargeID    string `json:"chargeId"`
	AmountMinor int64  `json:"amountMinor"`
	Currency    string `json:"currency"`
	PaymentID   string `json:"paymentId"`
}

func (q *captureRequest) matches(r *CaptureRecord) bool {
	return q.ChargeID == r.ChargeID && q.AmountMinor == r.AmountMinor &&
		q.Currency == r.Currency && q.PaymentID == r.PaymentID
}

// voidRequest is the body of POST /v1/voids.
type voidRequest struct {
	ChargeID  string `json:"chargeId"`
	Reason    string `json:"reason"`
	PaymentID string `json:"paymentId"`
}

func (q *voidRequest) matches(r *VoidRecord) bool {
	return q.ChargeID == r.ChargeID && q.Reason == r.Reason && q.PaymentID == r.PaymentID
}

// A replay counts on the charge too, so that /_sim/charges shows every
// capture and void request that reached it.
func (cp *CaptureRecord) created() time.Time { return cp.CreatedAt }
func (cp *CaptureRecord) countRequest() int {
	cp.RequestCount++
	cp.charge.CaptureRequestCount++
	return cp.RequestCount
}
func (cp *CaptureRecord) countLookup() int { cp.LookupCount++; return cp.LookupCount }
func (cp *CaptureRecord) logAttrs() []any {
	return []any{"captureId", cp.ID, "chargeId", cp.ChargeID, "status", cp.Status, "declineCode", cp.DeclineCode,
		"amount", cp.Amount, "currency", cp.Currency}
}

func (v *VoidRecord) created() time.Time { return v.CreatedAt }
func (v *VoidRecord) countRequest() int {
	v.RequestCount++
	v.charge.VoidRequestCount++
	return v.RequestCount
}
func (v *VoidRecord) countLookup() int { v.LookupCount++; return v.LookupCount }
func (v *VoidRecord) logAttrs() []any {
	return []any{"voidId", v.ID, "chargeId", v.ChargeID, "status", v.Status, "declineCode", v.DeclineCode, "reason", v.Reason}
}

// Captures returns a copy of every capture the simulator holds, in creation
// order.
func (s *Simulator) Captures() []CaptureRecord {
	out := s.captures.copies(s)
	for i := range out {
		out[i].charge = nil
	}
	return out
}

// Voids returns a copy of every void the simulator holds, in creation
// order.
func (s *Simulator) Voids() []VoidRecord {
	out := s.voids.copies(s)
	for i := range out {
		out[i].charge = nil
	}
	return out
}

func (s *Simulator) handleCapture(w http.ResponseWriter, r *http.Request) {
	key, req, ok := createInput(w, r, s.checkCapture)
	if !ok {
		return
	}
	log := s.log.With("idempotencyKey", key)
	create(s, w, r, log, "capture", &s.captures, key, req.matches, func() (*CaptureRecord, Effect, *refusal) {
		charge, ok := s.chargeByID[req.ChargeID]
		if !ok {
			return nil, 0, &refusal{http.StatusNotFound, CodeChargeNotFound, "no charge has this id"}
		}
		b := s.behaviour(charge.PaymentMethod)
		if b.Capture == Refuse {
			return nil, 0, &refusal{http.StatusServiceUnavailable, CodeUnavailable, "the provider is unavailable; nothing was processed"}
		}
		cp := &CaptureRecord{
			ID:             newID("cp_"),
			IdempotencyKey: key,
			ChargeID:       charge.ID,
			Status:         provider.StatusSucceeded,
			AmountMinor:    req.AmountMinor,
			Amount:         s.rules.Format(req.AmountMinor, req.Currency),
			Currency:       req.Currency,
			PaymentID:      req.PaymentID,
			CreatedAt:      s.clock.Now(),
			RequestCount:   1,
			charge:         charge,
		}
		if code := captureDecline(charge, b, req); code != "" {
			cp.Status, cp.DeclineCode = provider.StatusDeclined, code
		} else {
			// The rest of the authorization, if any, is released.
			charge.Status = provider.StatusSucceeded
			charge.AmountCapturedMinor = req.AmountMinor
			charge.AmountCaptured = s.rules.Format(req.AmountMinor, charge.Currency)
		}
		charge.CaptureRequestCount++
		cp.Charge = *charge
		return cp, b.Capture, nil
	})
}

// captureDecline returns why a new capture of charge, whose method behaves
// as b, is declined, or "" when it succeeds.
func captureDecline(charge *ChargeRecord, b Behaviour, req captureRequest) string {
	switch {
	case charge.Status == provider.StatusCanceled:
		return DeclineChargeCanceled
	case charge.Status == provider.StatusSucceeded:
		return DeclineChargeAlreadyCaptured
	case charge.Status != provider.StatusAuthorized:
		return DeclineChargeNotCapturable
	case req.Currency != charge.Currency:
		return DeclineCurrencyMismatch
	case req.AmountMinor > charge.AmountMinor:
		return DeclineAmountTooLarge
	}
	return b.CaptureDecline
}

func (s *Simulator) checkCapture(req *captureRequest) error {
	if req.ChargeID == "" {
		return errors.New("chargeId is required")
	}
	return s.checkAmount(req.AmountMinor, req.Currency)
}

func (s *Simulator) handleVoid(w http.ResponseWriter, r *http.Request) {
	key, req, ok := createInput(w, r, checkVoid)
	if !ok {
		return
	}
	log := s.log.With("idempotencyKey", key)
	create(s, w, r, log, "void", &s.voids, key, req.matches, func() (*VoidRecord, Effect, *refusal) {
		charge, ok := s.chargeByID[req.ChargeID]
		if !ok {
			return nil, 0, &refusal{http.StatusNotFound, CodeChargeNotFound, "no charge has this id"}
		}
		v := &VoidRecord{
			ID:             newID("vo_"),
			IdempotencyKey: key,
			ChargeID:       charge.ID,
			Status:         provider.StatusCanceled,
			Reason:         req.Reason,
			PaymentID:      req.PaymentID,
			CreatedAt:      s.clock.Now(),
			RequestCount:   1,
			charge:         charge,
		}
		switch charge.Status {
		case provider.StatusAuthorized, provider.StatusRequiresAction:
			// An authorization, or a charge whose customer never
			// authenticated: from now on the challenge changes nothing.
			charge.Status = provider.StatusCanceled
		case provider.StatusCanceled:
			// Already voided: voiding again changes nothing and says so.
		case provider.StatusSucceeded:
			v.Status, v.DeclineCode = provider.StatusDeclined, DeclineChargeAlreadyCaptured
		default:
			v.Status, v.DeclineCode = provider.StatusDeclined, DeclineChargeNotCancelable
		}
		charge.VoidRequestCount++
		v.Charge = *charge
		return v, Answer, nil
	})
}

func checkVoid(req *voidRequest) error {
	if req.ChargeID == "" {
		return errors.New("chargeId is required")
	}
	if !voidReasons[req.Reason] {
		return fmt.Errorf("unknown reason %q (requested_by_customer, duplicate, fraudulent or abandoned)", req.Reason)
	}
	return nil
}

func (s *Simulator) handleLookupCapture(w http.ResponseWriter, r *http.Request) {
	cp, log, ok := lookup(s, w, r, "capture", func(key string) *CaptureRecord { return s.captures.byKey[key] })
	if !ok {
		return
	}
	log.Info("sim: capture lookup found the capture")
	writeJSON(w, http.StatusOK, cp)
}

func (s *Simulator) handleLookupVoid(w http.ResponseWriter, r *http.Request) {
	v, log, ok := lookup(s, w, r, "void", func(key string) *VoidRecord { return s.voids.byKey[key] })
	if !ok {
		return
	}
	log.Info("sim: void lookup found the void")
	writeJSON(w, http.StatusOK, v)
}

func (s *Simulator) handleListCaptures(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Captures []CaptureRecord `json:"captures"`
	}{s.Captures()})
}

func (s *Simulator) handleListVoids(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Voids []VoidRecord `json:"voids"`
	}{s.Voids()})
}
