package telemetry

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/tool"
)

// SpanContext is the span context of a model call or tool run of a run:
// the ids its derived span will have.
func SpanContext(op agent.Operation) trace.SpanContext {
	key := RootKey
	switch {
	case op.CallID != "":
		key = ToolKey(op.CallID)
	case op.ModelCall > 0:
		key = ChatKey(op.ModelCall)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: TraceID(op.RunID), SpanID: SpanID(op.RunID, key), TraceFlags: trace.FlagsSampled})
}

// TraceContext is an [agent.ExecParams].Trace: it puts the operation's
// span context in ctx (for OpenTelemetry propagators, such as
// [Transport]'s) and its W3C traceparent for tools ([tool.TraceParent]:
// TRACEPARENT in shell commands).
func TraceContext(ctx context.Context, op agent.Operation) context.Context {
	sc := SpanContext(op)
	return tool.WithTraceParent(trace.ContextWithSpanContext(ctx, sc), TraceParent(sc))
}

// TraceParent formats sc as a W3C traceparent header value.
func TraceParent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// Transport returns base (nil: http.DefaultTransport) adding the W3C
// traceparent of the request's context to every request, so that a model
// provider or any HTTP service sees which call of which run sent it.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &traceTransport{base: base}
}

type traceTransport struct{ base http.RoundTripper }

var w3c = propagation.TraceContext{}

func (t *traceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if sc := trace.SpanContextFromContext(req.Context()); sc.IsValid() {
		req = req.Clone(req.Context())
		w3c.Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	}
	return t.base.RoundTrip(req)
}
