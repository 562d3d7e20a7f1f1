// Package sim is an in-memory payment provider that honours its own
// idempotency keys, so that recovery after timeouts, lost responses and
// crashes can be tested against something that really remembers what it did.
//
// A Simulator is an http.Handler: mount it in an httptest.Server, or serve it
// on a loopback port with Start. State lives in memory for the Simulator's
// lifetime; nothing is persisted.
//
// What a charge, and a capture or refund of it, does is chosen by the
// charge's payment method, in the table Behaviours (go doc sim.Behaviours; providersim
// -methods prints it). This documentation describes the protocol, not the
// methods.
//
// # HTTP API
//
// All bodies are JSON with lowerCamel field names. Errors are answered as
// {"error":"<code>","message":"<detail>"}.
//
// # Charges
//
// POST /v1/charges creates a charge. The Idempotency-Key header (1 to 255
// characters) is required. Body (unknown fields are rejected):
//
//	{"amountMinor":1000,"currency":"EUR","paymentMethod":"pm_card_visa",
//	 "description":"optional","paymentId":"pay_...","captureMethod":"manual"}
//
// amountMinor must be greater than zero and currency a supported upper-case
// ISO 4217 code (see package money); captureMethod is optional, "automatic"
// (the default) or "manual". The answer is 200 with the charge:
//
//	{"id":"ch_...","idempotencyKey":"...","status":"succeeded",
//	 "amountMinor":1000,"amount":"10.00","currency":"EUR",
//	 "paymentMethod":"pm_card_visa","description":"...","paymentId":"pay_...",
//	 "createdAt":"2025-01-01T00:00:00Z","captureMethod":"automatic",
//	 "amountCapturedMinor":1000,"amountCaptured":"10.00",
//	 "requestCount":1,"lookupCount":0,"captureRequestCount":0,"voidRequestCount":0}
//
// status is "succeeded" or "declined"; a declined charge also has
// "declineCode". A decline is a 200: the charge exists, it just moved no
// money. A charge made with captureMethod manual that would succeed is only
// authorized: status "requires_capture", amountCaptured 0, until a capture
// (status "succeeded") or a void (status "canceled"; see Captures and voids).
// Other answers: 400 idempotency_key_missing, idempotency_key_invalid or
// invalid_request; 422 idempotency_key_reused; 503 unavailable.
//
// The simulator remembers a key for KeyTTL after the charge created with it.
// Within that window a create with the same key and the same parameters
// (amountMinor, currency, paymentMethod, description, paymentId,
// captureMethod, an omitted one being automatic) returns the charge as it
// now stands immediately, whatever its payment method, and increments its
// requestCount; different parameters answer 422 idempotency_key_reused. After
// the window the key is forgotten for creates: a create with it makes a new
// charge, as a real provider would. Concurrent creates with one key produce
// exactly one charge; every one of them is counted in requestCount.
//
// GET /v1/charges?idempotencyKey=K answers 200 with the newest charge created
// with K. Lookups ignore KeyTTL: they find every charge the simulator holds.
// A key it never saw answers 404 {"error":"not_found"}; a missing parameter
// 400 invalid_request; a flaky lookup 503 unavailable. Every lookup of a
// charge, failed or not, increments its lookupCount.
//
// GET /v1/charges/{id} answers 200 with the charge of that id as it now
// stands (read-after-write: a capture or void shows at once), or 404
// {"error":"not_found"}. It is not a lookup by key: it is never flaky and
// counts nothing.
//
// GET /_sim/charges answers {"charges":[...]}, every charge in creation order,
// each in the representation above; with since=T (RFC 3339) only those
// created at or after T (how the service's audit, paymentsapi orphans,
// lists the provider's charges). This is how a test proves that money
// moved exactly once: requestCount, captureRequestCount and
// voidRequestCount count every create, capture and void request answered
// for the charge, replays and declines included.
//
// # Refunds
//
// POST /v1/refunds refunds part or all of a charge. The Idempotency-Key
// header is required as for charges; refund keys are their own space (a
// charge and a refund may carry the same key string). Body (unknown fields
// are rejected):
//
//	{"chargeId":"ch_...","amountMinor":300,"currency":"EUR",
//	 "reason":"requested_by_customer","refundId":"re_..."}
//
// chargeId is required; amountMinor must be greater than zero, currency a
// supported upper-case ISO 4217 code, reason empty or one of
// requested_by_customer, duplicate, fraudulent. The answer is 200 with the
// refund:
//
//	{"id":"re_...","idempotencyKey":"...","chargeId":"ch_...",
//	 "status":"succeeded","amountMinor":300,"amount":"3.00","currency":"EUR",
//	 "reason":"requested_by_customer","refundId":"re_...",
//	 "createdAt":"2025-01-01T00:00:00Z","requestCount":1,"lookupCount":0}
//
// A new refund is declined (status "declined", a 200 like a declined
// charge), checked in this order, when:
//
//	the charge did not succeed (or is only authorized)  charge_not_refundable
//	currency is not the charge's                        currency_mismatch
//	the charge's succeeded refunds plus this one would
//	exceed the charge's captured amount                 amount_too_large
//	the charge's payment method declines refunds        its RefundDecline
//
// Otherwise it succeeds. Keys, KeyTTL, replays (same chargeId, amountMinor,
// currency, reason, refundId) and 422 idempotency_key_reused work exactly as
// for charges, declined refunds included, and concurrent creates with one key
// produce exactly one refund. A chargeId the simulator does not hold answers
// 404 charge_not_found and records nothing.
//
// GET /v1/refunds?idempotencyKey=K[&chargeId=C] answers 200 with the newest
// refund created with K (and, when C is given, of charge C), 404 not_found
// when there is none, 400 invalid_request without K. Like charge lookups it
// ignores KeyTTL and increments lookupCount.
//
// GET /_sim/refunds answers {"refunds":[...]}, every refund in creation
// order, each in the representation above; since=T as for charges.
//
// # Captures and voids
//
// POST /v1/captures captures the authorization of a charge made with
// captureMethod manual. The Idempotency-Key header is required; capture keys
// are their own space. Body (unknown fields are rejected):
//
//	{"chargeId":"ch_...","amountMinor":800,"currency":"EUR","paymentId":"pay_..."}
//
// chargeId is required, amountMinor greater than zero, currency a supported
// upper-case ISO 4217 code; paymentId is optional. The answer is 200 with the
// capture, and the charge as the capture left it:
//
//	{"id":"cp_...","idempotencyKey":"...","chargeId":"ch_...",
//	 "status":"succeeded","amountMinor":800,"amount":"8.00","currency":"EUR",
//	 "paymentId":"pay_...","createdAt":"2025-01-01T00:00:00Z",
//	 "charge":{...,"status":"succeeded","amountCapturedMinor":800,...},
//	 "requestCount":1,"lookupCount":0}
//
// A capture that succeeds moves the charge to "succeeded" with
// amountCaptured the capture's amount; the rest of the authorization is
// released (there is one capture per charge). A new capture is declined
// (status "declined", a 200, the charge unchanged), checked in this order,
// when:
//
//	the charge was voided                               charge_canceled
//	the charge was captured (manual, or automatic)      charge_already_captured
//	the charge was declined                             charge_not_capturable
//	currency is not the charge's                        currency_mismatch
//	amountMinor exceeds the charge's amount             amount_too_large
//	the charge's payment method declines captures       its CaptureDecline
//
// POST /v1/voids voids (cancels) the authorization of a charge: no money
// moves. The Idempotency-Key header is required; void keys are their own
// space. Body (unknown fields are rejected):
//
//	{"chargeId":"ch_...","reason":"requested_by_customer","paymentId":"pay_..."}
//
// reason is empty or one of requested_by_customer, duplicate, fraudulent,
// abandoned. The answer is 200 with the void, and the charge as the void
// left it:
//
//	{"id":"vo_...","idempotencyKey":"...","chargeId":"ch_...",
//	 "status":"canceled","reason":"requested_by_customer","paymentId":"pay_...",
//	 "createdAt":"2025-01-01T00:00:00Z","charge":{...,"status":"canceled",...},
//	 "requestCount":1,"lookupCount":0}
//
// A void of an authorized charge moves it to "canceled"; a void of a charge
// already canceled is "canceled" too and changes nothing. A void is declined
// (status "declined", the charge unchanged) when the charge was captured
// (charge_already_captured) or declined (charge_not_cancelable).
//
// For both, keys, KeyTTL, replays (the same chargeId, amountMinor,
// currency and paymentId for a capture; chargeId, reason and paymentId for
// a void) and 422 idempotency_key_reused work exactly as for charges, except
// that a replay answers the stored capture or void, the charge included as
// it was left then (declined ones too), as a real provider replays its
// stored answer. Concurrent requests with one key make exactly one capture
// or void. A chargeId the simulator does not hold answers 404
// charge_not_found and records nothing; so does 503 unavailable, for a
// payment method whose Capture is Refuse. Past KeyTTL, a capture or void
// with an old key is a new one (and, the charge having moved, declined).
//
// GET /v1/captures?idempotencyKey=K and GET /v1/voids?idempotencyKey=K
// answer the newest capture or void created with K, 404 not_found when
// there is none; like charge lookups they ignore KeyTTL and increment
// lookupCount. GET /_sim/captures answers {"captures":[...]} and GET
// /_sim/voids {"voids":[...]}, each in creation order.
//
// # Payment methods and currency rules
//
// GET /_sim/methods answers what the simulator takes: its test payment
// methods, each with what its charges, the captures of their
// authorizations and their refunds do (the table Behaviours, as providersim
// -methods prints it), and the currency rules it plays:
//
//	{"paymentMethods":[{"paymentMethod":"pm_card_visa","charge":"succeeds",
//	  "capture":"succeeds","refund":"succeeds"},...],
//	 "currencyRules":"iso"}
//
// The service's client reads it once at start, and refuses a charge with
// any other method before it stores anything.
//
// Amounts (amountMinor, amountCapturedMinor, and their decimal forms) are
// in the unit of the currency rules the simulator plays (Options.
// CurrencyRules, providersim -currency-rules): ISO 4217 minor units by
// default ("iso"), Stripe's with "stripe" (ISK has two decimals, in whole
// kronur only; BHD, JOD, KWD, OMR and TND amounts end in 0; package
// units). A create whose amount those rules refuse answers 400
// invalid_request and records nothing.
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
	"github.com/paymentsapi/paymentsapi/internal/provider/units"
)

