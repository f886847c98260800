package api

import "time"

// Eval is an evaluation kept on the server (docs/eval.md): a suite run
// by keel eval run under one configuration, with its overall numbers.
type Eval struct {
	ID    string `json:"id"`
	Suite string `json:"suite"`
	// Config names the configuration; Model, Policy and Approve are
	// what it set (Policy "" for Keel's default), TrialsPerCase the
	// --trials of the evaluation.
	Config        string    `json:"config"`
	Model         string    `json:"model"`
	Policy        string    `json:"policy,omitempty"`
	Approve       string    `json:"approve,omitempty"`
	TrialsPerCase int       `json:"trials_per_case"`
	Cases         int       `json:"cases"`
	Started       time.Time `json:"started"`
	Finished      time.Time `json:"finished"`
	// Spent is the dollars the trials' runs cost.
	Spent   float64   `json:"spent"`
	Overall EvalStats `json:"overall"`
}

// EvalStats are the numbers of a set of trials (one case, or all).
type EvalStats struct {
	// Trials, by verdict: Passed, Failed (the checks), Limit (the run
	// hit a limit), Errored (the infrastructure failed: not scored),
	// Skipped; Scored are the passed, failed and limit ones. Retried
	// counts attempts run again after an infrastructure error.
	Trials  int `json:"trials"`
	Scored  int `json:"scored"`
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Limit   int `json:"limit"`
	Errored int `json:"errored"`
	Skipped int `json:"skipped"`
	Retried int `json:"retried"`
	// Rate is Passed/Scored, Lo and Hi its Wilson 95% interval.
	Rate float64 `json:"rate"`
	Lo   float64 `json:"lo"`
	Hi   float64 `json:"hi"`
	// PassAtK and PassHatK (pass^k) for K; null when no case has K
	// scored trials. Flaky counts cases whose scored trials disagree.
	K        int      `json:"k"`
	PassAtK  *float64 `json:"pass_at_k"`
	PassHatK *float64 `json:"pass_hat_k"`
	Flaky    int      `json:"flaky"`
	// Tool-call validity over the scored trials: Valid is the fraction
	// of calls neither malformed nor of an unknown tool.
	Calls        int     `json:"calls"`
	Valid        float64 `json:"valid"`
	SchemaErrors int     `json:"schema_errors"`
	UnknownTools int     `json:"unknown_tools"`
	PathDenials  int     `json:"path_denials"`
	Denials      int     `json:"denials"`
	Asks         int     `json:"asks"`
	AskDenials   int     `json:"ask_denials"`
	CallRetries  int     `json:"call_retries"`
	// Per scored trial: dollars, tokens, wall seconds, steps.
	Cost    EvalSummary `json:"cost"`
	Tokens  EvalSummary `json:"tokens"`
	WallSec EvalSummary `json:"wall_seconds"`
	Steps   EvalSummary `json:"steps"`
	// Expected counts trials whose case expects a verdict (a frozen
	// run's), Matched those that reproduced it.
	Expected int `json:"expected,omitempty"`
	Matched  int `json:"matched,omitempty"`
}

// EvalSummary summarizes a distribution over trials.
type EvalSummary struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Stdev  float64 `json:"stdev"`
}

// EvalList is GET /v1/evals' answer, newest first. Unreadable names the
// evaluations whose result could not be read, and why.
type EvalList struct {
	Evals      []Eval   `json:"evals"`
	Unreadable []string `json:"unreadable,omitempty"`
}

// EvalReport is GET /v1/evals/{id}'s answer: the evaluation, its cases'
// numbers and every trial.
type EvalReport struct {
	Eval   Eval        `json:"eval"`
	Cases  []EvalCase  `json:"cases"`
	Trials []EvalTrial `json:"trials"`
}

// EvalCase is one case's numbers.
type EvalCase struct {
	Case string `json:"case"`
	EvalStats
}

// EvalTrial is one trial: its final attempt's run and verdict (passed,
// failed, limit, error, skipped), and the attempts before it that failed
// on the infrastructure.
type EvalTrial struct {
	Case    string `json:"case"`
	Trial   int    `json:"trial"`
	Attempt int    `json:"attempt"`
	RunID   string `json:"run_id,omitempty"`
	Verdict string `json:"verdict"`
	// Status and Reason are how the run ended.
	Status string `json:"status,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Error says what failed when the verdict is error or skipped.
	Error   string  `json:"error,omitempty"`
	Steps   int     `json:"steps"`
	Calls   int     `json:"calls"`
	Tokens  int64   `json:"tokens"`
	Cost    float64 `json:"cost"`
	WallMS  int64   `json:"wall_ms"`
	Asks    int     `json:"asks"`
	Denials int     `json:"denials"`
	// FailedChecks name the checks that failed, with why.
	FailedChecks []string      `json:"failed_checks,omitempty"`
	Expected     string        `json:"expected,omitempty"`
	Retried      []EvalAttempt `json:"retried,omitempty"`
}

// EvalAttempt is an attempt that failed on the infrastructure and was
// run again.
type EvalAttempt struct {
	Attempt int    `json:"attempt"`
	RunID   string `json:"run_id,omitempty"`
	Error   string `json:"error"`
}
