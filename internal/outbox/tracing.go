package outbox

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

// StartPublishSpans starts the publish span of each event, a child of the
// trace context the event was created under (a root for an untraced
// event), and gives the event the span's own traceparent: the broker's
// message and the event log then carry the publish, and whatever follows
// (the ledger, webhook deliveries) continues the trace under it. It returns
// nil when tracer is nil (tracing is off).
func StartPublishSpans(tracer trace.Tracer, events []Event) []trace.Span {
	if tracer == nil {
		return nil
	}
	spans := make([]trace.Span, len(events))
	for i := range events {
		e := &events[i]
		ctx, span := tracer.Start(tracing.WithTraceParent(context.Background(), e.TraceParent), "publish "+e.Type,
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.message.id", e.ID), attribute.String("paymentsapi.event.type", e.Type),
				attribute.String("paymentsapi.aggregate.id", e.AggregateID)))
		spans[i] = span
		e.TraceParent = tracing.TraceParent(ctx)
	}
	return spans
}

// EndPublishSpans ends the publish spans with their results (nothing when spans
// is nil); a result missing from errs (a defective publisher) counts as a
// failure.
func EndPublishSpans(spans []trace.Span, errs []error) {
	for i, span := range spans {
		err := errors.New("no result from the publisher")
		if i < len(errs) {
			err = errs[i]
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "publish failed")
		}
		span.End()
	}
}