// The payment methods the simulator understands; Behaviours says what each
// does.
const (
	MethodVisa                       = "pm_card_visa"
	MethodMastercard                 = "pm_card_mastercard"
	MethodChargeDeclined             = "pm_card_chargeDeclined"
	MethodInsufficientFunds          = "pm_card_insufficientFunds"
	MethodSlow                       = "pm_sim_slow"
	MethodTimeoutAfterSuccess        = "pm_sim_timeout_after_success"
	MethodUnavailable                = "pm_sim_unavailable"
	MethodLookupFlaky                = "pm_sim_lookup_flaky"
	MethodRefundDeclined             = "pm_sim_refund_declined"
	MethodRefundTimeoutAfterSuccess  = "pm_sim_refund_timeout_after_success"
	MethodCaptureDeclined            = "pm_sim_capture_declined"
	MethodCaptureTimeoutAfterSuccess = "pm_sim_capture_timeout_after_success"
	MethodThreeDSecureRequired       = "pm_card_threeDSecureRequired"
	MethodThreeDSecureFail           = "pm_card_threeDSecureFail"
)

// The decline codes the simulator gives.
const (
	DeclineGeneric           = "generic_decline"
	DeclineInsufficientFunds = "insufficient_funds"
	DeclineUnsupportedMethod = "unsupported_payment_method"
	// Refunds.
	DeclineRefund              = "refund_declined"
	DeclineChargeNotRefundable = "charge_not_refundable"
	DeclineCurrencyMismatch    = "currency_mismatch"
	DeclineAmountTooLarge      = "amount_too_large"
	// Captures and voids.
	DeclineCapture               = "capture_declined"
	DeclineChargeCanceled        = "charge_canceled"
	DeclineChargeAlreadyCaptured = "charge_already_captured"
	DeclineChargeNotCapturable   = "charge_not_capturable"
	DeclineChargeNotCancelable   = "charge_not_cancelable"
	// Customer authentication (3-D Secure).
	DeclineAuthenticationFailed = "authentication_failed"
)

