package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/service"
)

// RemoteOptions configure [Remote].
type RemoteOptions struct {
	// Wait bounds how long start_run and answer_approval wait for the
	// run to pause or end; 0 means [DefaultWait].
	Wait time.Duration
	// Client, if set, makes every call (keel mcp serve --server: the
	// command line's client and token); nil means a client of base with
	// the bearer token of each MCP request (keel serve's /mcp).
	Client *client.Client
	// Dir, with Client, is the directory keel mcp serve --server works
	// in: run_id "last" names the newest run of the server there, as a
	// RUN argument of keel --server URL does ("": "last" names no run).
	Dir string
}

// Remote returns Keel's MCP server on the team server at base (or of
// o.Client): each tool
// calls the server's API through the Go client, so an MCP client may do
// exactly what the token may (create runs as its agents, decide approvals
// with approvals:write), and the server records every action under the
// token as the API does.
func Remote(base string, o *RemoteOptions) *sdk.Server {
	if o == nil {
		o = &RemoteOptions{}
	}
	r := &remote{base: base, cl: o.Client, dir: o.Dir}
	return newServer[*remoteStart](r, o.Wait, nil, texts{
		instructions: "Keel runs agents in a sandbox under a policy gate on this team server. Start a run with start_run, follow it with run_status and run_timeline, answer the approvals and questions it waits for with list_approvals, answer_approval, list_inputs and answer_input, and list_runs, cancel_run or resume_run (with a message or higher limits) as you need. Every call acts with your API token's rights.",
		startRun:     "Start a run on the Keel server: a task for an agent in a workspace under the server's workspace roots (or the bundled demo). Returns when the run pauses for an approval, ends, or after a wait; the run keeps executing meanwhile.",
		wait:         "a wait",
	})
}

// Handler returns keel serve's /mcp endpoint for the server at base: the
// SDK's streamable-HTTP handler of [Remote] behind the server's bearer
// tokens, each tool acting with the caller's token.
func Handler(tokens *token.Set, base string) http.Handler {
	srv := Remote(base, nil)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{
		// The server may listen on every interface; the bearer token is
		// what protects the endpoint (a browser cannot send it).
		DisableLocalhostProtection: true,
	})
	verify := func(ctx context.Context, secret string, _ *http.Request) (*auth.TokenInfo, error) {
		who, err := tokens.Authenticate(ctx, secret)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		// Keel's tokens live until revoked; each API call made with one
		// is authenticated again. An admin token has every scope.
		return &auth.TokenInfo{UserID: who.Name, Scopes: append(slices.Clone(who.Scopes), api.ScopeRunsRead), Expiration: time.Now().Add(time.Hour)}, nil
	}
	// A 401 says "Bearer scope=..." (RFC 6750). Keel's tokens are made
	// with keel tokens create, not by an OAuth authorization server, so
	// there is no protected resource metadata to point to.
	authed := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{Scopes: []string{api.ScopeRunsRead}})(h)
	// A valid token without runs:read is answered as the API answers it
	// (403, "this needs the runs:read scope; token ID (NAME) has ..."),
	// with RFC 6750's insufficient_scope challenge: not 401, as if it were
	// invalid.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if kind, secret, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(kind, "bearer") {
			if who, err := tokens.Authenticate(r.Context(), strings.TrimSpace(secret)); err == nil {
				if err := service.NeedScope(who, api.ScopeRunsRead); err != nil {
					w.Header().Set("WWW-Authenticate", fmt.Sprintf("Bearer error=\"insufficient_scope\", scope=%q", api.ScopeRunsRead))
					http.Error(w, err.Error(), http.StatusForbidden)
					return
				}
			}
		}
		authed.ServeHTTP(w, r)
	})
}

