package agent

import "context"

// Operation names one model call or tool run of a run for
// [ExecParams].Trace: ModelCall is the call's ordinal in the run (1-based,
// counting model.responded and model.failed events, as
// [State].ModelCalls does), or CallID the tool call. Seq is the run's
// newest event when the operation starts: what the operation records
// comes after it, so a live view of the operation (the model's text as
// it streams) is stale once a reader has seen a later event.
type Operation struct {
	RunID     string
	ModelCall int
	CallID    string
	Seq       int64
}

// seq is the run's newest event, under the executor's lock (tool calls
// run in parallel).
func (x *executor) seq() int64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.st.LastSeq
}

// ChainTrace is the [Wiring.Trace] hook that runs first, then second on
// the context first returned (nil first: second alone).
func ChainTrace(first, second func(context.Context, Operation) context.Context) func(context.Context, Operation) context.Context {
	if first == nil {
		return second
	}
	return func(ctx context.Context, op Operation) context.Context {
		return second(first(ctx, op), op)
	}
}