// The capture methods of a charge (captureMethod).
const (
	CaptureAutomatic = "automatic"
	CaptureManual    = "manual"
)

// The error codes of the HTTP API, in the "error" field of an error body.
const (
	CodeKeyMissing     = "idempotency_key_missing"
	CodeKeyInvalid     = "idempotency_key_invalid"
	CodeInvalidRequest = "invalid_request"
	CodeKeyReused      = "idempotency_key_reused"
	CodeUnavailable    = "unavailable"
	CodeNotFound       = "not_found"
	CodeChargeNotFound = "charge_not_found"
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
	// SlowDelay is how long an AnswerSlowly create waits before answering.
	// Zero means DefaultSlowDelay; a negative value means no delay.
	SlowDelay time.Duration
	// KeyTTL is how long a key is remembered for creates, measured on Clock
	// from the creation of the charge, refund, capture or void. Zero or
	// negative means DefaultKeyTTL.
	KeyTTL time.Duration
	// FlakyLookups is how many lookups of a charge with FlakyLookups fail
	// with 503 before lookups succeed. Zero means DefaultFlakyLookups; a
	// negative value means none fail.
	FlakyLookups int
	// HangFor is the longest a LoseAnswer create holds a request before
	// dropping the connection (it stops earlier when the client goes
	// away). Zero means DefaultHangFor; a negative value means it drops the
	// connection at once.
	HangFor time.Duration
	// Logger receives one record per request outcome. Default: discard.
	Logger *slog.Logger
	// CurrencyRules are the currency rules of the provider the simulator
	// plays (package units): the unit of every amount it is sent and
	// answers, and the amounts it refuses. Default (the zero value): ISO
	// 4217 minor units, any amount.
	CurrencyRules units.Rules
}

