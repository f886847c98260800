package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/foreground"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

func (a *app) runsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "runs", Short: "List, show, resume and compare runs"}
	cmd.AddCommand(a.runsListCmd(), a.runsShowCmd(), a.runsResumeCmd(), a.runsCompareCmd())
	cmd.AddCommand(a.runsTokensCmd(), a.runsHandoffCmd(), a.runsCancelCmd(), a.runsTraceCmd())
	cmd.AddCommand(a.runsExportCmd(), a.runsImportCmd(), a.runsDiffCmd(), a.runsReplayCmd())
	cmd.AddCommand(a.runsRewindCmd(), a.runsForkCmd(), a.runsCheckpointsCmd(), a.runsPruneCheckpointsCmd())
	return cmd
}

func (a *app) runsCancelCmd() *cobra.Command {
	var by string
	cmd := &cobra.Command{
		Use:         "cancel RUN",
		Annotations: annotated(firstArgIsRun, bothForms),
		Short:       "End a run that no process is executing (paused, interrupted or failed) as canceled",
		Long: `Cancel closes a run that nobody executes: a run paused for approval or by
a revoked agent, or one interrupted by a crash. Every call of its open
turn gets a result saying it did not run, then run.canceled records who
canceled it. A run that another process executes is left alone: Ctrl-C
or SIGTERM to that process cancels it (at an approval prompt, Ctrl-C
pauses it). With --server, the server cancels it, also while it executes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackendAs(cmd, by, func(ctx context.Context, b backend) error {
				runID := args[0]
				run, err := b.Run(ctx, runID)
				if err != nil {
					return err
				}
				if run.Status == string(journal.StatusCanceled) {
					fmt.Fprintf(a.stderr, "keel: run %s is already canceled\n", run.ID)
					return nil
				}
				waiting := len(run.Pending)
				if run, err = b.Cancel(ctx, run.ID); err != nil {
					return err
				}
				fmt.Fprintf(a.stderr, "keel: canceled run %s (%d waiting approval(s) closed; %s)\n", run.ID, waiting, run.Message)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&by, "by", "", "who cancels (default: $USER; with --server, your token's name)")
	return cmd
}

// Cancel cancels run id, which no process may execute now: the local
// form never waits for another process (the server form asks the one
// that executes it).
func (l *local) Cancel(ctx context.Context, runID string) (*api.Run, error) {
	store := l.store
	if lk, ok := store.(journal.Locker); ok {
		unlock, err := lk.Lock(ctx, runID)
		if errors.Is(err, journal.ErrLocked) {
			return nil, foreground.Busy(ctx, store, runID)
		}
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	rt, flush, err := l.a.newRuntime(ctx, store, nil, nil)
	if err != nil {
		return nil, err
	}
	defer flush()
	_, err = rt.Cancel(ctx, runID, l.Caller().Name)
	switch {
	case errors.Is(err, agent.ErrRunCompleted):
		return nil, service.CancelCompletedError(runID)
	case errors.Is(err, agent.ErrRunBusy):
		return nil, foreground.Busy(ctx, store, runID)
	case err != nil:
		return nil, err
	}
	return l.Run(ctx, runID)
}

func (a *app) runsListCmd() *cobra.Command {
	var status []string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "list",
		Short:       "List runs, newest first",
		Args:        cobra.NoArgs,
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return usagef("--limit %d: want 0 (all runs) or more", limit)
			}
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				// The service checks the statuses (a bad one: exit 2 in
				// both forms) and says which runs nothing executes.
				runs, err := b.Runs(ctx, &client.RunsParams{Status: status, Limit: limit})
				if err != nil {
					return err
				}
				rows := make([]tui.RunRow, 0, len(runs))
				for _, x := range runs {
					s := journal.RunSummary{RunID: x.ID, Created: x.Created, Updated: x.Updated, LastSeq: x.Events, LastType: journal.Type(x.LastType), Status: journal.Status(x.Status)}
					row := tui.RunRow{RunSummary: s, Shown: service.RunStatus(&x), Steps: x.Steps, Cost: x.Cost, Task: x.Task}
					if x.Task == "" && x.Error != "" {
						row.Err = x.Error // its journal could not be read
					}
					rows = append(rows, row)
				}
				return tui.Runs(a.stdout, rows, asJSON)
			}, "status", "limit", "json")
		},
	}
	cmd.Flags().StringSliceVar(&status, "status", nil, "only runs with these statuses, as the table shows them (running, queued, interrupted, paused, completed, failed, canceled), or executing now (executing) or waiting for approval (waiting)")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many runs (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines")
	return cmd
}

func (a *app) runsShowCmd() *cobra.Command {
	var asJSON, full, follow bool
	cmd := &cobra.Command{
		Use:         "show RUN",
		Short:       "Show a run's timeline: steps, tool calls, tokens, cost, durations",
		Args:        cobra.ExactArgs(1),
		Annotations: annotated(firstArgIsRun, bothForms),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				events, err := b.Events(ctx, args[0])
				if err != nil {
					return err
				}
				verr := b.VerifyEvents(ctx, args[0], events)
				if asJSON {
					enc := json.NewEncoder(a.stdout)
					for _, e := range events {
						if err := enc.Encode(e); err != nil {
							return err
						}
					}
					if follow && verr == nil && len(events) > 0 && !tui.Stopped(events) {
						for e, err := range b.Follow(ctx, args[0], events[len(events)-1].Seq+1, nil) {
							if err != nil {
								return err
							}
							if err := enc.Encode(e); err != nil {
								return err
							}
						}
					}
					// The events are printed as stored; a broken chain is still
					// reported, on stderr, with a failing exit status.
					if verr != nil {
						fmt.Fprintf(a.stderr, "keel: journal of run %s is CORRUPT: %v\n", args[0], verr)
						return &exitError{1}
					}
					return nil
				}
				o := &tui.ShowOptions{Full: full, Artifact: func(c *agent.RunCreated, rel string) ([]byte, error) {
					data, err := b.Artifact(ctx, args[0], rel)
					return data, err
				}, Events: func(id string) ([]journal.Event, error) { return b.Events(ctx, id) }}
				if follow && len(events) > 0 && !tui.Stopped(events) {
					o.Follow = func(row func(e *journal.Event)) ([]journal.Event, error) {
						// The model's text as a team server streams it,
						// between the rows, as keel run prints it.
						p := tui.NewPrinter(a.stdout, a.stdout, false, false)
						live := tui.NewRemoteLive(p)
						seen := events[len(events)-1].Seq
						var more []journal.Event
						for e, err := range b.Follow(ctx, args[0], seen+1, func(d api.Delta) { live.Delta(d, seen) }) {
							if err != nil {
								return more, err
							}
							more = append(more, e)
							seen = e.Seq
							live.Event(&more[len(more)-1])
							p.EndText()
							row(&more[len(more)-1])
						}
						return more, ctx.Err()
					}
				}
				return a.showTimeline(args[0], events, verr, o)
			}, "json", "full", "follow")
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the events as JSON lines")
	cmd.Flags().BoolVar(&full, "full", false, "print each command's whole output (from the stored artifact when the result was truncated), not its last 20 lines")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow a live run, printing events as they happen, until it ends or pauses (a run waiting for an approval has paused)")
	return cmd
}

// runsBackend is what the run commands that read need of a journal or a
// team server.
type runsBackend interface {
	// Runs lists runs (not system streams), newest first, with their
	// folded status.
	Runs(ctx context.Context, p *client.RunsParams) ([]api.Run, error)
	// Run is run id with its folded status.
	Run(ctx context.Context, id string) (*api.Run, error)
	// Cancel ends run id as canceled by the caller.
	Cancel(ctx context.Context, id string) (*api.Run, error)
	// shown is a run's status as a person reads it (local.shown).
	shown(ctx context.Context, id, status string) string
	// Events returns every stored event of run id, as stored.
	Events(ctx context.Context, id string) ([]journal.Event, error)
	// VerifyEvents checks events (the whole journal of run id) against
	// its hash chain and, where the backend can, the store's index of
	// the newest event.
	VerifyEvents(ctx context.Context, id string, events []journal.Event) error
	// Follow yields run id's events from seq from on as they are
	// appended, until one that stops an execution (run.paused,
	// run.completed, run.failed, run.canceled) or ctx is done. live, if
	// set, is given the text of the model call in progress where the
	// backend has it (a team server that executes the run), from the
	// goroutine that ranges over the events.
	Follow(ctx context.Context, id string, from int64, live func(api.Delta)) func(yield func(journal.Event, error) bool)
	// Artifact reads the whole output rel of a call of run id (only the
	// run's artifacts are served).
	Artifact(ctx context.Context, id, rel string) ([]byte, error)
	// WorkspaceDiff and CheckpointDiff: where keel runs diff reads.
	tui.DiffSource
}

// verifyRun checks events (the whole journal of run) against its hash
// chain and the store's index of the newest event.
func verifyRun(ctx context.Context, store journal.Store, runID string, events []journal.Event) error {
	if err := journal.Verify(runID, events); err != nil {
		return err
	}
	return journal.CheckHead(ctx, store, runID, events)
}

func (a *app) runsResumeCmd() *cobra.Command {
	var f runFlags
	var message string
	cmd := &cobra.Command{
		Use:   "resume RUN",
		Short: "Resume a run that was interrupted, paused, canceled or failed; continue a completed one with --message",
		Long: `Resume continues a run from its journal. Tool calls that were running when
the runtime died are repaired first: read-only and idempotent calls run
again; any other call gets a result telling the model its outcome is
unknown, so nothing with side effects runs twice unannounced.

--message is never dropped: it is journaled before anything else. On a
run killed in the middle of a turn, or waiting for an approval, the model
reads it right after the open calls' results (approve or deny them to go
on); a completed run continues with it as a follow-up. A run that
another process executes is refused, and the message is not journaled.
Every later request carries the message verbatim, like the task, also
after compaction.

A run waiting for approval with nothing brought (no message, no flag
that changes the run) is left as it is: at a terminal its calls are
asked (the edit as a diff, y or n) and the run goes on once they are
decided; otherwise the command says what the run waits for and exits 3.
Nothing is journaled. The same with --server.

The run keeps the settings it was created with (limits, environment,
allowlist, policy, sandbox limits, timeouts, concurrency, result size,
model retries); a flag given here changes that one from now on, and the
change is journaled.`,
		Args:        cobra.ExactArgs(1),
		Annotations: annotated(firstArgIsRun, bothForms),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			f.changed = cmd.Flags().Changed
			if a.serverURL() == "" {
				// The run executes in this process: its sandbox starts
				// while the journal is read.
				assemble.Prestart()
			}
			b, err := a.open(ctx, cmd, remoteResumeFlags...)
			if err != nil {
				return err
			}
			defer b.Close()
			err = b.Continue(ctx, args[0], &continuation{f: &f, message: message})
			if errorCode(err) == api.CodeRunCompleted && message == "" {
				return fmt.Errorf("%w (%s runs resume %s --message TEXT)", err, b.Keel(), args[0])
			}
			return err
		},
	}
	registerResumeFlags(cmd.Flags(), &f, &message)
	return cmd
}

// remoteResumeFlags are the flags of keel runs resume that the server
// form takes: the limits and settings go to the server with the resume
// (journaled there as locally); --api-key is the server's own.
var remoteResumeFlags = []string{"message", "json", "quiet", "no-wait", "wait",
	"max-steps", "max-tokens", "max-cost", "max-tool-calls", "timeout", "context-window",
	"command-timeout", "command-idle-timeout", "concurrency", "max-result-chars", "max-output-tokens",
	"model-idle-timeout", "model-stall-retries", "model-retries"}

// registerResumeFlags registers the flags of keel runs resume (and
// handoff) on fl.
func registerResumeFlags(fl *pflag.FlagSet, f *runFlags, message *string) {
	fl.StringVar(&f.apiKey, "api-key", "", "API key (default from the environment)")
	fl.StringVar(&f.apiKeyEnv, "api-key-env", "", "environment variable holding the model endpoint's API key")
	fl.BoolVar(&f.json, "json", false, "write the journal events to stdout as JSON lines")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print only the final result")
	fl.StringVar(message, "message", "", "add this user message before continuing (for example \"continue\")")
	// The execution settings are the run's own (fixed when it was
	// created); a flag given here replaces one from now on, journaled.
	const own = " (default: the run's own setting; a change is journaled)"
	fl.DurationVar(&f.commandTimeout, "command-timeout", 0, "default wall time of one shell command"+own)
	fl.DurationVar(&f.commandIdle, "command-idle-timeout", 0, "end a shell command that prints nothing for this long, negative: never"+own)
	fl.IntVar(&f.concurrency, "concurrency", 0, "tool calls of one turn that may run at once"+own)
	fl.IntVar(&f.maxResultChars, "max-result-chars", 0, "characters of one tool result the model sees"+own)
	fl.IntVar(&f.maxOutputTokens, "max-output-tokens", 0, "completion token limit per model call, 0: provider default"+own)
	fl.DurationVar(&f.idleTimeout, "model-idle-timeout", 0, "abandon a model response that sends no bytes for this long"+own)
	fl.IntVar(&f.stallRetries, "model-stall-retries", 0, "retries of a stalled model response"+own)
	fl.IntVar(&f.retries, "model-retries", 0, "retries of a model request after a rate limit (429), an overload or server error (5xx), a broken connection or an unusable answer"+own)
	fl.IntVar(&f.ctx.window, "context-window", 0, "replace the run's context window (tokens) from now on (0: keep it)")
	fl.IntVar(&f.maxSteps, "max-steps", 0, "replace the run's step limit from now on, e.g. to continue a run stopped by it (0: no limit; not given: the run's own)")
	fl.Int64Var(&f.maxTokens, "max-tokens", 0, "replace the run's token limit from now on (0: no limit; not given: the run's own)")
	fl.Float64Var(&f.maxCost, "max-cost", 0, "replace the run's cost limit in US dollars from now on (0: no limit; not given: the run's own)")
	fl.DurationVar(&f.timeout, "timeout", 0, "replace the run's wall-time limit from now on (0: no limit; not given: the run's own)")
	fl.IntVar(&f.maxToolCalls, "max-tool-calls", 0, "replace the run's tool-call limit from now on (0: no limit; not given: the run's own)")
	registerWaitFlags(fl, &f.gate)
}

// resume continues run runID from its journal in this process (keel runs
// handoff).
func (a *app) resume(ctx context.Context, runID string, f *runFlags, message string) error {
	store, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	return a.resumeOn(ctx, store, runID, f, message)
}

// resumeOn is resume on an open journal.
func (a *app) resumeOn(ctx context.Context, store journal.Store, runID string, f *runFlags, message string) error {
	req, err := resumeRequest(f, message)
	if err != nil {
		return err
	}
	rt, flush, err := a.newRuntime(ctx, store, nil, nil)
	if err != nil {
		return err
	}
	defer flush()
	ld, err := foreground.LoadIdle(ctx, store, runID, message)
	if err != nil {
		return err
	}
	st := ld.State
	// A window too small first, naming the flag to pass; then what the
	// resume does, checked and decided as for a resume through the API.
	if f.ctx.window > 0 {
		if err := assemble.CheckContextWindow(st.Created, f.ctx.window, false); err != nil {
			return err
		}
	}
	plan, err := service.PlanResume(st, req)
	if err != nil {
		if f.handoff && errors.Is(err, agent.ErrRunCompleted) {
			return &handoffCompleted{runID}
		}
		return err
	}
	ch := plan.Changes
	if plan.Attach && !f.handoff && f.gate.ifLastSeq == 0 && !f.gate.waiting() {
		// The run waits for a person, nobody here answers, and the
		// resume brings nothing: say what it waits for, as the server
		// form does, and journal nothing.
		out, err := a.terminal(f.json, f.quiet, nil).Attach(ctx, store, runID, ld)
		if err != nil {
			return err
		}
		return exitOf(out)
	}
	if st.Status == journal.StatusCompleted {
		fmt.Fprintf(a.stderr, "keel: run %s completed; it continues with your message as a follow-up\n", runID)
	}
	live := &liveOptions{Params: assemble.Params{APIKey: f.apiKey, APIKeyEnv: f.apiKeyEnv}, handoff: f.handoff, contextWindow: ch.ContextWindow, gate: f.gate,
		limits: ch.Limits, settings: ch.Settings}
	if ch.Settings != nil {
		fmt.Fprintf(a.stderr, "keel: settings changed from now on (journaled): %s\n", strings.Join(ch.Settings.Changes(st.Settings), ", "))
	}
	run, err := a.newWiring(ctx, runAsNow(st), live)
	if err != nil {
		return err
	}
	defer run.Close()
	x := a.execution(rt, run, live, f.json, f.quiet)
	x.Attached = plan.Attach // asked (or waited for) before anything is journaled
	return execute(ctx, x, runID, ld, message)
}

// handoffCompleted refuses to hand off a completed run without a
// message (it says "hand off", not "resume"). It wraps
// agent.ErrRunCompleted.
type handoffCompleted struct{ runID string }

func (e *handoffCompleted) Error() string {
	return fmt.Sprintf("run %s already completed; nothing to hand off (to continue it with a follow-up in a fresh context, give --message TEXT)", e.runID)
}

func (e *handoffCompleted) Unwrap() error { return agent.ErrRunCompleted }

// runAsNow returns the run's run.created payload with the execution
// settings it has now (a resume may have replaced them).
func runAsNow(st *agent.State) *agent.RunCreated {
	c := *st.Created
	set := st.Settings
	c.Settings = &set
	return &c
}

// resumeLimits returns the limits given to a resume (f.changed): only
// those replace the run's own, 0 meaning no limit (docs/limits.md).
func (f *runFlags) resumeLimits() *api.Limits {
	if f.changed == nil {
		return nil
	}
	var l api.Limits
	given := false
	for name, set := range map[string]func(){"max-steps": func() { l.MaxSteps = &f.maxSteps }, "max-tokens": func() { l.MaxTokens = &f.maxTokens },
		"max-cost": func() { l.MaxCost = &f.maxCost }, "max-tool-calls": func() { l.MaxToolCalls = &f.maxToolCalls }, "timeout": func() { l.Timeout = f.timeout.String() }} {
		if f.changed(name) {
			set()
			given = true
		}
	}
	if !given {
		return nil
	}
	return &l
}

// shown is status as listed: a running run whose lease is free (on
// this machine: nobody executes it) was interrupted (a crash, a kill)
// and waits for keel runs resume.
func (l *local) shown(ctx context.Context, id, status string) string {
	if lk, ok := l.store.(journal.Locker); ok && status == string(journal.StatusRunning) {
		if h, err := lk.Holder(ctx, id); err == nil && h == "" {
			return "interrupted"
		}
	}
	return status
}

// shown is status as the server lists it: its running runs execute.
func (r *remote) shown(_ context.Context, _, status string) string { return status }
