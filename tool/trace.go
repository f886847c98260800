package tool

import "context"

type traceParentKey struct{}

// WithTraceParent returns ctx carrying a W3C traceparent value
// ("00-TRACEID-SPANID-01") for the tool call ctx runs: the runtime's
// telemetry sets it, and tools pass it on (shell commands get it as
// TRACEPARENT, HTTP requests as the traceparent header), so that what a
// call starts joins the run's trace.
func WithTraceParent(ctx context.Context, tp string) context.Context {
	return context.WithValue(ctx, traceParentKey{}, tp)
}

// TraceParent returns the traceparent of ctx, or "".
func TraceParent(ctx context.Context) string {
	s, _ := ctx.Value(traceParentKey{}).(string)
	return s
}
