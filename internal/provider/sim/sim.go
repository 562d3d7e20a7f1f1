// Package sim is an in-memory payment provider that honours its own
// idempotency keys, so that recovery after timeouts, lost responses and
// crashes can be tested against something that really remembers what it did.
//
// A Simulator is an http.Handler: mount it in an httptest.Server, or serve it
// on a loopback port with Start. State lives in memory for the Simulator's
// lifetime; nothing is persisted.
//
// # HTTP API
//
// All bodies are JSON with lowerCamel field names. Errors are answered as
// {"error":"<code>","message":"<detail>"}.
//
// POST /v1/charges creates a charge. The Idempotency-Key header (1 to 255
// characters) is required. Body (unknown fields are rejected):
//
//	{"amountMinor":1000,"currency":"EUR","paymentMethod":"pm_card_visa",
//	 "description":"optional","paymentId":"pay_..."}
//
// amountMinor must be greater than zero and currency a supported upper-case
// ISO 4217 code (see package money). The answer is 200 with the charge:
//
//	{"id":"ch_...","idempotencyKey":"...","status":"succeeded",
//	 "amountMinor":1000,"amount":"10.00","currency":"EUR",
//	 "paymentMethod":"pm_card_visa","description":"...","paymentId":"pay_...",
//	 "createdAt":"2025-01-01T00:00:00Z","requestCount":1,"lookupCount":0}
//
// status is "succeeded" or "declined"; a declined charge also has
// "declineCode". A decline is a 200: the charge exists, it just moved no
// money. Other answers: 400 idempotency_key_missing, idempotency_key_invalid
// or invalid_request; 422 idempotency_key_reused; 503 unavailable.
//
// The simulator remembers a key for KeyTTL after the charge created with it.
// Within that window a create with the same key and the same parameters
// (amountMinor, currency, paymentMethod, description, paymentId) returns the
// stored charge immediately, whatever its payment method, and increments its
// requestCount; different parameters answer 422 idempotency_key_reused. After
// the window the key is forgotten for creates: a create with it makes a new
// charge, as a real provider would.
//
// The payment method chooses what a new charge does:
//
//	pm_card_visa, pm_card_mastercard  succeeds
//	pm_card_chargeDeclined            declines with generic_decline
//	pm_card_insufficientFunds         declines with insufficient_funds
//	pm_sim_slow                       records a success, answers after SlowDelay
//	pm_sim_timeout_after_success      records a success, then holds the request
//	                                  until the client goes away or HangFor
//	                                  passes, and drops the connection without
//	                                  an answer (the response is lost)
//	pm_sim_unavailable                answers 503 and records nothing
//	pm_sim_lookup_flaky               succeeds, but the first FlakyLookups
//	                                  lookups of the charge answer 503
//	anything else                     declines with unsupported_payment_method
//
// Concurrent creates with one key produce exactly one charge; every one of
// them is counted in requestCount.
//
// GET /v1/charges?idempotencyKey=K answers 200 with the newest charge created
// with K. Lookups ignore KeyTTL: they find every charge the simulator holds.
// A key it never saw answers 404 {"error":"not_found"}; a missing parameter
// 400 invalid_request; the flaky case 503 unavailable. Every lookup of a
// charge, failed or not, increments its lookupCount.
//
// GET /_sim/charges answers {"charges":[...]}, every charge in creation order,
// each in the representation above. This is how a test proves that money
// moved exactly once.
//
// GET /healthz answers 200 {"status":"ok"}.
package sim

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// The payment methods the simulator understands.
const (
	MethodVisa                = "pm_card_visa"
	MethodMastercard          = "pm_card_mastercard"
	MethodChargeDeclined      = "pm_card_chargeDeclined"
	MethodInsufficientFunds   = "pm_card_insufficientFunds"
	MethodSlow                = "pm_sim_slow"
	MethodTimeoutAfterSuccess = "pm_sim_timeout_after_success"
	MethodUnavailable         = "pm_sim_unavailable"
	MethodLookupFlaky         = "pm_sim_lookup_flaky"
)

// The decline codes the simulator gives.
const (
	DeclineGeneric           = "generic_decline"
	DeclineInsufficientFunds = "insufficient_funds"
	DeclineUnsupportedMethod = "unsupported_payment_method"
)

// The error codes of the HTTP API, in the "error" field of an error body.
const (
	CodeKeyMissing     = "idempotency_key_missing"
	CodeKeyInvalid     = "idempotency_key_invalid"
	CodeInvalidRequest = "invalid_request"
	CodeKeyReused      = "idempotency_key_reused"
	CodeUnavailable    = "unavailable"
	CodeNotFound       = "not_found"
)

// HeaderIdempotencyKey is the request header carrying the idempotency key.
const HeaderIdempotencyKey = "Idempotency-Key"

