package cli

import (
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"os"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/assemble/builder"
	"github.com/keel-run/keel/internal/foreground"
	"github.com/keel-run/keel/internal/knobs"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
)

// liveOptions are what an execution needs beyond the run's journal: what
// the assembler needs besides run.created (the API key, a loaded
// recording, full connection strings), and what the command asks of this
// execution (a resume's changes, journaled in run.resumed; how to wait
// for approvals; a conversation).
type liveOptions struct {
	assemble.Params
	// limits and settings, on a resume, replace the run's limits and
	// execution settings (journaled).
	limits   *agent.Limits
	settings *agent.Settings
	// handoff and contextWindow are passed to agent.ExecParams.
	handoff       bool
	contextWindow int
	// gate holds the approval-wait flags (policy.go).
	gate gateFlags
	// chat is keel chat / keel run -i: after each answer, the person's
	// next message continues the run.
	chat bool
	// team offers a new run the team tools and agent definitions.
	team bool
	// standIn, when set, approves what the run asks while stdin is not
	// a terminal, as this name, after showing it (keel demo).
	standIn string
	// demo: keel demo, whose report (timeline, output, diff) follows the
	// run: the run's own closing diff and answer would say it twice.
	demo bool
}

// process is this process's configuration of runs, as the flags,
// config.toml and the environment give it.
func (a *app) process() *builder.Process {
	p := &builder.Process{Home: a.home, Journal: a.dbPath(), Config: a.cfg, Project: a.project, Getenv: a.getenv, Notes: a.stderr,
		Version: Version, Metrics: a.metrics, OpenJournal: a.openStore, OpenVault: a.openVault}
	if k, err := knobs.Parse(a.getenv("KEEL_DEBUG")); err == nil && k.EgressRoots != "" {
		if b, err := os.ReadFile(k.EgressRoots); err == nil {
			p.EgressRoots = x509.NewCertPool()
			p.EgressRoots.AppendCertsFromPEM(b)
		}
	}
	return p
}

// assembler is the assembler of this process's runs.
func (a *app) assembler() *assemble.Assembler { return a.process().Assembler() }

// connectors are the connectors of this process's configuration.
func (a *app) connectors() *builder.Connectors { return a.process().Connectors() }

// newBuilder is the service's builder of runs in this process (the
// server's, a scheduler's, an evaluation's).
func newBuilder(a *app, store journal.Store, logger *slog.Logger) *builder.Builder {
	return a.process().Builder(store, logger)
}

// localBuilder is keel run's builder: its execution's options live.
func (a *app) localBuilder(store journal.Store, live *liveOptions) *builder.Builder {
	b := newBuilder(a, store, nil)
	b.Local, b.Params, b.Settings = true, &live.Params, live.settings
	return b
}

// newWiring builds the model, sandbox, workspace and tools for a run as
// its run.created payload describes them (with live's settings, on a
// resume that changes them).
func (a *app) newWiring(ctx context.Context, c *agent.RunCreated, live *liveOptions) (*assemble.Run, error) {
	if live.settings != nil {
		cc := *c
		cc.Settings = live.settings
		c = &cc
	}
	return a.assembler().Assemble(ctx, c, &live.Params)
}

// execution is the execution, in this process at this terminal, of the
// run assembled as run, with live's options.
func (a *app) execution(rt *agent.Runtime, run *assemble.Run, live *liveOptions, jsonOut, quiet bool) *foreground.Execution {
	decide := func(ctx context.Context, runID, callID string, res *agent.ApprovalResolved) error {
		return a.session(ctx, rt.Store(), res.By, func(l *local) error { return l.Decide(ctx, runID, callID, res) })
	}
	x := &foreground.Execution{Runtime: rt, Run: run, Wire: a.assembler().Wire(&live.Params),
		Handoff: live.handoff, ContextWindow: live.contextWindow, Limits: live.limits, Settings: live.settings,
		IfLastSeq: live.gate.ifLastSeq, Wait: live.gate.waiting(), Chat: live.chat, StandIn: live.standIn,
		Terminal: a.terminal(jsonOut, quiet, decide)}
	if live.demo {
		x.Stdout = io.Discard
	}
	return x
}

// terminal is where a run executed (or attached to) in this process
// shows itself, with decide recording the person's decisions.
func (a *app) terminal(jsonOut, quiet bool, decide tui.Decide) *foreground.Terminal {
	return &foreground.Terminal{Stdout: a.stdout, Stderr: a.stderr, Term: a.term, JSON: jsonOut, Quiet: quiet,
		Prompt: &a.prompt, UsageSaid: &a.usageSaid, Inline: a.inline(), Keel: a.keelCmd(), Person: a.person(""), Decide: decide}
}

// execute executes runID (as ld holds it; nil: read it) with the
// person's message, if any, and maps the outcome to an exit status.
func execute(ctx context.Context, x *foreground.Execution, runID string, ld *foreground.Loaded, message string) error {
	out, err := x.Execute(ctx, runID, ld, message)
	if err != nil {
		return err
	}
	return exitOf(out)
}

// exitOf is keel run's exit status for how an execution left its run.
func exitOf(out *agent.Outcome) error {
	switch out.Status {
	case journal.StatusCompleted:
		return nil
	case journal.StatusPaused:
		return &exitError{3}
	case journal.StatusCanceled:
		return &exitError{130}
	default:
		return &exitError{1}
	}
}
