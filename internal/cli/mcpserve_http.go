package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
)

// serveMCPHTTP serves keel mcp serve's tools over streamable HTTP on
// addr, a loopback address: like the stdio form it acts on the local
// journal with the local user's rights, so it is not offered to other
// machines (and the SDK refuses requests whose Host is not local, against
// DNS rebinding).
func (s *mcpServe) serveHTTP(ctx context.Context, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--http %q: want HOST:PORT", addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return usagef("--http %s: keel mcp serve acts with your rights on the local journal and listens on loopback addresses only (127.0.0.1:PORT); for a team, keel serve offers MCP at /mcp behind its tokens", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := s.server()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(s.a.stderr, "keel mcp serve: streamable HTTP on http://%s/mcp\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return hs.Shutdown(sctx)
	case err := <-done:
		return err
	}
}

// mcpRemote is Keel's MCP server as keel serve offers it at /mcp: each
// tool acts through the server's API with the caller's own token, so an
// MCP client may do exactly what its token may (create runs as its
// agents, decide approvals with approvals:write), and every action is
// recorded under the token as the API records it.
type mcpRemote struct {
	a    *app
	base string
	wait time.Duration
}

// mcpHandler returns the /mcp endpoint of keel serve at base: the SDK's
// streamable-HTTP handler behind the server's bearer tokens.
func (a *app) mcpHandler(tokens *token.Set, base string) http.Handler {
	s := &mcpRemote{a: a, base: base, wait: 2 * time.Minute}
	srv := s.server()
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
		if !token.HasScope(who, api.ScopeRunsRead) {
			return nil, fmt.Errorf("%w: token %s lacks the %s scope", auth.ErrInvalidToken, who.ID, api.ScopeRunsRead)
		}
		// Keel's tokens live until revoked; each API call made with one
		// is authenticated again. An admin token has every scope.
		return &auth.TokenInfo{UserID: who.Name, Scopes: append(slices.Clone(who.Scopes), api.ScopeRunsRead), Expiration: time.Now().Add(time.Hour)}, nil
	}
	// A 401 says "Bearer scope=..." (RFC 6750). Keel's tokens are made
	// with keel tokens create, not by an OAuth authorization server, so
	// there is no protected resource metadata to point to.
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{Scopes: []string{api.ScopeRunsRead}})(h)
}

func (s *mcpRemote) server() *sdk.Server {
	return newKeelMCPServer[remoteStartIn](s, mcpTexts{
		instructions: "Keel runs agents in a sandbox under a policy gate on this team server. Start a run with start_run, follow it with run_status and run_timeline, and answer the approvals it waits for with list_approvals and answer_approval. Every call acts with your API token's rights.",
		startRun:     "Start a run on the Keel server: a task for an agent in a workspace under the server's workspace roots (or the bundled demo). Returns when the run pauses for an approval, ends, or after a wait; the run keeps executing meanwhile.",
		wait:         "a wait",
	})
}

// remoteStartIn is start_run's input on a server.
type remoteStartIn struct {
	Task      string   `json:"task,omitempty" jsonschema:"what the agent should do (not needed with demo)"`
	Demo      bool     `json:"demo,omitempty" jsonschema:"run Keel's bundled demo (a scripted model fixes a failing test; it asks for approval before editing the file)"`
	Workspace string   `json:"workspace,omitempty" jsonschema:"directory on the server's machine, under one of its workspace roots (required unless demo)"`
	Model     string   `json:"model,omitempty" jsonschema:"model spec (default: the server's)"`
	Agent     string   `json:"agent,omitempty" jsonschema:"the agent the run executes as (default: the token's)"`
	MaxSteps  *int     `json:"max_steps,omitempty" jsonschema:"stop after this many model calls (default 500; 0: no limit)"`
	AllowHost []string `json:"allow_host,omitempty" jsonschema:"hosts the sandbox may reach"`
}

// client returns an API client with the token of the MCP request.
func (s *mcpRemote) client(req *sdk.CallToolRequest) (*client.Client, error) {
	var tok string
	if req.Extra != nil && req.Extra.Header != nil {
		if scheme, secret, ok := strings.Cut(strings.TrimSpace(req.Extra.Header.Get("Authorization")), " "); ok && strings.EqualFold(scheme, "Bearer") {
			tok = strings.TrimSpace(secret)
		}
	}
	if tok == "" {
		return nil, errors.New("no bearer token in the request")
	}
	return client.New(s.base, &client.Options{Token: tok})
}

// apiResult turns an API error into a tool error result the client sees;
// other errors stay errors.
func apiResult(err error) (*sdk.CallToolResult, any, error) {
	var e *api.Error
	if errors.As(err, &e) {
		return errResult("%s", e.Message), nil, nil
	}
	return errResult("%v", err), nil, nil
}

