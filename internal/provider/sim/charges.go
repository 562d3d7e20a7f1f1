package sim

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// ChargeRecord is the simulator's record of a charge, as answered by the
// HTTP API and returned by Simulator.Charges.
type ChargeRecord struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotencyKey"`
	Status         provider.Status `json:"status"`
	DeclineCode    string          `json:"declineCode,omitempty"`
	AmountMinor    int64           `json:"amountMinor"`
	Amount         string          `json:"amount"` // decimal, per currency: "10.00"
	Currency       string          `json:"currency"`
	PaymentMethod  string          `json:"paymentMethod"`
	Description    string          `json:"description,omitempty"`
	PaymentID      string          `json:"paymentId,omitempty"`
	CreatedAt      time.Time       `json:"createdAt"`
	// CaptureMethod is automatic (a charge that succeeds is captured at
	// once) or manual (it is authorized, requires_capture, and moves money
	// only once captured).
	CaptureMethod string `json:"captureMethod"`
	// AmountCapturedMinor is how much of the amount was captured: all of
	// it for a charge captured at once, the capture's amount once a manual
	// charge is captured, 0 otherwise. AmountCaptured is the same in
	// decimal.
	AmountCapturedMinor int64  `json:"amountCapturedMinor"`
	AmountCaptured      string `json:"amountCaptured"`
	// RequestCount is how many create requests were answered with this
	// charge (the first one included).
	RequestCount int `json:"requestCount"`
	// LookupCount is how many lookups by key reached this charge, failed
	// flaky ones included.
	LookupCount int `json:"lookupCount"`
	// CaptureRequestCount and VoidRequestCount are how many capture and
	// void requests, whatever their key, were answered with a capture or
	// void of this charge (replays and declines included).
	CaptureRequestCount int `json:"captureRequestCount"`
	VoidRequestCount    int `json:"voidRequestCount"`
	// ReturnURL is where the customer is sent back after the challenge
	// page; NextActionURL is the challenge page, while the charge is
	// requires_action (kept after, as a record).
	ReturnURL     string `json:"returnUrl,omitempty"`
	NextActionURL string `json:"nextActionUrl,omitempty"`
}

// createRequest is the body of POST /v1/charges.
type createRequest struct {
	AmountMinor   int64  `json:"amountMinor"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"paymentMethod"`
	Description   string `json:"description"`
	PaymentID     string `json:"paymentId"`
	CaptureMethod string `json:"captureMethod"` // "" means automatic
	ReturnURL     string `json:"returnUrl"`
}

func (c *createRequest) matches(r *ChargeRecord) bool {
	return c.AmountMinor == r.AmountMinor && c.Currency == r.Currency &&
		c.PaymentMethod == r.PaymentMethod && c.Description == r.Description &&
		c.PaymentID == r.PaymentID && c.CaptureMethod == r.CaptureMethod && c.ReturnURL == r.ReturnURL
}

func (c *ChargeRecord) created() time.Time { return c.CreatedAt }
func (c *ChargeRecord) countRequest() int  { c.RequestCount++; return c.RequestCount }
func (c *ChargeRecord) countLookup() int   { c.LookupCount++; return c.LookupCount }
func (c *ChargeRecord) logAttrs() []any {
	return []any{"chargeId", c.ID, "status", c.Status, "amount", c.Amount, "currency", c.Currency}
}

// Charges returns a copy of every charge the simulator holds, in creation
// order.
func (s *Simulator) Charges() []ChargeRecord { return s.charges.copies(s) }

