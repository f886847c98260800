// Package mcpserver is Keel as an MCP server: the tools through which an
// MCP client (an IDE, a chat app, another agent, the MCP Inspector) hands
// work to Keel and keeps it governed — start_run, run_status,
// run_timeline, list_runs, cancel_run, resume_run, list_approvals,
// answer_approval, list_inputs and answer_input — over the
// modelcontextprotocol/go-sdk server.
//
// The tools are written once, against a [backend] with two
// implementations: [Local] acts on a journal through the service
// (package service) in this process, which executes the runs (keel mcp
// serve); [Remote] acts on a team server through its API with the Go
// client (package client), with a fixed token (keel mcp serve --server)
// or the token of each MCP request ([Handler]: keel serve's /mcp). Both
// reach the same operations as every other front end: a run is created
// by service.Create and an approval decided by service.Decide, with the
// defaults and checks of limits in one place (docs/limits.md).
package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// DefaultWait is how long start_run and answer_approval wait for a run
// to pause or end before they answer, unless told otherwise.
const DefaultWait = 2 * time.Minute

// backend is what Keel's tools act on. req is the MCP request (its
// headers carry a remote caller's token).
type backend interface {
	// resolve returns the id of the run ref names, by the rule of every
	// front end (service.ResolveRun): an id, a unique prefix, the web
	// UI's short form, or "last" where the server knows a directory.
	resolve(ctx context.Context, req *sdk.CallToolRequest, ref string) (string, error)
	create(ctx context.Context, req *sdk.CallToolRequest, cr *service.CreateRun) (api.Run, error)
	run(ctx context.Context, req *sdk.CallToolRequest, id string) (api.Run, error)
	events(ctx context.Context, req *sdk.CallToolRequest, id string) ([]journal.Event, error)
	approvals(ctx context.Context, req *sdk.CallToolRequest) ([]api.Approval, error)
	decide(ctx context.Context, req *sdk.CallToolRequest, d *service.Decision) (api.Run, error)
	list(ctx context.Context, req *sdk.CallToolRequest, status []string, limit int) ([]api.Run, error)
	cancel(ctx context.Context, req *sdk.CallToolRequest, id string) (api.Run, error)
	resume(ctx context.Context, req *sdk.CallToolRequest, id string, r *api.ResumeRun) (api.Run, error)
	inputs(ctx context.Context, req *sdk.CallToolRequest) ([]api.Input, error)
	answer(ctx context.Context, req *sdk.CallToolRequest, runID, id string, a *api.AnswerInput) (api.Run, error)
	// settle waits until run id stops executing (from: the first event
	// that may say so) or wait passes.
	settle(ctx context.Context, req *sdk.CallToolRequest, id string, from int64, wait time.Duration)
	// errText is what a tool result says of err (an API or service
	// refusal: its message).
	errText(err error) string
}

// texts are what the forms of Keel's MCP server say differently: the
// server's instructions, start_run's description and what "a wait" is
// in answer_approval's.
type texts struct{ instructions, startRun, wait string }

// startInput is start_run's input of a form: the request it makes.
// load compiles a policy file (nil: the form takes none).
type startInput interface {
	request(load func(path string) (*policy.Engine, error)) (*service.CreateRun, error)
}

// limitDocs are the descriptions of start_run's limits (max_steps,
// max_tokens, max_cost, timeout, in both forms' inputs), from the
// service's defaults (the one place of them).
var limitDocs = map[string]string{
	"max_steps":  fmt.Sprintf("stop after this many model calls (default %d; 0: no limit; negative: refused)", service.DefaultMaxSteps),
	"max_tokens": fmt.Sprintf("stop after this many input and output tokens, summed over the model calls (default %d; 0: no limit; negative: refused)", service.DefaultMaxTokens),
	"max_cost":   fmt.Sprintf("stop after this much model cost in US dollars, for models with a known price (default %g; 0: no limit; negative: refused)", service.DefaultMaxCost),
	"timeout":    fmt.Sprintf("wall time of one execution, a Go duration such as 30m (default %s; 0s: no limit)", durationText(service.DefaultTimeout)),
}