// remoteStatus is run_status's answer from an api.Run.
func remoteStatus(r *api.Run) *runStatus {
	out := &runStatus{RunID: r.ID, Status: r.Status, Steps: r.Steps, Cost: r.Cost, Reason: r.Reason, Message: r.Message, Output: r.Output, Executing: r.Executing, Workspace: r.Workspace}
	for _, p := range r.Pending {
		out.Waiting = append(out.Waiting, approvalInfo{RunID: p.RunID, CallID: p.CallID, Tool: p.Tool, Action: tailText(p.Action, 4000), Reason: tailText(p.Reason, 4000), Since: p.Requested.UTC().Format(time.RFC3339)})
	}
	return out
}

// settle follows run id from event from until it pauses or ends, or
// s.wait passes, and returns its status.
func (s *mcpRemote) settle(ctx context.Context, cl *client.Client, id string, from int64) (*sdk.CallToolResult, any, error) {
	wctx, cancel := context.WithTimeout(ctx, s.wait)
	for _, err := range cl.Events(wctx, id, &client.EventsParams{From: from, UntilStopped: true}) {
		if err != nil {
			break
		}
	}
	cancel()
	r, err := cl.Run(ctx, id)
	if err != nil {
		return apiResult(err)
	}
	return textResult(remoteStatus(r)), nil, nil
}

func (s *mcpRemote) startRun(ctx context.Context, req *sdk.CallToolRequest, in remoteStartIn) (*sdk.CallToolResult, any, error) {
	cl, err := s.client(req)
	if err != nil {
		return nil, nil, err
	}
	cr := &api.CreateRun{Demo: in.Demo, Task: in.Task, Workspace: in.Workspace, Model: in.Model, Agent: in.Agent, Network: in.AllowHost}
	cr.Limits.MaxSteps = in.MaxSteps
	if !in.Demo && strings.TrimSpace(in.Task) == "" {
		return errResult("give a task (or demo: true)"), nil, nil
	}
	run, err := cl.CreateRun(ctx, cr)
	if err != nil {
		return apiResult(err)
	}
	return s.settle(ctx, cl, run.ID, 1)
}

func (s *mcpRemote) runStatus(ctx context.Context, req *sdk.CallToolRequest, in runIn) (*sdk.CallToolResult, any, error) {
	cl, err := s.client(req)
	if err != nil {
		return nil, nil, err
	}
	r, err := cl.Run(ctx, in.RunID)
	if err != nil {
		return apiResult(err)
	}
	return textResult(remoteStatus(r)), nil, nil
}

func (s *mcpRemote) runTimeline(ctx context.Context, req *sdk.CallToolRequest, in runIn) (*sdk.CallToolResult, any, error) {
	cl, err := s.client(req)
	if err != nil {
		return nil, nil, err
	}
	if _, err := cl.Run(ctx, in.RunID); err != nil {
		return apiResult(err)
	}
	// keel runs show through the API, with the caller's token.
	tok := strings.TrimSpace(strings.TrimPrefix(req.Extra.Header.Get("Authorization"), "Bearer"))
	var out, errb bytes.Buffer
	if code := Main(ctx, []string{"--server", s.base, "--token", tok, "runs", "show", in.RunID}, &out, &errb); code != 0 {
		return errResult("%s", strings.TrimSpace(errb.String())), nil, nil
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: tailText(out.String(), 50000)}}}, nil, nil
}

func (s *mcpRemote) listApprovals(ctx context.Context, req *sdk.CallToolRequest, in approvalsIn) (*sdk.CallToolResult, any, error) {
	cl, err := s.client(req)
	if err != nil {
		return nil, nil, err
	}
	list, err := cl.Approvals(ctx)
	if err != nil {
		return apiResult(err)
	}
	out := []approvalInfo{}
	for _, p := range list {
		if in.RunID != "" && p.RunID != in.RunID {
			continue
		}
		out = append(out, approvalInfo{RunID: p.RunID, CallID: p.CallID, Tool: p.Tool, Action: tailText(p.Action, 4000), Reason: tailText(p.Reason, 4000), Since: p.Requested.UTC().Format(time.RFC3339)})
	}
	return textResult(map[string]any{"approvals": out}), nil, nil
}

func (s *mcpRemote) answerApproval(ctx context.Context, req *sdk.CallToolRequest, in answerIn) (*sdk.CallToolResult, any, error) {
	cl, err := s.client(req)
	if err != nil {
		return nil, nil, err
	}
	if in.RunID == "" || in.CallID == "" {
		return errResult("give run_id and call_id (see list_approvals)"), nil, nil
	}
	d := &api.Decide{Reason: in.Reason}
	var run *api.Run
	switch in.Decision {
	case "approve", "allow":
		run, err = cl.Approve(ctx, in.RunID, in.CallID, d)
	case "deny":
		if strings.TrimSpace(in.Reason) == "" {
			return errResult("a denial needs a reason (the model is shown it)"), nil, nil
		}
		run, err = cl.Deny(ctx, in.RunID, in.CallID, d)
	default:
		return errResult("decision %q: want approve or deny", in.Decision), nil, nil
	}
	if err != nil {
		return apiResult(err)
	}
	return s.settle(ctx, cl, in.RunID, run.Events+1)
}