func (s *Simulator) handleCreate(w http.ResponseWriter, r *http.Request) {
	key, req, ok := createInput(w, r, s.checkCharge)
	if !ok {
		return
	}
	log := s.log.With("idempotencyKey", key, "paymentMethod", req.PaymentMethod)
	create(s, w, r, log, "charge", &s.charges, key, req.matches, func() (*ChargeRecord, Effect, *refusal) {
		b := s.behaviour(req.PaymentMethod)
		if b.Charge == Refuse {
			return nil, 0, &refusal{http.StatusServiceUnavailable, CodeUnavailable, "the provider is unavailable; nothing was processed"}
		}
		c := &ChargeRecord{
			ID:             newID("ch_"),
			IdempotencyKey: key,
			Status:         provider.StatusSucceeded,
			AmountMinor:    req.AmountMinor,
			Amount:         s.rules.Format(req.AmountMinor, req.Currency),
			Currency:       req.Currency,
			PaymentMethod:  req.PaymentMethod,
			Description:    req.Description,
			PaymentID:      req.PaymentID,
			CreatedAt:      s.clock.Now(),
			CaptureMethod:  req.CaptureMethod,
			ReturnURL:      req.ReturnURL,
			RequestCount:   1,
		}
		switch {
		case b.ChargeDecline != "":
			c.Status, c.DeclineCode = provider.StatusDeclined, b.ChargeDecline
		case b.Authenticate:
			c.Status, c.NextActionURL = provider.StatusRequiresAction, s.baseURL(r)+"/challenge/"+c.ID
		case req.CaptureMethod == CaptureManual:
			c.Status = provider.StatusAuthorized
		default:
			c.AmountCapturedMinor = c.AmountMinor
		}
		c.AmountCaptured = s.rules.Format(c.AmountCapturedMinor, c.Currency)
		s.chargeByID[c.ID] = c
		return c, b.Charge, nil
	})
}

func (s *Simulator) checkCharge(req *createRequest) error {
	if err := s.checkAmount(req.AmountMinor, req.Currency); err != nil {
		return err
	}
	if req.PaymentMethod == "" {
		return errors.New("paymentMethod is required")
	}
	switch req.CaptureMethod {
	case "":
		req.CaptureMethod = CaptureAutomatic
	case CaptureAutomatic, CaptureManual:
	default:
		return fmt.Errorf("unknown captureMethod %q (automatic or manual)", req.CaptureMethod)
	}
	return nil
}

// checkAmount validates the amount and currency of a create: an amount
// the currency rules the simulator plays refuse is refused, as the
// provider it plays would refuse it.
func (s *Simulator) checkAmount(amountMinor int64, currency string) error {
	if amountMinor <= 0 {
		return errors.New("amountMinor must be greater than zero")
	}
	if _, ok := money.Exponent(currency); !ok {
		return fmt.Errorf("unsupported currency %q (upper-case ISO 4217 expected)", currency)
	}
	if err := s.rules.Check(amountMinor, currency); err != nil {
		return fmt.Errorf("amount not supported under the %s currency rules: %w", s.rules.Name(), err)
	}
	return nil
}

func (s *Simulator) handleLookup(w http.ResponseWriter, r *http.Request) {
	c, log, ok := lookup(s, w, r, "charge", func(key string) *ChargeRecord { return s.charges.byKey[key] })
	if !ok {
		return
	}
	if s.behaviour(c.PaymentMethod).FlakyLookups && c.LookupCount <= s.flakyLookups {
		log.Info("sim: flaky lookup answered 503")
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "lookups are temporarily unavailable")
		return
	}
	log.Info("sim: lookup found the charge")
	writeJSON(w, http.StatusOK, c)
}

// handleGetCharge answers the charge with the path's id as it now stands,
// or 404 not_found. It is not a lookup by key: it counts nothing and is
// never flaky.
func (s *Simulator) handleGetCharge(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	c, ok := s.chargeByID[id]
	var snap ChargeRecord
	if ok {
		snap = *c
	}
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, CodeNotFound, "no charge has this id")
		return
	}
	writeJSON(w, http.StatusOK, snap)
}

func (s *Simulator) handleList(w http.ResponseWriter, r *http.Request) {
	since, ok := listSince(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Charges []ChargeRecord `json:"charges"`
	}{s.charges.since(s, since)})
}
