// Package server is Keel's team server over a [service.Service]: an HTTP
// API under /v1 (runs, live event streams, approvals, agents, audit,
// tokens) and a web UI under /ui embedded in the binary. Every operation
// is the service's; the server authenticates the request, decodes it,
// calls the service and encodes the answer (an error by its code:
// [service.Error]).
//
// # Quick start
//
//	store, _ := journal.Open(ctx, "keel.db")
//	svc := service.New(agent.NewRuntime(store, nil), &service.Options{Builder: builder, Workers: 8})
//	svc.Start(ctx)               // resume runs a previous stop interrupted
//	h := server.NewHandler(svc, nil)
//	srv := &http.Server{Addr: "127.0.0.1:8420", Handler: h}
//	go srv.ListenAndServe()
//	...
//	srv.Shutdown(ctx)            // stop taking requests
//	svc.Shutdown(ctx)            // pause executing runs (run.paused), cleanly
//
// The CLI's `keel serve` does exactly this with the CLI's assembler
// (internal/assemble); the library itself reads no flags, files or
// environment. What POST /v1/runs admits, how runs are executed, resumed
// after a stop and adopted from a stopped server are the service's
// (package service).
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
// system stream [service.ActionStream] with the token's name and id, and an
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
