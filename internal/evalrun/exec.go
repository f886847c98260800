package evalrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/eval"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/assemble/builder"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// Exec executes an evaluation's trials in this process (an
// [eval.Executor]): each is prepared by the service like keel run's
// runs, wired by the builder, journaled and executed unattended (asks
// decided by Approve), then its checks run in its sandbox.
type Exec struct {
	// Service prepares, journals and decides the trials' runs (a
	// service that executes nothing, over Builder); its runtime executes
	// them in this process.
	Service *service.Service
	Builder *builder.Builder
	// Policy decides the trials' calls; Sandbox is their sandbox's kind.
	Policy  *policy.Engine
	Sandbox string
	// Approve decides every call a trial's gate asks about.
	Approve policy.Effect
	// Person is who creates the trials' runs.
	Person string
	// Fault, if set, injects a failure into one attempt.
	Fault Fault
}

// Fault is an injected failure (KEEL_DEBUG's eval_fault=KIND@N): the
// At-th attempt of an evaluation meets a provider ("provider") or
// sandbox ("sandbox") failure.
type Fault struct {
	Kind string
	At   int
}

// Execute implements eval.Executor.
func (x *Exec) Execute(ctx context.Context, tr *eval.TrialRun) (string, error) {
	c := tr.Case
	limits := api.Limits{}
	if tr.MaxSteps > 0 {
		limits.MaxSteps = &tr.MaxSteps
	}
	if tr.MaxCost > 0 {
		limits.MaxCost = &tr.MaxCost
	}
	if c.Timeout > 0 {
		limits.Timeout = time.Duration(c.Timeout).String()
	}
	req := &service.CreateRun{
		CreateRun: api.CreateRun{Task: c.Task, System: c.System, Model: tr.Model, Workspace: tr.Workspace, MountPath: c.Workspace.MountPath,
			Sandbox: x.Sandbox, Env: c.Env, Setup: c.Setup, Labels: tr.Labels, Limits: limits},
		Local: &service.LocalRun{Policy: x.Policy, NoOffer: true},
	}
	created, err := x.Service.Prepare(ctx, service.Local(x.Person), req)
	if err != nil {
		var se *service.Error
		if errors.As(err, &se) {
			err = errors.New(se.Message) // the service's words, without its code
		}
		return "", fmt.Errorf("prepare: %w", err)
	}
	created.Live = tr.Live
	wired, closer, err := x.Builder.Wire(ctx, created)
	if err != nil {
		return "", fmt.Errorf("sandbox and tools: %w", err)
	}
	defer closer.Close()
	run := closer.(*assemble.Run)
	created.Tools = run.ToolInfos()
	runID, err := x.Service.Journal(ctx, service.Local(x.Person), created, "")
	if err != nil {
		return "", err
	}
	checks := wired.Env.Sandbox
	params := &agent.ExecParams{Wiring: run.Wiring}
	params.Principals = identity.NewDirectory(x.Service.Runtime().Store(), nil).Check
	if x.Fault.At == tr.Seq {
		switch x.Fault.Kind {
		case "provider":
			params.Model = faultModel{}
		case "sandbox":
			env := *params.Env
			env.Sandbox = faultSandbox{}
			params.Env = &env
		}
	}
	if _, err := Unattended(ctx, x.Service, runID, params, func(p agent.PendingApproval) (policy.Effect, string) {
		return x.Approve, "decided by the evaluation's rule (--approve " + string(x.Approve) + ")"
	}); err != nil {
		return runID, err
	}
	if checks == nil {
		return runID, errors.New("the run has no sandbox to run its checks in")
	}
	return runID, tr.After(ctx, Shell(checks))
}

// Unattended executes runID in this process until it ends, deciding
// each approval it asks for with decide, recorded through the service
// as every front end's decisions are, by "keel-eval" (a run that pauses
// for another reason is returned as it is).
func Unattended(ctx context.Context, svc *service.Service, runID string, params *agent.ExecParams, decide func(agent.PendingApproval) (policy.Effect, string)) (*agent.Outcome, error) {
	for {
		out, err := svc.Runtime().Execute(ctx, runID, params)
		if err != nil {
			return out, err
		}
		pending := out.State.Pending()
		if out.Status != journal.StatusPaused || len(pending) == 0 || ctx.Err() != nil {
			return out, nil
		}
		for _, p := range pending {
			eff, reason := decide(p)
			d := &service.Decision{RunID: runID, CallID: p.CallID, Effect: eff, Decide: api.Decide{Reason: reason}}
			if _, err := svc.Decide(ctx, service.Local("keel-eval"), d); err != nil {
				return out, err
			}
		}
	}
}

// maxCheckOutput bounds what a check's output keeps in memory.
const maxCheckOutput = 1 << 20

// Shell runs check scripts with bash in sb, in the workspace.
func Shell(sb sandbox.Sandbox) eval.Shell {
	return func(ctx context.Context, script string, timeout time.Duration) (int, string, error) {
		var out boundedBuffer
		res, err := sb.Exec(ctx, &sandbox.Cmd{Args: []string{"bash", "-c", script}, Stdout: &out, Timeout: timeout})
		if err != nil {
			return 0, "", err
		}
		return res.ExitCode, out.String(), nil
	}
}

// boundedBuffer keeps the first maxCheckOutput bytes written to it.
type boundedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *boundedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := maxCheckOutput - w.b.Len(); room > 0 {
		w.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (w *boundedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// faultModel is the provider of an injected fault: every request fails
// as a 503 would.
type faultModel struct{}

func (faultModel) Generate(context.Context, *model.Request) (*model.Response, error) {
	return nil, &model.Error{Kind: model.KindRetryable, Provider: "fault", StatusCode: 503, Message: "injected provider fault (KEEL_DEBUG eval_fault): 503 service unavailable"}
}

// faultSandbox is the sandbox of an injected fault: nothing runs.
type faultSandbox struct{}

func (faultSandbox) Exec(context.Context, *sandbox.Cmd) (*sandbox.Result, error) {
	return nil, errors.New("injected sandbox fault (KEEL_DEBUG eval_fault): the sandbox could not start the command")
}

func (faultSandbox) Close() error { return nil }
