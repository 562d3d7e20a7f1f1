package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// ReplayedHeader marks an answer replayed from the idempotency store.
const ReplayedHeader = "Idempotent-Replayed"

// MaxBodyBytes is the largest accepted request body.
const MaxBodyBytes = 16 << 10

type tenantKey struct{}

func withTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

func tenantOf(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// handleCreatePayment is POST /payments.
func handleCreatePayment(svc *payments.Service, errs errorWriter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, prob := idempotencyKey(r)
		if prob != nil {
			prob.Write(w)
			return
		}
		var req payments.CreateRequest
		if prob := decodeJSON(w, r, &req); prob != nil {
			prob.Write(w)
			return
		}
		cmd, err := req.Validate()
		if err != nil {
			errs.write(w, r, err)
			return
		}
		reply, err := svc.Create(r.Context(), tenantOf(r.Context()), key, cmd, preferWait(r.Header.Values("Prefer")))
		if err != nil {
			errs.write(w, r, err)
			return
		}
		logging.Add(r.Context(), "payment_id", reply.Resource.ID)
		writeReply(w, reply)
	}
}

// idempotencyKey reads the Idempotency-Key header of a request.
func idempotencyKey(r *http.Request) (string, *problem.Problem) {
	key, err := idempotency.ParseKey(r.Header.Values(idempotency.Header))
	switch {
	case errors.Is(err, idempotency.ErrKeyMissing):
		return "", problem.New(http.StatusBadRequest, problem.IdempotencyKeyMissing, err.Error())
	case err != nil:
		return "", problem.New(http.StatusBadRequest, problem.IdempotencyKeyInvalid, err.Error())
	}
	return key, nil
}

// preferWait reads `Prefer: wait=N` (RFC 7240): how long the client is
// willing to wait for an in-flight original, capped by the engine.
func preferWait(values []string) time.Duration {
	for _, v := range values {
		for _, pref := range strings.Split(v, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(pref), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(val), `"`))
			if err != nil || n <= 0 {
				return 0
			}
			return min(time.Duration(n)*time.Second, idempotency.MaxWait)
		}
	}
	return 0
}

// decodeJSON reads a command's JSON body into dst: application/json, at most
// MaxBodyBytes, exactly one object, no unknown fields.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) *problem.Problem {
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mediaType != "application/json" {
		return problem.New(http.StatusUnsupportedMediaType, problem.UnsupportedMediaType,
			"Send the body as Content-Type: application/json.")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return problem.New(http.StatusRequestEntityTooLarge, problem.PayloadTooLarge,
				fmt.Sprintf("The body must be at most %d bytes.", MaxBodyBytes))
		}
		return problem.New(http.StatusBadRequest, problem.MalformedJSON, "The body could not be read.")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonProblem(err)
	}
	if dec.More() || dec.InputOffset() < int64(len(bytes.TrimRight(body, " \t\r\n"))) {
		return problem.New(http.StatusBadRequest, problem.MalformedJSON,
			"The body must hold exactly one JSON object.")
	}
	return nil
}

// jsonProblem explains a decoding error: a wrong type or an unknown field is
// a validation failure of that field; anything else is malformed JSON.
func jsonProblem(err error) *problem.Problem {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		p := problem.New(http.StatusBadRequest, problem.ValidationFailed, "One or more fields are invalid.")
		p.Errors = []problem.FieldError{{Field: typeErr.Field, Message: "must be a " + jsonType(typeErr.Type.Kind().String())}}
		return p
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		p := problem.New(http.StatusBadRequest, problem.ValidationFailed, "One or more fields are invalid.")
		p.Errors = []problem.FieldError{{Field: strings.Trim(field, `"`), Message: "is not a known field"}}
		return p
	}
	return problem.New(http.StatusBadRequest, problem.MalformedJSON, "The body is not a valid JSON object.")
}

func jsonType(kind string) string {
	switch kind {
	case "ptr", "string":
		return "string"
	default:
		return kind
	}
}

// handleGetPayment is GET /payments/{paymentId}.
func handleGetPayment(svc *payments.Service, errs errorWriter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "paymentId")
		logging.Add(r.Context(), "payment_id", id)
		p, err := svc.Get(r.Context(), tenantOf(r.Context()), id)
		if err != nil {
			errs.write(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, p.View())
	}
}

// listResponse is the body of GET /payments.
type listResponse struct {
	Items      []payments.View `json:"items"`
	NextCursor string          `json:"nextCursor,omitempty"`
}

// handleListPayments is GET /payments.
func handleListPayments(svc *payments.Service, errs errorWriter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		lq := payments.ListQuery{AccountID: q.Get("accountId"), Cursor: q.Get("cursor"), Limit: 20}
		if s := q.Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 100 {
				p := problem.New(http.StatusBadRequest, problem.ValidationFailed, "One or more parameters are invalid.")
				p.Errors = []problem.FieldError{{Field: "limit", Message: "must be an integer from 1 to 100"}}
				p.Write(w)
				return
			}
			lq.Limit = n
		}
		page, err := svc.List(r.Context(), tenantOf(r.Context()), lq)
		if err != nil {
			errs.write(w, r, err)
			return
		}
		resp := listResponse{Items: make([]payments.View, 0, len(page.Items)), NextCursor: page.NextCursor}
		for _, p := range page.Items {
			resp.Items = append(resp.Items, p.View())
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