// Simulator is the in-memory payment provider. It is safe for concurrent use.
// Create one with New.
type Simulator struct {
	clock        clock.Clock
	slowDelay    time.Duration
	keyTTL       time.Duration
	flakyLookups int
	hangFor      time.Duration
	behaviours   map[string]Behaviour
	methods      []MethodRow // Behaviours in words, as at New
	rules        units.Rules
	log          *slog.Logger
	mux          *http.ServeMux

	mu         sync.Mutex
	charges    store[ChargeRecord, *ChargeRecord]
	chargeByID map[string]*ChargeRecord
	refunds    store[RefundRecord, *RefundRecord]
	refunded   map[string]int64 // charge id → sum of its succeeded refunds
	captures   store[CaptureRecord, *CaptureRecord]
	voids      store[VoidRecord, *VoidRecord]
	webhook    WebhookTarget // where the customer's choices are announced
}

// New returns an empty Simulator configured by opts.
func New(opts Options) *Simulator {
	s := &Simulator{
		clock:        opts.Clock,
		slowDelay:    durationOption(opts.SlowDelay, DefaultSlowDelay),
		keyTTL:       opts.KeyTTL,
		flakyLookups: opts.FlakyLookups,
		hangFor:      durationOption(opts.HangFor, DefaultHangFor),
		behaviours:   behaviourTable(),
		methods:      Methods(),
		rules:        opts.CurrencyRules,
		log:          opts.Logger,
		charges:      newStore[ChargeRecord](),
		chargeByID:   make(map[string]*ChargeRecord),
		refunds:      newStore[RefundRecord](),
		refunded:     make(map[string]int64),
		captures:     newStore[CaptureRecord](),
		voids:        newStore[VoidRecord](),
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
	s.mux.HandleFunc("GET /v1/charges/{id}", s.handleGetCharge)
	s.mux.HandleFunc("GET /_sim/charges", s.handleList)
	s.mux.HandleFunc("POST /v1/refunds", s.handleRefund)
	s.mux.HandleFunc("GET /v1/refunds", s.handleLookupRefund)
	s.mux.HandleFunc("GET /_sim/refunds", s.handleListRefunds)
	s.mux.HandleFunc("POST /v1/captures", s.handleCapture)
	s.mux.HandleFunc("GET /v1/captures", s.handleLookupCapture)
	s.mux.HandleFunc("GET /_sim/captures", s.handleListCaptures)
	s.mux.HandleFunc("POST /v1/voids", s.handleVoid)
	s.mux.HandleFunc("GET /v1/voids", s.handleLookupVoid)
	s.mux.HandleFunc("GET /_sim/voids", s.handleListVoids)
	s.mux.HandleFunc("GET /_sim/methods", s.handleMethods)
	s.mux.HandleFunc("GET /healthz", s.handleHealth)
	s.mux.HandleFunc("GET /challenge/{id}", s.handleChallengePage)
	s.mux.HandleFunc("POST /challenge/{id}", s.handleChallenge)
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

// behaviour is what method does.
func (s *Simulator) behaviour(method string) Behaviour {
	if b, ok := s.behaviours[method]; ok {
		return b
	}
	return UnknownMethod
}

// live reports whether a key first used at created is still remembered for
// creates. Callers hold s.mu.
func (s *Simulator) live(created time.Time) bool {
	return s.clock.Now().Before(created.Add(s.keyTTL))
}

// createInput reads a create's Idempotency-Key header and its JSON body,
// rejecting unknown fields and trailing data, and validates the body with
// check. When either is bad it answers 400 and reports false.
func createInput[T any](w http.ResponseWriter, r *http.Request, check func(*T) error) (key string, req T, ok bool) {
	key = r.Header.Get(HeaderIdempotencyKey)
	switch {
	case key == "":
		writeError(w, http.StatusBadRequest, CodeKeyMissing, "the Idempotency-Key header is required")
		return "", req, false
	case len(key) > maxKeyLen:
		writeError(w, http.StatusBadRequest, CodeKeyInvalid, fmt.Sprintf("the Idempotency-Key header is longer than %d characters", maxKeyLen))
		return "", req, false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyLen))
	dec.DisallowUnknownFields()
	var err error
	if err = dec.Decode(&req); err != nil {
		err = fmt.Errorf("malformed body: %w", err)
	} else if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
		err = errors.New("malformed body: trailing data after the JSON object")
	} else {
		err = check(&req)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		return "", req, false
	}
	return key, req, true
}

