package eval

import (
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
)

// Verdict is how a trial ended, from its journal and its checks.
type Verdict string

// The verdicts. Only Passed, Failed and Limit are scored; Infra trials
// are retried and, when no attempt gets past the infrastructure, reported
// apart, never counted against the agent.
const (
	Passed  Verdict = "passed"  // the run ended and every check passed
	Failed  Verdict = "failed"  // the run ended and a check failed
	Limit   Verdict = "limit"   // the run hit a limit or a health stop
	Infra   Verdict = "error"   // sandbox, provider or harness failure
	Skipped Verdict = "skipped" // not run: the evaluation's budget was spent
)

// Scored reports whether v counts in success rates.
func (v Verdict) Scored() bool { return v == Passed || v == Failed || v == Limit }

// Usage is what one trial's run did, measured from its journal.
type Usage struct {
	// Status and Reason are the run's end (run.completed, run.failed...).
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// Steps are model calls; Calls tool calls the model made.
	Steps int `json:"steps"`
	Calls int `json:"calls"`
	// Tool-call validity: calls refused as malformed (schema or JSON),
	// calls of unknown tools, workspace path refusals, policy denials,
	// asks (approval requests), asks decided deny (by a person or an
	// evaluation's rule) and calls run more than once.
	SchemaErrors int `json:"schema_errors"`
	UnknownTools int `json:"unknown_tools"`
	PathDenials  int `json:"path_denials"`
	Denials      int `json:"denials"`
	Asks         int `json:"asks"`
	AskDenials   int `json:"ask_denials"`
	Retries      int `json:"retries"`
	// ToolErrors are results marked is_error (a failing command counts).
	ToolErrors int `json:"tool_errors"`
	// Tokens and cost summed over model calls.
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	Cost         float64 `json:"cost"`
	// WallMS is from run.created to the run's last event.
	WallMS int64 `json:"wall_ms"`
	// Infra, when set, says what in the journal was the infrastructure's
	// failure: a provider error, a sandbox that could not run a call, a
	// setup that could not run.
	Infra string `json:"infra,omitempty"`
	// Output is the run's final output (a completed run).
	Output string `json:"-"`
}

// Valid is the fraction of the model's tool calls that passed validation
// (schema and known tool): 1 when it made none.
func (u *Usage) Valid() float64 {
	if u.Calls == 0 {
		return 1
	}
	return float64(u.Calls-u.SchemaErrors-u.UnknownTools) / float64(u.Calls)
}

// runtimeFailure starts a tool result the runtime wrote when it could not
// run a call (agent's executor).
const runtimeFailure = "the runtime could not run this call"

// Measure reads a trial's run from its events (all of them, from 1).
func Measure(events []journal.Event) (*Usage, error) {
	u := &Usage{}
	var first, last time.Time
	for i := range events {
		e := &events[i]
		if i == 0 {
			first = e.Time
		}
		last = e.Time
		v, err := agent.Decode(e)
		if err != nil {
			return nil, err
		}
		switch p := v.(type) {
		case *agent.ModelResponded:
			u.Steps++
			u.Calls += len(p.Message.ToolCalls)
			u.InputTokens += p.Usage.InputTokens
			u.OutputTokens += p.Usage.OutputTokens
			u.Cost += p.Cost
		case *agent.ModelFailed:
			if infraKind(p.Kind) && u.Infra == "" {
				u.Infra = "provider: " + p.Kind + ": " + oneLine(p.Message, 200)
			}
		case *agent.GateDecided:
			switch {
			case isPolicy(p.Policies, agent.PolicyValidate) && strings.HasPrefix(p.Reason, "unknown tool"):
				u.UnknownTools++
			case isPolicy(p.Policies, agent.PolicyValidate):
				u.SchemaErrors++
			case isPolicy(p.Policies, "keel.workspace"):
				u.PathDenials++
			case p.Effect == policy.Deny:
				u.Denials++
			}
		case *agent.ApprovalRequested:
			u.Asks++
		case *agent.ApprovalResolved:
			if p.Decision == policy.Deny {
				u.AskDenials++
			}
		case *agent.ToolStarted:
			if p.Attempt > 1 {
				u.Retries++
			}
		case *agent.ToolFinished:
			if p.IsError {
				u.ToolErrors++
			}
			if p.IsError && strings.HasPrefix(p.Content, runtimeFailure) && u.Infra == "" {
				u.Infra = "sandbox: " + oneLine(p.Content, 200)
			}
		case *agent.SetupFinished:
			if p.ExitCode != 0 || p.TimedOut {
				u.Infra = "setup: " + oneLine(p.Output, 200)
			}
		case *agent.RunEnded:
			u.Status = statusOf(e.Type)
			u.Reason = p.Reason
			u.Output = p.Output
		}
	}
	if !first.IsZero() {
		u.WallMS = last.Sub(first).Milliseconds()
	}
	return u, nil
}

// Classify gives a trial's verdict from its usage and whether its checks
// passed (checksOK is ignored unless the run ended so that checking it
// makes sense).
func Classify(u *Usage, checksOK bool) Verdict {
	switch {
	case u.Infra != "":
		return Infra
	case u.Status == "completed":
		if checksOK {
			return Passed
		}
		return Failed
	case u.Status == "failed" && u.Reason == agent.ReasonModelError:
		// A model error that was not the provider's (a replay that ran
		// out of recorded turns or no longer matches): the agent's.
		return Failed
	case u.Status == "failed" && u.Reason == agent.ReasonSetup:
		return Infra
	case u.Status == "failed":
		return Limit
	case u.Status == "paused" || u.Status == "canceled" || u.Status == "":
		return Infra
	}
	return Failed
}

// infraKind reports whether a model failure of kind is the provider's
// (transient, rate limits, stalls, authentication, unknown transport
// errors), not the recording's or the request's.
func infraKind(kind string) bool {
	switch kind {
	case model.KindRetryable.String(), model.KindRateLimited.String(), model.KindStalled.String(), model.KindAuth.String(), model.KindUnknown.String():
		return true
	}
	return false
}

func isPolicy(ps []string, id string) bool {
	for _, p := range ps {
		if p == id {
			return true
		}
	}
	return false
}

func statusOf(t journal.Type) string {
	switch t {
	case journal.RunCompleted:
		return "completed"
	case journal.RunFailed:
		return "failed"
	case journal.RunCanceled:
		return "canceled"
	case journal.RunPaused:
		return "paused"
	}
	return ""
}
