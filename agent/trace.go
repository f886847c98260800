package agent

// Operation names one model call or tool run of a run for
// [ExecParams].Trace: ModelCall is the call's ordinal in the run (1-based,
// counting model.responded and model.failed events, as
// [State].ModelCalls does), or CallID the tool call.
type Operation struct {
	RunID     string
	ModelCall int
	CallID    string
}
