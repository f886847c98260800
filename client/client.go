// Package client is a Go client for Keel's team server API (/v1, see
// package server): create, list, cancel, resume and fork runs, follow a
// run's events live, decide approvals, manage agents and tokens, and
// verify the audit trail.
//
//	c, _ := client.New("http://127.0.0.1:8420", &client.Options{Token: os.Getenv("KEEL_TOKEN")})
//	run, _ := c.CreateRun(ctx, &api.CreateRun{Demo: true})
//	for e, err := range c.Events(ctx, run.ID, &client.EventsParams{UntilStopped: true}) { ... }
//
// Errors the server reports are [*api.Error] values with a stable Code;
// match them with errors.As. Transport failures are returned as they
// are.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/server/api"
)

// Client calls one Keel server. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
	retry time.Duration
}

// Options configures [New]. The zero value is valid (no token: only the
// OpenAPI document is readable).
type Options struct {
	// Token is the API token sent as "Authorization: Bearer TOKEN".
	Token string
	// HTTPClient makes the requests; nil means a client with no overall
	// timeout (event streams are long-lived; bound calls with their
	// context).
	HTTPClient *http.Client
	// Retry is the wait before an event stream reconnects after its
	// connection broke; 0 means one second.
	Retry time.Duration
}

// New returns a client for the server at baseURL ("http://host:port").
// It returns an error for a URL that is not absolute http or https.
func New(baseURL string, opts *Options) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: server URL %q: want http://HOST:PORT or https://HOST", redact.URL(baseURL))
	}
	if part := redact.URLCredential(baseURL); part != "" {
		return nil, fmt.Errorf("client: server URL %s carries a credential (%s): give it without; the client authenticates with Options.Token", redact.URL(baseURL), part)
	}
	c := &Client{base: u, hc: &http.Client{}, retry: time.Second}
	if opts != nil {
		c.token = opts.Token
		if opts.HTTPClient != nil {
			c.hc = opts.HTTPClient
		}
		if opts.Retry > 0 {
			c.retry = opts.Retry
		}
	}
	return c, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.base.String() }

// do sends a request with a JSON body (nil for none) and decodes a JSON
// response into out (nil to discard it). A response with an error status
// is returned as *api.Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	resp, err := c.send(ctx, method, path, q, body, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("client: %s %s: decode response: %w", method, path, err)
	}
	return nil
}

// send performs a request and returns the response if its status is
// 2xx; otherwise it reads the error body and returns it as *api.Error.
// path is already escaped: each segment that holds a value (a run or call
// id) went through url.PathEscape, and is sent as it is, never escaped
// twice.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, body any, header http.Header) (*http.Response, error) {
	u := *c.base
	u.RawPath = c.base.EscapedPath() + path
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: bad path: %w", method, path, err)
	}
	u.Path = p
	u.RawQuery = q.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("client: encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb api.ErrorBody
	if json.Unmarshal(b, &eb) != nil || eb.Error.Code == "" {
		return nil, &api.Error{Code: api.CodeInternal, Status: resp.StatusCode,
			Message: fmt.Sprintf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))}
	}
	eb.Error.Status = resp.StatusCode
	return nil, &eb.Error
}

// IsCode reports whether err is an *api.Error with code.
func IsCode(err error, code string) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Code == code
}

// RunsParams filters [Client.Runs]. The zero value lists every run.
type RunsParams = api.RunsParams

// Runs lists runs, newest first.
func (c *Client) Runs(ctx context.Context, p *RunsParams) ([]api.Run, error) {
	q := url.Values{}
	if p != nil {
		if len(p.Status) > 0 {
			q.Set("status", strings.Join(p.Status, ","))
		}
		if p.Limit > 0 {
			q.Set("limit", strconv.Itoa(p.Limit))
		}
	}
	var out api.RunList
	return out.Runs, c.do(ctx, http.MethodGet, "/v1/runs", q, nil, &out)
}

// CreateRun creates a run; the server queues it for execution.
func (c *Client) CreateRun(ctx context.Context, req *api.CreateRun) (*api.Run, error) {
	var out api.Run
	return &out, c.do(ctx, http.MethodPost, "/v1/runs", nil, req, &out)
}

// Run returns run id's summary.
func (c *Client) Run(ctx context.Context, id string) (*api.Run, error) {
	var out api.Run
	return &out, c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, nil, &out)
}