// deliver answers a create that recorded its object, as effect says:
// current returns the object as it is now.
func (s *Simulator) deliver(w http.ResponseWriter, r *http.Request, log *slog.Logger, effect Effect, current func() any) {
	switch effect {
	case AnswerSlowly:
		if !wait(r, s.slowDelay) {
			log.Info("sim: slow request abandoned before its answer")
			panic(http.ErrAbortHandler)
		}
	case LoseAnswer:
		wait(r, s.hangFor)
		log.Info("sim: dropping the connection without an answer")
		panic(http.ErrAbortHandler)
	}
	writeJSON(w, http.StatusOK, current())
}

// wait waits d, and reports false if the request's context ended first.
func wait(r *http.Request, d time.Duration) bool { return clock.Sleep(r.Context(), d) == nil }

// handleMethods answers the test payment methods (Behaviours) and the
// currency rules the simulator plays.
func (s *Simulator) handleMethods(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		PaymentMethods []MethodRow `json:"paymentMethods"`
		CurrencyRules  string      `json:"currencyRules"`
	}{s.methods, s.rules.Name()})
}

func (s *Simulator) handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// newID returns prefix and a random suffix.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + hex.EncodeToString(b[:])
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
		// Only the types of this package are marshalled; they always encode.
		panic(fmt.Sprintf("sim: encoding response: %v", err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
