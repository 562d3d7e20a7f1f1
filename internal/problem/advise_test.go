package problem_test

import (
	"net/http"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/problem"
)

func TestAStoredFinalAnswerIsNeverToBeRetriedWhateverItsStatus(t *testing.T) {
	for _, c := range []struct {
		status int
		code   problem.Code
		final  bool
		want   string
	}{
		{http.StatusOK, "", false, ""},
		{http.StatusAccepted, "", false, ""},
		{http.StatusBadRequest, problem.ValidationFailed, false, "false"},
		{http.StatusConflict, problem.IdempotencyKeyExpired, false, "false"},
		{http.StatusConflict, problem.IdempotencyKeyInUse, false, "true"},
		{http.StatusTooManyRequests, problem.RateLimited, false, "true"},
		{http.StatusInternalServerError, problem.Internal, false, "true"},
		{http.StatusServiceUnavailable, problem.ServiceUnavailable, false, "true"},
		{http.StatusPaymentRequired, "PAYMENT_DECLINED", true, "false"},
		{http.StatusServiceUnavailable, "", true, "false"},
		{http.StatusConflict, problem.IdempotencyKeyInUse, true, "false"},
	} {
		h := http.Header{}
		problem.AdviseRetry(h, c.status, c.code, c.final)
		if got := h.Get(problem.ShouldRetryHeader); got != c.want {
			t.Errorf("%d %s (final %v): Payments-Should-Retry %q, want %q", c.status, c.code, c.final, got, c.want)
		}
	}
}