// RunTree returns run id with its child runs (api.RunTree).
func (c *Client) RunTree(ctx context.Context, id string) (*api.RunTree, error) {
	var out api.RunTree
	return &out, c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/tree", nil, nil, &out)
}

// Cancel cancels run id (asynchronously if it is executing).
func (c *Client) Cancel(ctx context.Context, id string) (*api.Run, error) {
	var out api.Run
	return &out, c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/cancel", nil, nil, &out)
}

// Resume queues run id for execution, with an optional user message.
func (c *Client) Resume(ctx context.Context, id string, req *api.ResumeRun) (*api.Run, error) {
	if req == nil {
		req = &api.ResumeRun{}
	}
	var out api.Run
	return &out, c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/resume", nil, req, &out)
}

// Fork creates a new run from the events of run id up to req.Seq.
func (c *Client) Fork(ctx context.Context, id string, req *api.ForkRun) (*api.Run, error) {
	if req == nil {
		req = &api.ForkRun{}
	}
	var out api.Run
	return &out, c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/fork", nil, req, &out)
}

// Rewind restores the files of run id as its newest workspace checkpoint
// at or before event to had them.
func (c *Client) Rewind(ctx context.Context, id string, req *api.RewindRun) (*api.Rewound, error) {
	var out api.Rewound
	return &out, c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/rewind", nil, req, &out)
}

// Diff returns the files run id changed: its workspace now against the
// git commit it started on, or, with at > 0, its first workspace
// checkpoint against its newest one at or before event at.
func (c *Client) Diff(ctx context.Context, id string, at int64) (*api.RunDiff, error) {
	var q url.Values
	if at > 0 {
		q = url.Values{"at": {strconv.FormatInt(at, 10)}}
	}
	var out api.RunDiff
	return &out, c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/diff", q, nil, &out)
}

// ProposedEdit returns what the edit_file or write_file call callID of
// run id, waiting for approval, would change in its file now (empty for
// a call of another tool).
func (c *Client) ProposedEdit(ctx context.Context, id, callID string) (*api.ProposedEdit, error) {
	var out api.ProposedEdit
	return &out, c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/approvals/"+url.PathEscape(callID)+"/diff", nil, nil, &out)
}

