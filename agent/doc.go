// Package agent is Keel's run loop: it creates runs, folds their journals
// into [State], decides the next [Action] with the pure [Step] function,
// and executes actions (model calls, gated tool calls, approvals) while
// journaling every one of them.
//
// # Quick start
//
//	store, _ := sqlite.Open("keel.db", nil)
//	rt := agent.NewRuntime(store, nil)
//	id, _ := rt.Create(ctx, &agent.RunCreated{Task: "fix the failing test", Tools: agent.ToolInfos(reg), ...})
//	out, err := rt.Execute(ctx, id, &agent.ExecParams{Wiring: agent.Wiring{Model: m, Tools: reg, Env: env}})
//
// # The journal is the run
//
// A run is its journal (package journal): run.created fixes everything the
// step function needs (task, system prompt, tools, limits, completion
// marker). Each execution folds the journal ([Fold]), then loops: [Step]
// decides, the executor acts and appends the outcome as events, and the
// new events are folded in. Because Step reads only the folded state (no
// clock, no randomness, no map order), replaying a journal yields the same
// decisions (docs/architecture.md, "Contract — determinism").
//
// # Side effects
//
// tool.started is appended before a tool runs and tool.finished after.
// After a crash, [Runtime.Execute] resumes: a call found started but not
// finished is re-run only if its tool is read-only or idempotent;
// otherwise the model receives a result saying the outcome is unknown.
// Every call ends with exactly one result, real or synthetic, so a
// conversation never holds an orphan call (docs/architecture.md, "Contract — side
// effects").
//
// # The gate
//
// Each call is validated against its tool's JSON Schema, its paths are
// resolved inside the workspace, and the run's policy decides allow, ask or
// deny; the decision is journaled as gate.decided before anything runs.
// Malformed calls become error results the model can correct.
//
// # Concurrency
//
// Calls of one model turn run concurrently unless their scopes conflict
// (see tool.Tool.Scope): a call waits for every earlier call of the turn
// that writes a path it touches, so mutations apply in the model's order.
package agent
