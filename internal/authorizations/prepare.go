package authorizations

import "context"

// PrepareCapture reads the tenant's payment and validates req for its
// capture, as POST /payments/{paymentId}/capture does, for the other front
// doors that send the same command (the dashboard).
func (s *Service) PrepareCapture(ctx context.Context, tenant, paymentID string, req CaptureRequest) (Command, error) {
	return s.prepare(ctx, tenant, paymentID, req.validate)
}

// PrepareCancel is PrepareCapture for a cancel.
func (s *Service) PrepareCancel(ctx context.Context, tenant, paymentID string, req CancelRequest) (Command, error) {
	return s.prepare(ctx, tenant, paymentID, req.validate)
}