// remoteStart is start_run's input on a team server.
type remoteStart struct {
	Task      string   `json:"task,omitempty" jsonschema:"what the agent should do (not needed with demo)"`
	Demo      bool     `json:"demo,omitempty" jsonschema:"run Keel's bundled demo (a scripted model fixes a failing test; it asks for approval before editing the file)"`
	Workspace string   `json:"workspace,omitempty" jsonschema:"directory on the server's machine, under one of its workspace roots (required unless demo)"`
	Model     string   `json:"model,omitempty" jsonschema:"model spec (default: the server's)"`
	Agent     string   `json:"agent,omitempty" jsonschema:"the agent the run executes as (default: the token's)"`
	Policy    string   `json:"policy,omitempty" jsonschema:"the run's tool-call policy: server (the default), default, demo, or a policy file's content; any but the server's needs an admin token"`
	MaxSteps  *int     `json:"max_steps,omitempty"`
	MaxTokens *int64   `json:"max_tokens,omitempty"`
	MaxCost   *float64 `json:"max_cost,omitempty"`
	Timeout   string   `json:"timeout,omitempty"`
	AllowHost []string `json:"allow_host,omitempty" jsonschema:"hosts the sandbox may reach"`
	Team      bool     `json:"team,omitempty" jsonschema:"let the agent start child agents (spawn_agent, wait_agents) from the workspace's trusted .keel/agents definitions or inline ones, under this run's budget"`
}

func (in *remoteStart) request(func(string) (*policy.Engine, error)) (*service.CreateRun, error) {
	return &service.CreateRun{CreateRun: api.CreateRun{Demo: in.Demo, Task: in.Task, Workspace: in.Workspace, Model: in.Model, Agent: in.Agent, Policy: in.Policy, Network: in.AllowHost, Team: in.Team,
		Limits: api.Limits{MaxSteps: in.MaxSteps, MaxTokens: in.MaxTokens, MaxCost: in.MaxCost, Timeout: in.Timeout}}}, nil
}

// remote is the backend over a team server's API.
type remote struct {
	base string
	cl   *client.Client
	dir  string
}

// client returns the fixed client, or one with the token of the MCP
// request.
func (r *remote) client(req *sdk.CallToolRequest) (*client.Client, error) {
	if r.cl != nil {
		return r.cl, nil
	}
	var tok string
	if req != nil && req.Extra != nil && req.Extra.Header != nil {
		if scheme, secret, ok := strings.Cut(strings.TrimSpace(req.Extra.Header.Get("Authorization")), " "); ok && strings.EqualFold(scheme, "Bearer") {
			tok = strings.TrimSpace(secret)
		}
	}
	if tok == "" {
		return nil, errors.New("no bearer token in the request")
	}
	return client.New(r.base, &client.Options{Token: tok})
}

// resolve asks the server, which resolves ref by the same rule; "last"
// is the newest run in Dir, from the server's list, as keel --server URL
// finds it (the server itself knows no directory).
func (r *remote) resolve(ctx context.Context, req *sdk.CallToolRequest, ref string) (string, error) {
	if ref == service.LastRef && r.cl != nil && r.dir != "" {
		runs, err := r.cl.Runs(ctx, nil)
		if err != nil {
			return "", err
		}
		return service.LastIn(runs, r.dir)
	}
	run, err := r.run(ctx, req, ref)
	return run.ID, err
}

func (r *remote) create(ctx context.Context, req *sdk.CallToolRequest, cr *service.CreateRun) (api.Run, error) {
	cl, err := r.client(req)
	if err != nil {
		return api.Run{}, err
	}
	run, err := cl.CreateRun(ctx, &cr.CreateRun)
	if err != nil {
		return api.Run{}, err
	}
	return *run, nil
}

func (r *remote) run(ctx context.Context, req *sdk.CallToolRequest, id string) (api.Run, error) {
	cl, err := r.client(req)
	if err != nil {
		return api.Run{}, err
	}
	run, err := cl.Run(ctx, id)
	if err != nil {
		return api.Run{}, err
	}
	return *run, nil
}

