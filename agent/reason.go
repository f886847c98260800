package agent

// Reasons a run ends or pauses with ([RunEnded.Reason], [End.Reason]).
// They are stored in journals and matched by clients, so a reason's
// spelling never changes; a new way of ending gets a new constant.
const (
	// Completed.
	ReasonAnswer = "answer" // the model answered without a tool call
	ReasonMarker = "marker" // a tool result began with the completion marker
	// ReasonHandoff: the run handed control to another agent (the
	// handoff tool) and ended as that agent's run ended (completed, or
	// failed with its status in the message), with its output.
	ReasonHandoff = "handoff"

	// Failed: limits.
	ReasonMaxSteps  = "max_steps"
	ReasonMaxTokens = "max_tokens"
	ReasonMaxCost   = "max_cost"
	// ReasonMaxToolCalls: the run's tool-call limit was reached.
	ReasonMaxToolCalls = "max_tool_calls"
	// ReasonBudgetExhausted: a child run reached the slice of its
	// parent's budget it was given (any axis; the message names it).
	ReasonBudgetExhausted = "budget_exhausted"
	ReasonTimeout         = "timeout" // the wall-time limit of an execution

	// Failed: the model or the loop's health.
	ReasonModelError       = "model_error"        // the model failed beyond its retries
	ReasonResponseTooLarge = "response_too_large" // a response the journal cannot hold
	ReasonInvalidCalls     = "invalid_calls"      // only malformed calls, turn after turn
	ReasonAllDenied        = "all_denied"         // the gate denied every call of a turn
	ReasonOutputLimit      = "output_limit"       // responses cut at the output-token limit
	ReasonEmptyAnswers     = "empty_answers"      // incomplete, empty responses
	ReasonFormatErrors     = "format_errors"      // text-action mode: no action in the format
	ReasonRepeatedCalls    = "repeated_calls"     // the same calls again and again
	ReasonSetup            = "setup"              // the setup script failed or could not run

	// Canceled.
	ReasonUser = "user" // a person canceled the run
	// ReasonParentEnded: a child run's parent ended without waiting for
	// its result ([ErrParentEnded]).
	ReasonParentEnded = "parent_ended"

	// Paused.
	ReasonApproval = "approval" // waiting for a person's approval
	ReasonAuth     = "auth"     // waiting for a person's authorization of a credential
	ReasonRevoked  = "revoked"  // the run's principal was revoked
	ReasonShutdown = "shutdown" // the runtime shut down during the run
	ReasonForked   = "forked"   // a fork that was not started yet
	// ReasonChildren: a spawn_agent, wait_agents or handoff call waits
	// for children that have not ended, and the execution gave its
	// worker back ([ExecParams].PauseForChildren); the call runs again
	// when the run is resumed.
	ReasonChildren = "children"

	// ReasonInterrupted: a person interrupted the turn (ErrInterrupted);
	// the run waits for their next message.
	ReasonInterrupted = "interrupted"
)

// InterruptSource is the source of the user.message that tells the model
// a person interrupted its turn ([ErrInterrupted]); InterruptNote is its
// text.
const (
	InterruptSource = "keel.interrupt"
	InterruptNote   = "[Keel: the user interrupted this turn before it finished (Ctrl-C). Calls that were running were stopped, and their results say so; nothing else of the turn ran. The user's next message says how to go on.]"
)
