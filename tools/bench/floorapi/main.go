// Command floorapi is the least a Go API can do to serve make bench's new
// payments: the reference flow of tools/bench/pgbench/flow.sql behind an HTTP
// endpoint, and nothing else. It answers the benchmark's POST /payments by
// running the flow's three transactions, each as one pgx batch (one round
// trip, one implicit transaction), with the provider call between the
// second and the third, and its retries with the stored answer. It writes
// the flow's rows exactly (its events unpublished, as flow.sql does, so
// that it pays for the outbox's triggers and partial indexes), and has no
// middleware, no validation beyond decoding the body, no state machine in
// Go, no engine, no relay, no metrics and no logs.
//
// It exists to measure a floor on this machine: what the same HTTP in,
// three round trips to PostgreSQL, one call to the provider simulator and
// HTTP out cost in CPU, throughput and latency, without any of the
// service's own work. make bench runs it in place of the API:
//
//	go build -o bin/floorapi ./tools/bench/floorapi
//	go run ./tools/paymentsbench -api-bin bin/floorapi -storm 0 -soak 0
//
// Its numbers bound what any change to the service can reach here; see
// docs/BENCHMARKS.md ("What is measured, and how"). It is not a payments service: it checks
// no fingerprint (a reused key replays whatever the key stored), holds no
// lease and recovers nothing.
package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	tenant, secret, ok := strings.Cut(getenv("API_KEYS"), ":")
	if !ok {
		return errors.New("API_KEYS=tenant:secret is required")
	}
	if getenv("PROVIDER_URL") == "" {
		return errors.New("PROVIDER_URL is required (a running providersim)")
	}
	pool, err := database.Open(ctx, getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	// The same schema as the service's, so that it pays for the same rows,
	// indexes and triggers.
	if err := database.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		return err
	}
	s := &server{
		db: pool, tenant: tenant, auth: "Bearer " + secret,
		provider: simclient.New(getenv("PROVIDER_URL"), &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
		}}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("POST /payments", s.createPayment)

	ln, err := net.Listen("tcp", cmp.Or(getenv("HTTP_ADDR"), "127.0.0.1:0"))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "paymentsapi is listening on http://%s\n", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type server struct {
	db       *pgxpool.Pool
	provider *simclient.Client
	tenant   string
	auth     string
}

// command is the body of POST /payments.
type command struct {
	AccountID         string `json:"accountId"`
	Amount            string `json:"amount"`
	Currency          string `json:"currency"`
	MerchantReference string `json:"merchantReference"`
	PaymentMethod     string `json:"paymentMethod"`
	Description       string `json:"description"`
}

// event is an event's payload: the payment as clients see it, and its
// tenant, as the service writes them.
type event struct {
	payments.View
	TenantID string `json:"tenantId"`
}