// Artifact returns the whole output file rel (".keel/artifacts/...") of
// run id.
func (c *Client) Artifact(ctx context.Context, id, rel string) ([]byte, error) {
	segs := strings.Split(rel, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	resp, err := c.send(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/artifacts/"+strings.Join(segs, "/"), nil, nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// Approvals returns every pending approval, oldest first.
func (c *Client) Approvals(ctx context.Context) ([]api.Approval, error) {
	var out api.ApprovalList
	return out.Approvals, c.do(ctx, http.MethodGet, "/v1/approvals", nil, nil, &out)
}

// Approve approves call callID of run runID; req may be nil.
func (c *Client) Approve(ctx context.Context, runID, callID string, req *api.Decide) (*api.Run, error) {
	return c.decide(ctx, runID, callID, "approve", req)
}

// Deny denies call callID of run runID; req may be nil.
func (c *Client) Deny(ctx context.Context, runID, callID string, req *api.Decide) (*api.Run, error) {
	return c.decide(ctx, runID, callID, "deny", req)
}

func (c *Client) decide(ctx context.Context, runID, callID, verb string, req *api.Decide) (*api.Run, error) {
	if req == nil {
		req = &api.Decide{}
	}
	var out api.Run
	return &out, c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/approvals/"+url.PathEscape(callID)+"/"+verb, nil, req, &out)
}

// Agents lists the registered agents.
func (c *Client) Agents(ctx context.Context) ([]api.Agent, error) {
	var out api.AgentList
	return out.Agents, c.do(ctx, http.MethodGet, "/v1/agents", nil, nil, &out)
}

// CreateAgent registers an agent.
func (c *Client) CreateAgent(ctx context.Context, req *api.CreateAgent) (*api.Agent, error) {
	var out api.Agent
	return &out, c.do(ctx, http.MethodPost, "/v1/agents", nil, req, &out)
}

// RevokeAgent revokes agent name with reason.
func (c *Client) RevokeAgent(ctx context.Context, name, reason string) (*api.Agent, error) {
	var out api.Agent
	return &out, c.do(ctx, http.MethodPost, "/v1/agents/"+url.PathEscape(name)+"/revoke", nil, &api.Revoke{Reason: reason}, &out)
}

// RestoreAgent undoes the revocation of agent name, a built-in agent or
// a sub-agent, with reason.
func (c *Client) RestoreAgent(ctx context.Context, name, reason string) (*api.Agent, error) {
	var out api.Agent
	return &out, c.do(ctx, http.MethodPost, "/v1/agents/"+url.PathEscape(name)+"/restore", nil, &api.Revoke{Reason: reason}, &out)
}

// Grants returns agent name's standing approvals (approvals remembered
// with remember "agent"), oldest first.
func (c *Client) Grants(ctx context.Context, name string) (*api.GrantList, error) {
	var out api.GrantList
	return &out, c.do(ctx, http.MethodGet, "/v1/agents/"+url.PathEscape(name)+"/grants", nil, nil, &out)
}

// Ungrant removes standing approval grant (an id from [Client.Grants])
// of agent name, with reason (may be empty), and returns the agent's
// remaining grants. It needs the approvals:write scope.
func (c *Client) Ungrant(ctx context.Context, name, grant, reason string) (*api.GrantList, error) {
	var out api.GrantList
	return &out, c.do(ctx, http.MethodPost, "/v1/agents/"+url.PathEscape(name)+"/grants/"+url.PathEscape(grant)+"/revoke", nil, &api.Revoke{Reason: reason}, &out)
}

// VerifyAudit verifies the journals' hash chains (all if req is nil or
// names no runs).
func (c *Client) VerifyAudit(ctx context.Context, req *api.VerifyAudit) (*api.AuditReport, error) {
	if req == nil {
		req = &api.VerifyAudit{}
	}
	var out api.AuditReport
	return &out, c.do(ctx, http.MethodPost, "/v1/audit/verify", nil, req, &out)
}

// CheckPolicy decides one call by the server's policy (nothing runs).
func (c *Client) CheckPolicy(ctx context.Context, req *api.PolicyCheck) (*api.PolicyDecision, error) {
	var out api.PolicyDecision
	return &out, c.do(ctx, http.MethodPost, "/v1/policy/check", nil, req, &out)
}

// Whoami returns the caller's token.
func (c *Client) Whoami(ctx context.Context) (*api.Whoami, error) {
	var out api.Whoami
	return &out, c.do(ctx, http.MethodGet, "/v1/whoami", nil, nil, &out)
}

// Tokens lists the API tokens (admin).
func (c *Client) Tokens(ctx context.Context) ([]api.Token, error) {
	var out api.TokenList
	return out.Tokens, c.do(ctx, http.MethodGet, "/v1/tokens", nil, nil, &out)
}

// CreateToken creates an API token (admin); the result holds its secret.
func (c *Client) CreateToken(ctx context.Context, req *api.CreateToken) (*api.NewToken, error) {
	var out api.NewToken
	return &out, c.do(ctx, http.MethodPost, "/v1/tokens", nil, req, &out)
}

// RevokeToken revokes API token id (admin).
func (c *Client) RevokeToken(ctx context.Context, id string) (*api.Token, error) {
	var out api.Token
	return &out, c.do(ctx, http.MethodPost, "/v1/tokens/"+url.PathEscape(id)+"/revoke", nil, nil, &out)
}

// AuthWaits returns every call waiting for an authorization, oldest
// first.
func (c *Client) AuthWaits(ctx context.Context) ([]api.AuthWait, error) {
	var out api.AuthWaitList
	return out.Waits, c.do(ctx, http.MethodGet, "/v1/auth/waits", nil, nil, &out)
}

// StartConnect starts the authorization that call callID of run runID
// waits for and returns the URL to send the person to; the server's
// callback completes it and continues the run.
func (c *Client) StartConnect(ctx context.Context, runID, callID string) (*api.AuthStarted, error) {
	var out api.AuthStarted
	return &out, c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/auth/"+url.PathEscape(callID)+"/connect", nil, struct{}{}, &out)
}

// Inputs lists the questions MCP servers ask a person during runs' calls.
func (c *Client) Inputs(ctx context.Context) ([]api.Input, error) {
	var out api.InputList
	return out.Inputs, c.do(ctx, http.MethodGet, "/v1/inputs", nil, nil, &out)
}

// AnswerInput answers input request id of run runID.
func (c *Client) AnswerInput(ctx context.Context, runID, id string, req *api.AnswerInput) (*api.Run, error) {
	var out api.Run
	return &out, c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/inputs/"+url.PathEscape(id)+"/answer", nil, req, &out)
}