// durationText is d as people write it: 12h, not 12h0m0s.
func durationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// startSchema is the input schema of start_run for input type In (a
// pointer to a struct), with the limits' descriptions stating the
// service's defaults.
func startSchema[In any]() *jsonschema.Schema {
	s, err := jsonschema.ForType(reflect.TypeFor[In]().Elem(), nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: start_run's schema: %v", err))
	}
	for name, doc := range limitDocs {
		if p := s.Properties[name]; p != nil {
			p.Description = doc
		}
	}
	return s
}

type runIn struct {
	RunID string `json:"run_id" jsonschema:"the run's id, or a unique prefix of it (at least 4 characters; also the web UI's short form 01m9…whbcbs)"`
}

type approvalsIn struct {
	RunID string `json:"run_id,omitempty" jsonschema:"only this run (its id, or a unique prefix of it)"`
}

type answerIn struct {
	RunID    string   `json:"run_id" jsonschema:"the run's id, or a unique prefix of it (at least 4 characters; also the web UI's short form 01m9…whbcbs)"`
	CallID   string   `json:"call_id,omitempty" jsonschema:"the waiting call's id (from list_approvals), or a unique prefix of it; may be left out when the run waits for one call"`
	Decision string   `json:"decision" jsonschema:"approve or deny"`
	Reason   string   `json:"reason,omitempty" jsonschema:"why (required to deny; shown to the model)"`
	Remember string   `json:"remember,omitempty" jsonschema:"approvals only: also allow matching calls from now on, in this run (run) or in every run of the agent (agent); the exact command that asked, or the word prefix in prefix"`
	Prefix   []string `json:"prefix,omitempty" jsonschema:"with remember: the words a remembered command starts with (a prefix of the command that asked), instead of the exact command"`
}

type listIn struct {
	Status []string `json:"status,omitempty" jsonschema:"only runs with one of these statuses: running, paused, completed, failed, canceled (or a running run's idle state: queued, waiting, orphaned)"`
	Limit  int      `json:"limit,omitempty" jsonschema:"at most this many runs, newest first (default 20; 0: the default)"`
}

type cancelIn struct {
	RunID string `json:"run_id" jsonschema:"the run's id, or a unique prefix of it (at least 4 characters; also the web UI's short form 01m9…whbcbs)"`
}

type resumeIn struct {
	RunID     string   `json:"run_id" jsonschema:"the run's id, or a unique prefix of it (at least 4 characters; also the web UI's short form 01m9…whbcbs)"`
	Message   string   `json:"message,omitempty" jsonschema:"a message to the agent, added before it continues"`
	MaxSteps  *int     `json:"max_steps,omitempty" jsonschema:"replace the run's step limit from now on (0: no limit; left out: the run's own)"`
	MaxTokens *int64   `json:"max_tokens,omitempty" jsonschema:"replace the run's token limit from now on (0: no limit; left out: the run's own)"`
	MaxCost   *float64 `json:"max_cost,omitempty" jsonschema:"replace the run's cost limit in US dollars from now on (0: no limit; left out: the run's own)"`
	Timeout   string   `json:"timeout,omitempty" jsonschema:"replace the wall time of one execution, a Go duration such as 30m (0s: no limit; left out: the run's own)"`
}

type inputsIn struct {
	RunID string `json:"run_id,omitempty" jsonschema:"only this run (its id, or a unique prefix of it)"`
}

type answerInputIn struct {
	RunID   string         `json:"run_id" jsonschema:"the run's id, or a unique prefix of it"`
	InputID string         `json:"input_id,omitempty" jsonschema:"the input request's id (from list_inputs), or a unique prefix of it; may be left out when the run waits for one"`
	Action  string         `json:"action" jsonschema:"accept, decline or cancel"`
	Content map[string]any `json:"content,omitempty" jsonschema:"an accepted form's answer: a JSON object matching the request's schema (answers are journaled: never a secret)"`
}

// runLine is one run of list_runs.
type runLine struct {
	RunID     string    `json:"run_id"`
	Status    string    `json:"status"`
	Task      string    `json:"task"`
	Agent     string    `json:"agent,omitempty"`
	Workspace string    `json:"workspace"`
	Created   time.Time `json:"created"`
	Steps     int       `json:"steps"`
	Cost      float64   `json:"cost_usd"`
	Waiting   int       `json:"waiting_for_approval,omitempty"`
	Reason    string    `json:"reason,omitempty"`
}