// Defaults for the zero values of Options.
const (
	DefaultSlowDelay    = 2 * time.Second
	DefaultKeyTTL       = 24 * time.Hour
	DefaultFlakyLookups = 2
	DefaultHangFor      = 60 * time.Second
)

const (
	maxKeyLen  = 255
	maxBodyLen = 64 << 10
)

// Options configure a Simulator. The zero value of each field means its
// default.
type Options struct {
	// Clock gives creation times and ages keys. Default: clock.System.
	Clock clock.Clock
	// SlowDelay is how long pm_sim_slow waits before answering. Zero means
	// DefaultSlowDelay; a negative value means no delay.
	SlowDelay time.Duration
	// KeyTTL is how long a key is remembered for creates, measured on Clock
	// from the charge's creation. Zero or negative means DefaultKeyTTL.
	KeyTTL time.Duration
	// FlakyLookups is how many lookups of a pm_sim_lookup_flaky charge fail
	// with 503 before lookups succeed. Zero means DefaultFlakyLookups; a
	// negative value means none fail.
	FlakyLookups int
	// HangFor is the longest pm_sim_timeout_after_success holds a request
	// before dropping the connection (it stops earlier when the client goes
	// away). Zero means DefaultHangFor; a negative value means it drops the
	// connection at once.
	HangFor time.Duration
	// Logger receives one record per request outcome. Default: discard.
	Logger *slog.Logger
}

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
	// RequestCount is how many create requests were answered with this
	// charge (the first one included).
	RequestCount int `json:"requestCount"`
	// LookupCount is how many lookups by key reached this charge, failed
	// flaky ones included.
	LookupCount int `json:"lookupCount"`
}

// createRequest is the body of POST /v1/charges.
type createRequest struct {
	AmountMinor   int64  `json:"amountMinor"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"paymentMethod"`
	Description   string `json:"description"`
	PaymentID     string `json:"paymentId"`
}

func (c *createRequest) matches(r *ChargeRecord) bool {
	return c.AmountMinor == r.AmountMinor && c.Currency == r.Currency &&
		c.PaymentMethod == r.PaymentMethod && c.Description == r.Description &&
		c.PaymentID == r.PaymentID
}

// Simulator is the in-memory payment provider. It is safe for concurrent use.
// Create one with New.
type Simulator struct {
	clock        clock.Clock
	slowDelay    time.Duration
	keyTTL       time.Duration
	flakyLookups int
	hangFor      time.Duration
	log          *slog.Logger
	mux          *http.ServeMux

	mu      sync.Mutex
	charges []*ChargeRecord          // creation order
	byKey   map[string]*ChargeRecord // newest charge per key
}

// New returns an empty Simulator configured by opts.
func New(opts Options) *Simulator {
	s := &Simulator{
		clock:        opts.Clock,
		slowDelay:    durationOption(opts.SlowDelay, DefaultSlowDelay),
		keyTTL:       opts.KeyTTL,
		flakyLookups: opts.FlakyLookups,
		hangFor:      durationOption(opts.HangFor, DefaultHangFor),
		log:          opts.Logger,
		byKey:        make(map[string]*ChargeRecord),
	}
	if s.clock == nil {
		s.clock = clock.System{}
	}
	if s.keyTTL <= 0 {
		s.keyTTL = DefaultKeyTTL
	}
	switch {
	case s.flakyLookups == 0:
		s.flakyLookups = DefaultFlakyLookups
	case s.flakyLookups < 0:
		s.flakyLookups = 0
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/charges", s.handleCreate)
	s.mux.HandleFunc("GET /v1/charges", s.handleLookup)
	s.mux.HandleFunc("GET /_sim/charges", s.handleList)
	s.mux.HandleFunc("GET /healthz", s.handleHealth)
	return s
}

func durationOption(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// ServeHTTP serves the simulator's HTTP API.
func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// Charges returns a copy of every charge the simulator holds, in creation
// order.
func (s *Simulator) Charges() []ChargeRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ChargeRecord, len(s.charges))
	for i, c := range s.charges {
		out[i] = *c
	}
	return out
}

