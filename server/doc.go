// Package server is Keel's team server: an HTTP API under /v1 (runs,
// live event streams, approvals, agents, audit, tokens), a web UI under
// /ui embedded in the binary, and a bounded pool of workers that execute
// runs in the server's process.
//
// # Quick start
//
//	store, _ := journal.Open(ctx, "keel.db")
//	rt := agent.NewRuntime(store, nil)
//	h := server.NewHandler(rt, &server.Options{Wire: wire, Prepare: prepare, Workers: 8})
//	h.Start(ctx)                 // resume runs a previous stop interrupted
//	srv := &http.Server{Addr: "127.0.0.1:8420", Handler: h}
//	go srv.ListenAndServe()
//	...
//	srv.Shutdown(ctx)            // stop taking requests
//	h.Shutdown(ctx)              // pause executing runs (run.paused), cleanly
//
// The CLI's `keel serve` does exactly this with the CLI's wiring
// (internal/cli); the library itself reads no flags, files or
// environment.
//
// # Runs
//
// POST /v1/runs checks the request against the operator's settings,
// whoever asks ([Options].WorkspaceRoots, Protected, Sandbox, Policy,
// ReplayDirs, ModelBaseURLs, Validate, and the agents the token is bound
// to; admin tokens may override the sandbox and the policy, journaled),
// journals run.created and queues the run; fork and resume are checked
// the same way. A worker builds
// its live parts with [Options.Wire] and executes it with
// [agent.Runtime.Execute]. At most [Options.Workers] runs execute at once;
// the rest wait in submission order. A run that asks for an approval
// pauses and leaves its worker; approving it through the API queues it
// again. [Handler.Shutdown] cancels executions with cause
// [agent.ErrShutdown], so each journals run.paused, and [Handler.Start]
// queues them again, with every run left mid-execution by a crash.
//
// # Events
//
// GET /v1/runs/{id}/events streams a run's journal as Server-Sent Events:
// stored events from a sequence number, then new ones as they are
// appended (journal.Follow), resumable with Last-Event-ID. Delivery is at
// least once and in order across reconnects; each event carries its
// hash, so a client can verify the chain. A stream ends when its token
// is revoked ([Options].TokenCheck).
//
// # Authentication
//
// Every API route but the OpenAPI document needs a bearer token
// ("Authorization: Bearer keel_..."). Tokens carry scopes (runs:read,
// runs:write, approvals:write, admin) and a name, the person or system
// they belong to, and the agents their runs may act as; they are kept as
// SHA-256 digests in a system stream of the journal (package server/token). Every state-changing action is journaled in the
// system stream [ActionStream] with the token's name and id, and an
// approval's approval.resolved event names the person who decided and
// their token. The web UI keeps the token in an HttpOnly, SameSite=Strict
// cookie, refuses cross-site form posts, and signs in with a pasted token
// or a one-time code ([Handler.LoginCode]), never a token in a URL.
//
// # Errors
//
// Errors are JSON: {"error": {"code": "not_found", "message": "...",
// "status": 404}}, with the codes listed in package api. The OpenAPI
// document at /v1/openapi.json describes every route; a test checks that
// it lists exactly the routes the server registers.
package server