// runStatus is what run_status, start_run and answer_approval return.
type runStatus struct {
	RunID     string         `json:"run_id"`
	Status    string         `json:"status"`
	Steps     int            `json:"steps"`
	Cost      float64        `json:"cost_usd"`
	Reason    string         `json:"reason,omitempty"`
	Message   string         `json:"message,omitempty"`
	Output    string         `json:"output,omitempty"`
	Waiting   []approvalInfo `json:"waiting_for_approval,omitempty"`
	Executing bool           `json:"executing_here,omitempty"`
	Workspace string         `json:"workspace,omitempty"`
	Error     string         `json:"error,omitempty"`
}

type approvalInfo struct {
	RunID  string `json:"run_id"`
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
	Since  string `json:"since"`
}

func statusOf(r *api.Run) *runStatus {
	out := &runStatus{RunID: r.ID, Status: r.Status, Steps: r.Steps, Cost: r.Cost, Reason: r.Reason, Message: r.Message, Output: r.Output,
		Executing: r.Executing, Workspace: r.Workspace, Error: r.Error}
	for _, p := range r.Pending {
		out.Waiting = append(out.Waiting, approvalOf(&p))
	}
	return out
}

func approvalOf(p *api.Approval) approvalInfo {
	return approvalInfo{RunID: p.RunID, CallID: p.CallID, Tool: p.Tool, Action: tailText(p.Action, 4000), Reason: tailText(p.Reason, 4000), Since: p.Requested.UTC().Format(time.RFC3339)}
}

// tools are Keel's MCP tools over a backend; load compiles start_run's
// policy file.
type tools[Start startInput] struct {
	b    backend
	wait time.Duration
	load func(string) (*policy.Engine, error)
}

