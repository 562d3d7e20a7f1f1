package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
)

// handleCreateRefund is POST /payments/{paymentId}/refunds: the same
// idempotency rules as POST /payments, through the same engine.
func handleCreateRefund(svc *refunds.Service, errs errorWriter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		paymentID := chi.URLParam(r, "paymentId")
		logging.Add(r.Context(), "payment_id", paymentID)
		key, prob := idempotencyKey(r)
		if prob != nil {
			prob.Write(w)
			return
		}
		var req refunds.CreateRequest
		if prob := decodeJSON(w, r, &req); prob != nil {
			prob.Write(w)
			return
		}
		tenant := tenantOf(r.Context())
		cmd, err := svc.Prepare(r.Context(), tenant, paymentID, req)
		if err != nil {
			errs.write(w, r, err)
			return
		}
		reply, err := svc.Create(r.Context(), tenant, key, cmd, preferWait(r.Header.Values("Prefer")))
		if err != nil {
			errs.write(w, r, err)
			return
		}
		logging.Add(r.Context(), "refund_id", reply.Resource.ID)
		writeReply(w, reply)
	}
}

// handleGetRefund is GET /payments/{paymentId}/refunds/{refundId}.
func handleGetRefund(svc *refunds.Service, errs errorWriter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ref, err := svc.Get(r.Context(), tenantOf(r.Context()), chi.URLParam(r, "paymentId"), chi.URLParam(r, "refundId"))
		if err != nil {
			errs.write(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, ref.View())
	}
}

// handleListRefunds is GET /payments/{paymentId}/refunds.
func handleListRefunds(svc *refunds.Service, errs errorWriter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		list, err := svc.List(r.Context(), tenantOf(r.Context()), chi.URLParam(r, "paymentId"))
		if err != nil {
			errs.write(w, r, err)
			return
		}
		views := make([]refunds.View, 0, len(list))
		for _, ref := range list {
			views = append(views, ref.View())
		}
		writeJSON(w, http.StatusOK, struct {
			Items []refunds.View `json:"items"`
		}{views})
	}
}
