// Package service is the operations every front end of Keel shares, over
// one journal: creating, resuming, canceling, forking and rewinding runs,
// deciding approvals, answering a run's questions, authorizing its calls,
// listing and showing runs, agents and API tokens. It admits what a
// caller asks for (the agents a token may act as, the workspace roots,
// the sandbox, policy and models of the operator), gives limits and
// settings their defaults and their one meaning (docs/limits.md), and
// executes runs: in a pool of workers in this process, or, with a
// [Dispatcher], on the cluster's workers.
//
// # Quick start
//
//	store, _ := journal.Open(ctx, "keel.db")
//	rt := agent.NewRuntime(store, nil)
//	svc := service.New(rt, &service.Options{Builder: builder, Workers: 8})
//	svc.Start(ctx)               // resume runs a previous stop interrupted
//	run, err := svc.Create(ctx, service.As(token), &service.CreateRun{CreateRun: api.CreateRun{Task: "fix the tests", Workspace: dir}})
//	...
//	svc.Shutdown(ctx)            // pause executing runs (run.paused), cleanly
//
// keel serve puts package server (the HTTP API, its event streams, the
// web UI) in front of it, keel mcp serve Keel's MCP server, and the
// command line calls it for the local journal; the Go client (package
// client) reaches the same operations on a team server. Keel's [Builder]
// is internal/assemble's, configured by the command line; the library
// itself reads no flags, files or environment.
//
// # Adding an operation
//
// An operation is one method of [Service] in the file of its concern
// (runs.go, approvals.go, agents.go, ...), of the form
//
//	func (s *Service) Op(ctx context.Context, who *Caller, p *OpParams) (Result, error)
//
// where who is the person asking ([As] for an API token, [Local] for the
// command line on the journal's machine), results are the API's types
// (package server/api) where one exists, and a refusal the caller can act
// on is an [*Error] with one of the API's codes. Every front end is a
// thin caller: an HTTP handler and a client method, a command of the
// command line against its local (the service) and remote (the client)
// backend, an MCP tool. State-changing operations journal what they do
// in the run (or a system stream) and, for callers with a token, in the
// API's action log ([ActionStream]).
package service
