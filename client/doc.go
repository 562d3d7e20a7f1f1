// Package client is the Go client of the payments API. It speaks the
// contract of api/openapi.yaml (its types and low-level calls are generated
// from that file) and retries the way the contract asks:
//
//   - One idempotency key per logical operation. CreatePayment,
//     CreateRefund, CapturePayment, CancelPayment and the webhook calls
//     below generate a key once, before the first attempt, and send the
//     same key on every attempt; WithIdempotencyKey supplies your own
//     (store it before you call, and you can retry even after a crash).
//   - Only what may succeed on a repeat is retried: network errors and
//     timeouts, 5xx, 429 RATE_LIMITED, 409 IDEMPOTENCY_KEY_IN_USE, and a 202
//     whose outcome is not yet known. Never another 4xx (400, 401, 402, 404,
//     any other 409, 422): the same request would get the same answer.
//   - The server's word first: an error answer with Payments-Should-Retry
//     (ShouldRetryHeader) "false" is final, even a 5xx (a stored final
//     answer, say); "true" may be retried, within the attempts, the budget
//     and the deadline. Without the header the rule above decides.
//   - Exponential backoff with full jitter, capped (RetryPolicy.BaseDelay,
//     MaxDelay), and never sooner than the server's Retry-After.
//   - A bounded number of attempts (RetryPolicy.MaxAttempts), each bounded
//     in time (RetryPolicy.AttemptTimeout), and the caller's context: no
//     retry is scheduled past its deadline.
//   - A retry budget shared by every call of one Client (RetryPolicy.Budget):
//     a token bucket in which each call earns a fraction of a retry, so that
//     when the service is down a fleet of clients adds at most that fraction
//     to its load instead of multiplying it.
//   - Prefer: wait=N on these idempotent calls (Config.PreferWait,
//     WithPreferWait): a retry that finds the original still in flight is
//     held by the server until it finishes, instead of answered 409.
//
// A create answers a *PaymentResult or *RefundResult, a capture or a cancel
// (of a payment created with CaptureMethod CaptureManual) a *PaymentResult.
//
// Webhooks to merchants: CreateWebhookEndpoint and RotateWebhookSecret are
// idempotent calls like the creates (one key, reused on every attempt) and
// answer a *WebhookEndpointResult, with the secret (the server shows it in
// its first answer only, and GetWebhookEndpointSecret reveals it again);
// ResendEvent is one too, and its 202 is its answer. ListWebhookEndpoints,
// GetWebhookEndpoint, DeleteWebhookEndpoint, ListEvents, GetEvent and
// ListEventDeliveries are retried like reads. Verifying the deliveries
// themselves is the receiver's work, with a Standard Webhooks library (see
// examples/webhook-receiver in the repository).
// A 202 after the last attempt is a result, not an error: StillProcessing
// reports it, and a later retry with the same key, or a Get, tells the
// outcome. A payment, refund or capture the provider declined (402) is a
// *DeclinedError; every other problem the server answers is an *Error with
// its Code, Status, Detail and the members of the problem (PaymentID,
// RefundID, DeclineCode, CapturableAmount, ...).
package client
