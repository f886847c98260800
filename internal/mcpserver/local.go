package mcpserver

import (
	"context"
	"errors"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// LocalOptions configure [Local].
type LocalOptions struct {
	// Wait bounds how long start_run and answer_approval wait for the
	// run to pause or end; 0 means [DefaultWait].
	Wait time.Duration
	// LoadPolicy compiles the policy file start_run names (as keel run
	// --policy does); nil refuses start_run's policy.
	LoadPolicy func(path string) (*policy.Engine, error)
	// Dir is the directory the server works in (keel mcp serve's):
	// run_id "last" names the newest run in it, as a RUN argument of
	// the command line does there ("": "last" names no run).
	Dir string
}

// Local returns Keel's MCP server on the journal of svc, acting as who
// (the person at this machine: service.Local). svc must execute runs
// (a Builder, Workers): start_run creates a run through svc.Create and
// svc's pool executes it in this process; answer_approval decides
// through svc.Decide, which queues the run to continue. Runs pause for
// their approvals rather than wait in place. Call svc.Shutdown when the
// server ends: runs still executing are paused, and continue with keel
// runs resume (or the next decision).
func Local(svc *service.Service, who *service.Caller, o *LocalOptions) *sdk.Server {
	if o == nil {
		o = &LocalOptions{}
	}
	l := &local{svc: svc, who: who, dir: o.Dir}
	return newServer[*localStart](l, o.Wait, o.LoadPolicy, texts{
		instructions: "Keel runs agents in a sandbox under a policy gate. Start a run with start_run, follow it with run_status and run_timeline, answer the approvals and questions it waits for with list_approvals, answer_approval, list_inputs and answer_input, and list_runs, cancel_run or resume_run (with a message or higher limits) as you need.",
		startRun:     "Start a Keel run: a task for an agent in a workspace (or the bundled demo). Returns when the run pauses for an approval, ends, or after the server's wait; the run keeps executing meanwhile.",
		wait:         "the server's wait",
	})
}

// localStart is start_run's input on the local journal.
type localStart struct {
	Task      string   `json:"task,omitempty" jsonschema:"what the agent should do (not needed with demo)"`
	Demo      bool     `json:"demo,omitempty" jsonschema:"run Keel's bundled demo (a scripted model fixes a failing test; it asks for approval before editing the file)"`
	Workspace string   `json:"workspace,omitempty" jsonschema:"host directory the agent works in (required unless demo)"`
	Model     string   `json:"model,omitempty" jsonschema:"model spec (default from config.toml)"`
	Agent     string   `json:"agent,omitempty" jsonschema:"the agent the run executes as (default: Keel's default agent)"`
	Policy    string   `json:"policy,omitempty" jsonschema:"policy file deciding the run's tool calls (default: Keel's default policy)"`
	MaxSteps  *int     `json:"max_steps,omitempty"`
	MaxTokens *int64   `json:"max_tokens,omitempty"`
	MaxCost   *float64 `json:"max_cost,omitempty"`
	Timeout   string   `json:"timeout,omitempty"`
	AllowHost []string `json:"allow_host,omitempty" jsonschema:"hosts the sandbox may reach"`
	Team      bool     `json:"team,omitempty" jsonschema:"let the agent start child agents (spawn_agent, wait_agents) from the workspace's trusted .keel/agents definitions or inline ones, under this run's budget"`
}

func (in *localStart) request(load func(string) (*policy.Engine, error)) (*service.CreateRun, error) {
	cr := &service.CreateRun{CreateRun: api.CreateRun{Demo: in.Demo, Task: in.Task, Workspace: in.Workspace, Model: in.Model, Agent: in.Agent, Network: in.AllowHost, Team: in.Team,
		Limits: api.Limits{MaxSteps: in.MaxSteps, MaxTokens: in.MaxTokens, MaxCost: in.MaxCost, Timeout: in.Timeout}}}
	if in.Policy != "" {
		if load == nil {
			return nil, errors.New("this server takes no policy file")
		}
		eng, err := load(in.Policy)
		if err != nil {
			return nil, err
		}
		cr.Local = &service.LocalRun{Policy: eng}
	}
	return cr, nil
}

// local is the backend over the service on the local journal.
type local struct {
	svc *service.Service
	who *service.Caller
	dir string
}

func (l *local) resolve(ctx context.Context, _ *sdk.CallToolRequest, ref string) (string, error) {
	return l.svc.ResolveRun(ctx, l.who, ref, l.dir)
}

func (l *local) create(ctx context.Context, _ *sdk.CallToolRequest, cr *service.CreateRun) (api.Run, error) {
	return l.svc.Create(ctx, l.who, cr)
}

func (l *local) run(ctx context.Context, _ *sdk.CallToolRequest, id string) (api.Run, error) {
	return l.svc.Run(ctx, l.who, id)
}

func (l *local) events(ctx context.Context, _ *sdk.CallToolRequest, id string) ([]journal.Event, error) {
	if _, err := l.svc.Run(ctx, l.who, id); err != nil {
		return nil, err
	}
	return l.svc.Events(ctx, l.who, id, 1)
}

func (l *local) approvals(ctx context.Context, _ *sdk.CallToolRequest) ([]api.Approval, error) {
	return l.svc.Approvals(ctx, l.who)
}

func (l *local) decide(ctx context.Context, _ *sdk.CallToolRequest, d *service.Decision) (api.Run, error) {
	return l.svc.Decide(ctx, l.who, d)
}

// settle waits until the service's pool no longer queues or executes
// run id, or wait passes.
func (l *local) settle(ctx context.Context, _ *sdk.CallToolRequest, id string, _ int64, wait time.Duration) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		ch := l.svc.Watch(id)
		if ch == nil {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// errText is the message of a refusal; the person at this machine owns
// the journal, so an internal error is shown as it is.
func (l *local) errText(err error) string {
	if e, internal := service.Classify(err); !internal {
		return e.Message
	}
	return err.Error()
}

func (l *local) list(ctx context.Context, _ *sdk.CallToolRequest, status []string, limit int) ([]api.Run, error) {
	p := &service.ListRuns{Limit: limit}
	for _, s := range status {
		p.Status = append(p.Status, journal.Status(s))
	}
	return l.svc.Runs(ctx, l.who, p)
}

func (l *local) cancel(ctx context.Context, _ *sdk.CallToolRequest, id string) (api.Run, error) {
	return l.svc.Cancel(ctx, l.who, id)
}

func (l *local) resume(ctx context.Context, _ *sdk.CallToolRequest, id string, r *api.ResumeRun) (api.Run, error) {
	return l.svc.Resume(ctx, l.who, id, r)
}

func (l *local) inputs(ctx context.Context, _ *sdk.CallToolRequest) ([]api.Input, error) {
	return l.svc.Inputs(ctx, l.who)
}

func (l *local) answer(ctx context.Context, _ *sdk.CallToolRequest, runID, id string, a *api.AnswerInput) (api.Run, error) {
	return l.svc.Answer(ctx, l.who, runID, id, a)
}