func (r *remote) events(ctx context.Context, req *sdk.CallToolRequest, id string) ([]journal.Event, error) {
	cl, err := r.client(req)
	if err != nil {
		return nil, err
	}
	if _, err := cl.Run(ctx, id); err != nil {
		return nil, err
	}
	var evs []journal.Event
	for e, err := range cl.Events(ctx, id, &client.EventsParams{NoFollow: true}) {
		if err != nil {
			return nil, err
		}
		evs = append(evs, e)
	}
	return evs, nil
}

func (r *remote) approvals(ctx context.Context, req *sdk.CallToolRequest) ([]api.Approval, error) {
	cl, err := r.client(req)
	if err != nil {
		return nil, err
	}
	return cl.Approvals(ctx)
}

func (r *remote) decide(ctx context.Context, req *sdk.CallToolRequest, d *service.Decision) (api.Run, error) {
	cl, err := r.client(req)
	if err != nil {
		return api.Run{}, err
	}
	if d.CallID == "" {
		// The API's path names the call: the one the run waits for, by
		// the service's rule.
		run, err := cl.Run(ctx, d.RunID)
		if err != nil {
			return api.Run{}, err
		}
		if d.CallID, err = service.ResolveCall(run.ID, "", run.Pending); err != nil {
			return api.Run{}, err
		}
	}
	var run *api.Run
	if d.Effect == policy.Deny {
		run, err = cl.Deny(ctx, d.RunID, d.CallID, &d.Decide)
	} else {
		run, err = cl.Approve(ctx, d.RunID, d.CallID, &d.Decide)
	}
	if err != nil {
		return api.Run{}, err
	}
	return *run, nil
}

// settle follows run id's events from event from until one stops its
// execution, or wait passes.
func (r *remote) settle(ctx context.Context, req *sdk.CallToolRequest, id string, from int64, wait time.Duration) {
	cl, err := r.client(req)
	if err != nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for _, err := range cl.Events(wctx, id, &client.EventsParams{From: from, UntilStopped: true}) {
		if err != nil {
			return
		}
	}
}

// errText is the API's message of a refusal.
func (r *remote) errText(err error) string {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

func (r *remote) list(ctx context.Context, req *sdk.CallToolRequest, status []string, limit int) ([]api.Run, error) {
	cl, err := r.client(req)
	if err != nil {
		return nil, err
	}
	return cl.Runs(ctx, &client.RunsParams{Status: status, Limit: limit})
}

func (r *remote) cancel(ctx context.Context, req *sdk.CallToolRequest, id string) (api.Run, error) {
	return r.runCall(req, func(cl *client.Client) (*api.Run, error) { return cl.Cancel(ctx, id) })
}

func (r *remote) resume(ctx context.Context, req *sdk.CallToolRequest, id string, rr *api.ResumeRun) (api.Run, error) {
	return r.runCall(req, func(cl *client.Client) (*api.Run, error) { return cl.Resume(ctx, id, rr) })
}

func (r *remote) inputs(ctx context.Context, req *sdk.CallToolRequest) ([]api.Input, error) {
	cl, err := r.client(req)
	if err != nil {
		return nil, err
	}
	return cl.Inputs(ctx)
}

func (r *remote) answer(ctx context.Context, req *sdk.CallToolRequest, runID, id string, a *api.AnswerInput) (api.Run, error) {
	return r.runCall(req, func(cl *client.Client) (*api.Run, error) { return cl.AnswerInput(ctx, runID, id, a) })
}

// runCall makes one API call that answers with a run, with the client of
// req.
func (r *remote) runCall(req *sdk.CallToolRequest, call func(*client.Client) (*api.Run, error)) (api.Run, error) {
	cl, err := r.client(req)
	if err != nil {
		return api.Run{}, err
	}
	run, err := call(cl)
	if err != nil {
		return api.Run{}, err
	}
	return *run, nil
}