// newServer returns an MCP server offering Keel's tools over b.
func newServer[Start startInput](b backend, wait time.Duration, load func(string) (*policy.Engine, error), x texts) *sdk.Server {
	if wait <= 0 {
		wait = DefaultWait
	}
	t := &tools[Start]{b: b, wait: wait, load: load}
	srv := sdk.NewServer(&sdk.Implementation{Name: "keel", Version: "1"}, &sdk.ServerOptions{Instructions: x.instructions})
	sdk.AddTool(srv, &sdk.Tool{Name: "start_run", Description: x.startRun, InputSchema: startSchema[Start]()}, t.startRun)
	sdk.AddTool(srv, &sdk.Tool{Name: "run_status", Description: "A run's status (running, paused, completed, failed, canceled), steps, cost, final output, and the calls it waits for.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.runStatus)
	sdk.AddTool(srv, &sdk.Tool{Name: "run_timeline", Description: "A run's timeline: each step, tool call, gate decision and approval, with tokens, cost and durations.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.runTimeline)
	sdk.AddTool(srv, &sdk.Tool{Name: "list_approvals", Description: "The tool calls waiting for a person's approval, oldest first, with the exact action each would perform.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.listApprovals)
	sdk.AddTool(srv, &sdk.Tool{Name: "answer_approval", Description: "Approve or deny a call a run waits for (decision: approve or deny; a denial needs a reason; remember: run or agent also allows matching calls from now on). The run then continues; returns when it pauses again, ends, or after " + x.wait + "."}, t.answerApproval)
	sdk.AddTool(srv, &sdk.Tool{Name: "list_runs", Description: "Runs, newest first: id, status, task, workspace, steps, cost and how many calls each waits for.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.listRuns)
	sdk.AddTool(srv, &sdk.Tool{Name: "cancel_run", Description: "Cancel a run: its execution stops and it ends canceled (it can be resumed later). A completed run cannot be canceled.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)}}, t.cancelRun)
	sdk.AddTool(srv, &sdk.Tool{Name: "resume_run", Description: "Continue a paused, failed or canceled run, optionally with a message to the agent and new limits (a run stopped at a limit needs a higher one). Returns when it pauses again, ends, or after " + x.wait + "."}, t.resumeRun)
	sdk.AddTool(srv, &sdk.Tool{Name: "list_inputs", Description: "The questions MCP servers ask a person during runs' calls (forms and URLs to open), oldest first.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.listInputs)
	sdk.AddTool(srv, &sdk.Tool{Name: "answer_input", Description: "Answer a question a run's call waits for: accept (a form with content matching its schema; a URL request once opened), decline or cancel. The run then continues; returns when it pauses again, ends, or after " + x.wait + "."}, t.answerInput)
	return srv
}

func ptr[T any](v T) *T { return &v }

func textResult(v any) *sdk.CallToolResult {
	b, _ := json.MarshalIndent(v, "", "  ")
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}}
}

func errResult(format string, args ...any) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// status answers with the status of the run ref names, or the
// backend's error.
func (t *tools[Start]) status(ctx context.Context, req *sdk.CallToolRequest, ref string) (*sdk.CallToolResult, any, error) {
	id, err := t.b.resolve(ctx, req, ref)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	r, err := t.b.run(ctx, req, id)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	return textResult(statusOf(&r)), nil, nil
}

func (t *tools[Start]) startRun(ctx context.Context, req *sdk.CallToolRequest, in Start) (*sdk.CallToolResult, any, error) {
	cr, err := in.request(t.load)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	run, err := t.b.create(ctx, req, cr)
	if err != nil {
		return errResult("the run did not start: %s", t.b.errText(err)), nil, nil
	}
	t.b.settle(ctx, req, run.ID, 1, t.wait)
	return t.status(ctx, req, run.ID)
}

func (t *tools[Start]) runStatus(ctx context.Context, req *sdk.CallToolRequest, in runIn) (*sdk.CallToolResult, any, error) {
	return t.status(ctx, req, in.RunID)
}

func (t *tools[Start]) runTimeline(ctx context.Context, req *sdk.CallToolRequest, in runIn) (*sdk.CallToolResult, any, error) {
	id, err := t.b.resolve(ctx, req, in.RunID)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	evs, err := t.b.events(ctx, req, id)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: tailText(timeline(evs), 50000)}}}, nil, nil
}

func (t *tools[Start]) listApprovals(ctx context.Context, req *sdk.CallToolRequest, in approvalsIn) (*sdk.CallToolResult, any, error) {
	if in.RunID != "" {
		id, err := t.b.resolve(ctx, req, in.RunID)
		if err != nil {
			return errResult("%s", t.b.errText(err)), nil, nil
		}
		in.RunID = id
	}
	list, err := t.b.approvals(ctx, req)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	out := []approvalInfo{}
	for i := range list {
		if in.RunID != "" && list[i].RunID != in.RunID {
			continue
		}
		out = append(out, approvalOf(&list[i]))
	}
	return textResult(map[string]any{"approvals": out}), nil, nil
}

// answerApproval decides as every front end does (service.Decide): the
// service resolves the call (a prefix, or none when one waits) and
// refuses a denial without a reason.
func (t *tools[Start]) answerApproval(ctx context.Context, req *sdk.CallToolRequest, in answerIn) (*sdk.CallToolResult, any, error) {
	d := &service.Decision{CallID: in.CallID, Decide: api.Decide{Reason: in.Reason, Remember: in.Remember, Prefix: in.Prefix}}
	switch in.Decision {
	case "approve", "allow":
		d.Effect = policy.Allow
	case "deny":
		d.Effect = policy.Deny
	default:
		return errResult("decision %q: want approve or deny", in.Decision), nil, nil
	}
	// The service's order (report 15, Q4): the decision's own form, the
	// run, the call (which the backend on a team server may look up
	// before the server sees the decision).
	if err := service.CheckDecision(d.Effect, &d.Decide); err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	var err error
	if d.RunID, err = t.b.resolve(ctx, req, in.RunID); err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	run, err := t.b.decide(ctx, req, d)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	run.ID = d.RunID
	return t.continued(ctx, req, &run)
}

// listRunsDefault is how many runs list_runs returns unless told.
const listRunsDefault = 20

func (t *tools[Start]) listRuns(ctx context.Context, req *sdk.CallToolRequest, in listIn) (*sdk.CallToolResult, any, error) {
	if in.Limit == 0 {
		in.Limit = listRunsDefault
	}
	list, err := t.b.list(ctx, req, in.Status, in.Limit)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	out := []runLine{}
	for _, r := range list {
		out = append(out, runLine{RunID: r.ID, Status: r.Status, Task: tailText(r.Task, 300), Agent: r.Agent, Workspace: r.Workspace, Created: r.Created.UTC(),
			Steps: r.Steps, Cost: r.Cost, Waiting: len(r.Pending), Reason: r.Reason})
	}
	return textResult(map[string]any{"runs": out}), nil, nil
}

func (t *tools[Start]) cancelRun(ctx context.Context, req *sdk.CallToolRequest, in cancelIn) (*sdk.CallToolResult, any, error) {
	id, err := t.b.resolve(ctx, req, in.RunID)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	run, err := t.b.cancel(ctx, req, id)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	if run.Executing || run.Elsewhere != "" {
		// Its execution stops at its next boundary: wait for the end.
		t.b.settle(ctx, req, id, run.Events+1, t.wait)
	}
	return t.status(ctx, req, id)
}

func (t *tools[Start]) resumeRun(ctx context.Context, req *sdk.CallToolRequest, in resumeIn) (*sdk.CallToolResult, any, error) {
	id, err := t.b.resolve(ctx, req, in.RunID)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	r := &api.ResumeRun{Message: in.Message}
	if in.MaxSteps != nil || in.MaxTokens != nil || in.MaxCost != nil || in.Timeout != "" {
		r.Limits = &api.Limits{MaxSteps: in.MaxSteps, MaxTokens: in.MaxTokens, MaxCost: in.MaxCost, Timeout: in.Timeout}
	}
	run, err := t.b.resume(ctx, req, id, r)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	return t.continued(ctx, req, &run)
}

// continued answers after a decision, an answer or a resume queued run:
// at once with the status when another server executes it, else when it
// pauses again, ends or the wait passes.
func (t *tools[Start]) continued(ctx context.Context, req *sdk.CallToolRequest, run *api.Run) (*sdk.CallToolResult, any, error) {
	if run.Elsewhere != "" {
		// Nothing here will move the run: answer at once.
		res, out, err := t.status(ctx, req, run.ID)
		if err == nil && res != nil && !res.IsError {
			res.Content = append([]sdk.Content{&sdk.TextContent{Text: "Recorded, but " + run.Elsewhere}}, res.Content...)
		}
		return res, out, err
	}
	if run.Queued || run.Executing {
		// Wait only for a run that moves: one still waiting for another
		// call, or that nothing executes, would hold the answer for the
		// whole wait (report 15, R14).
		t.b.settle(ctx, req, run.ID, run.Events+1, t.wait)
	}
	return t.status(ctx, req, run.ID)
}

func (t *tools[Start]) listInputs(ctx context.Context, req *sdk.CallToolRequest, in inputsIn) (*sdk.CallToolResult, any, error) {
	if in.RunID != "" {
		id, err := t.b.resolve(ctx, req, in.RunID)
		if err != nil {
			return errResult("%s", t.b.errText(err)), nil, nil
		}
		in.RunID = id
	}
	list, err := t.b.inputs(ctx, req)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	out := []api.Input{}
	for _, p := range list {
		if in.RunID == "" || p.RunID == in.RunID {
			out = append(out, p)
		}
	}
	return textResult(map[string]any{"inputs": out}), nil, nil
}

func (t *tools[Start]) answerInput(ctx context.Context, req *sdk.CallToolRequest, in answerInputIn) (*sdk.CallToolResult, any, error) {
	switch in.Action {
	case "accept", "decline", "cancel":
	default:
		return errResult("action %q: want accept, decline or cancel", in.Action), nil, nil
	}
	if in.Action != "accept" && len(in.Content) > 0 {
		return errResult("%s takes no content: only an accepted form has an answer", in.Action), nil, nil
	}
	runID, err := t.b.resolve(ctx, req, in.RunID)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	pending, err := t.b.inputs(ctx, req)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	id, err := service.ResolveInput(runID, in.InputID, pending)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	a := &api.AnswerInput{Action: in.Action}
	if in.Content != nil {
		if a.Content, err = json.Marshal(in.Content); err != nil {
			return errResult("content: %v", err), nil, nil
		}
	}
	run, err := t.b.answer(ctx, req, runID, id, a)
	if err != nil {
		return errResult("%s", t.b.errText(err)), nil, nil
	}
	return t.continued(ctx, req, &run)
}

// tailText cuts s to its last n bytes (on a line boundary when it can),
// saying so.
func tailText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := s[len(s)-n:]
	if i := strings.IndexByte(cut, '\n'); i >= 0 && i < len(cut)-1 {
		cut = cut[i+1:]
	}
	return fmt.Sprintf("[%d bytes left out]\n%s", len(s)-len(cut), cut)
}