func (s *server) createPayment(w http.ResponseWriter, r *http.Request) {
	if err := s.pay(w, r); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// pay answers r; an error is a failure of the database or of encoding, for
// createPayment to answer with a 500.
func (s *server) pay(w http.ResponseWriter, r *http.Request) error {
	if r.Header.Get("Authorization") != s.auth {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return nil
	}
	key := r.Header.Get("Idempotency-Key")
	var c command
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&c); err != nil || key == "" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return nil
	}
	amountMinor, err := money.Parse(c.Amount, c.Currency)
	if err != nil {
		http.Error(w, "bad amount", http.StatusBadRequest)
		return nil
	}
	ctx := r.Context()
	now := time.Now().UTC()
	p := payments.View{
		PaymentID: payments.NewID(), Status: payments.StatusProcessing, AccountID: c.AccountID, Amount: c.Amount,
		Currency: c.Currency, MerchantReference: c.MerchantReference, PaymentMethod: c.PaymentMethod,
		Channel: "web", Description: c.Description, RefundedAmount: "0.00", CreatedAt: now, UpdatedAt: now,
	}
	created, err := json.Marshal(event{p, s.tenant})
	if err != nil {
		return err
	}
	fingerprint := sha256.Sum256(created)

	// 1. The key, the payment (RECEIVED, through the state machine's
	// trigger) and its first event, in one statement; or, for a retry, the
	// stored answer read in the same round trip.
	var (
		keyID         int64
		stored        []byte
		storedHeaders map[string]string
		storedStatus  *int
		b             pgx.Batch
	)
	b.Queue(`SELECT response_status, response_headers, response_body FROM idempotency_keys
		WHERE tenant_id = $1 AND operation = 'create_payment' AND idempotency_key = $2`, s.tenant, key).
		QueryRow(func(row pgx.Row) error {
			err := row.Scan(&storedStatus, &storedHeaders, &stored)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		})
	b.Queue(`
		WITH k AS (
		    INSERT INTO idempotency_keys
		        (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
		         fencing_token, lease_expires_at, created_at)
		    VALUES ($1, 'create_payment', $2, $3, 'payment', $4, 1, $5::timestamptz + interval '30 seconds', $5)
		    ON CONFLICT (tenant_id, operation, idempotency_key) DO NOTHING
		    RETURNING id, resource_id
		), p AS (
		    INSERT INTO payments
		        (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
		         payment_method, channel, description, state, created_at, updated_at)
		    SELECT resource_id, $1, $6, $7, $8, $9, $10, 'web', $11, 'RECEIVED', $5, $5 FROM k
		), e AS (
		    INSERT INTO outbox_events
		        (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
		    SELECT $12, 'payment', resource_id, 'PaymentCreated', $13, $5, $5 FROM k
		)
		SELECT COALESCE((SELECT id FROM k), 0)`,
		s.tenant, key, fingerprint[:], p.PaymentID, now, c.AccountID, amountMinor, c.Currency,
		c.MerchantReference, c.PaymentMethod, c.Description, ids.NewEventID(now), created,
	).QueryRow(func(row pgx.Row) error { return row.Scan(&keyID) })
	if err := s.db.SendBatch(ctx, &b).Close(); err != nil {
		return err
	}
	if keyID == 0 {
		if storedStatus == nil {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "in flight", http.StatusConflict)
			return nil
		}
		for k, v := range storedHeaders {
			w.Header().Set(k, v)
		}
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(*storedStatus)
		_, _ = w.Write(stored)
		return nil
	}

	// 2. The key held and due for recovery, the payment sent, in one
	// statement, before the call.
	if _, err := s.db.Exec(ctx, `
		WITH held AS (
		    UPDATE idempotency_keys
		    SET lease_expires_at = $2::timestamptz + interval '30 seconds',
		        recovery_next_at = COALESCE(recovery_next_at, $2)
		    WHERE id = $1 AND fencing_token = 1 AND response_status IS NULL
		    RETURNING resource_id
		)
		UPDATE payments p SET state = 'PROVIDER_REQUEST_SENT', updated_at = $2
		FROM held WHERE p.id = held.resource_id AND p.state = 'RECEIVED'`, keyID, time.Now().UTC()); err != nil {
		return err
	}

	charge, err := s.provider.Charge(ctx, provider.ChargeRequest{
		IdempotencyKey: payments.ProviderKey(p.PaymentID), AmountMinor: amountMinor, Currency: c.Currency,
		PaymentMethod: c.PaymentMethod, Description: c.Description, PaymentID: p.PaymentID,
	})
	if err != nil || charge.Status != provider.StatusSucceeded {
		http.Error(w, fmt.Sprintf("provider: %v %s", err, charge.Status), http.StatusBadGateway)
		return nil
	}

	// 3. The stored answer, the payment completed and its second event, in
	// one transaction.
	done := time.Now().UTC()
	p.Status, p.UpdatedAt, p.ProviderReference = payments.StatusSucceeded, done, charge.ID
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	succeeded, err := json.Marshal(event{p, s.tenant})
	if err != nil {
		return err
	}
	headers := map[string]string{"Location": "/payments/" + p.PaymentID, "Content-Type": "application/json"}
	b = pgx.Batch{}
	b.Queue(`
		UPDATE idempotency_keys
		SET response_status = 201, response_headers = $3, response_body = $4,
		    completed_at = $5, lease_expires_at = NULL, recovery_next_at = NULL
		WHERE id = $1 AND fencing_token = $2 AND response_status IS NULL`, keyID, 1, headers, body, done)
	b.Queue(`
		UPDATE payments SET state = 'COMPLETED', provider_reference = $2, updated_at = $3
		WHERE id = $1 AND state = 'PROVIDER_REQUEST_SENT'`, p.PaymentID, charge.ID, done)
	b.Queue(`
		INSERT INTO outbox_events
		    (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
		VALUES ($1, 'payment', $2, 'PaymentSucceeded', $3, $4, $4)`, ids.NewEventID(done), p.PaymentID, succeeded, done)
	if err := s.db.SendBatch(ctx, &b).Close(); err != nil {
		return err
	}
	for k, v := range headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
	return nil
}