func (s *Simulator) handleCreate(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(HeaderIdempotencyKey)
	switch {
	case key == "":
		writeError(w, http.StatusBadRequest, CodeKeyMissing, "the Idempotency-Key header is required")
		return
	case len(key) > maxKeyLen:
		writeError(w, http.StatusBadRequest, CodeKeyInvalid, fmt.Sprintf("the Idempotency-Key header is longer than %d characters", maxKeyLen))
		return
	}
	req, err := decodeCreate(w, r)
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		return
	}
	log := s.log.With("idempotencyKey", key, "paymentMethod", req.PaymentMethod)

	s.mu.Lock()
	now := s.clock.Now()
	if prev, ok := s.byKey[key]; ok && now.Before(prev.CreatedAt.Add(s.keyTTL)) {
		if !req.matches(prev) {
			s.mu.Unlock()
			log.Info("sim: idempotency key reused with other parameters", "chargeId", prev.ID)
			writeError(w, http.StatusUnprocessableEntity, CodeKeyReused, "this idempotency key was used with other parameters")
			return
		}
		prev.RequestCount++
		snap := *prev
		s.mu.Unlock()
		log.Info("sim: charge replayed", "chargeId", snap.ID, "requestCount", snap.RequestCount)
		writeJSON(w, http.StatusOK, snap)
		return
	}
	if req.PaymentMethod == MethodUnavailable {
		s.mu.Unlock()
		log.Info("sim: unavailable, nothing recorded")
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the provider is unavailable; nothing was processed")
		return
	}
	c := &ChargeRecord{
		ID:             newChargeID(),
		IdempotencyKey: key,
		Status:         provider.StatusSucceeded,
		AmountMinor:    req.AmountMinor,
		Amount:         money.Format(req.AmountMinor, req.Currency),
		Currency:       req.Currency,
		PaymentMethod:  req.PaymentMethod,
		Description:    req.Description,
		PaymentID:      req.PaymentID,
		CreatedAt:      now,
		RequestCount:   1,
	}
	switch req.PaymentMethod {
	case MethodVisa, MethodMastercard, MethodSlow, MethodTimeoutAfterSuccess, MethodLookupFlaky:
	case MethodChargeDeclined:
		c.Status, c.DeclineCode = provider.StatusDeclined, DeclineGeneric
	case MethodInsufficientFunds:
		c.Status, c.DeclineCode = provider.StatusDeclined, DeclineInsufficientFunds
	default:
		c.Status, c.DeclineCode = provider.StatusDeclined, DeclineUnsupportedMethod
	}
	s.charges = append(s.charges, c)
	s.byKey[key] = c
	s.mu.Unlock()
	log = log.With("chargeId", c.ID, "status", c.Status)
	log.Info("sim: charge created", "amount", c.Amount, "currency", c.Currency)

	switch req.PaymentMethod {
	case MethodSlow:
		if !wait(r, s.slowDelay) {
			log.Info("sim: slow request abandoned before its answer")
			panic(http.ErrAbortHandler)
		}
	case MethodTimeoutAfterSuccess:
		wait(r, s.hangFor)
		log.Info("sim: dropping the connection without an answer")
		panic(http.ErrAbortHandler)
	}
	writeJSON(w, http.StatusOK, s.snapshot(c))
}

// wait waits d, and reports false if the request's context ended first.
func wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

func (s *Simulator) snapshot(c *ChargeRecord) ChargeRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *c
}

func decodeCreate(w http.ResponseWriter, r *http.Request) (createRequest, error) {
	var req createRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyLen))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("malformed body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, errors.New("malformed body: trailing data after the JSON object")
	}
	if req.AmountMinor <= 0 {
		return req, errors.New("amountMinor must be greater than zero")
	}
	if _, ok := money.Exponent(req.Currency); !ok {
		return req, fmt.Errorf("unsupported currency %q (upper-case ISO 4217 expected)", req.Currency)
	}
	if req.PaymentMethod == "" {
		return req, errors.New("paymentMethod is required")
	}
	return req, nil
}

func (s *Simulator) handleLookup(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("idempotencyKey")
	if key == "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "the idempotencyKey query parameter is required")
		return
	}
	log := s.log.With("idempotencyKey", key)
	s.mu.Lock()
	c, ok := s.byKey[key]
	if !ok {
		s.mu.Unlock()
		log.Info("sim: lookup found nothing")
		writeError(w, http.StatusNotFound, CodeNotFound, "no charge was created with this idempotency key")
		return
	}
	c.LookupCount++
	snap := *c
	s.mu.Unlock()
	log = log.With("chargeId", snap.ID, "lookupCount", snap.LookupCount)
	if snap.PaymentMethod == MethodLookupFlaky && snap.LookupCount <= s.flakyLookups {
		log.Info("sim: flaky lookup answered 503")
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "lookups are temporarily unavailable")
		return
	}
	log.Info("sim: lookup found the charge")
	writeJSON(w, http.StatusOK, snap)
}

func (s *Simulator) handleList(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Charges []ChargeRecord `json:"charges"`
	}{s.Charges()})
}

func (s *Simulator) handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func newChargeID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "ch_" + hex.EncodeToString(b[:])
}

type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, errorBody{Error: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only the types above are marshalled; they always encode.
		panic(fmt.Sprintf("sim: encoding response: %v", err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
