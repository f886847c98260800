package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

func (a *app) demoCmd() *cobra.Command {
	var sb string
	var keep bool
	var gate gateFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a bundled example task offline with a scripted demonstration model",
		Long: `Demo runs a small bundled project with a failing test through Keel's real
sandbox, tools and journal. The model is SCRIPTED: its turns are fixed in
the keel binary and no AI model is called, so it needs no API key and no
network. It then prints the run's timeline and the diff it made.

The demo's policy asks a person before the agent edits a file, so the
demo shows the gate: at a terminal you see the edit as a diff and
approve (y) or deny (n) it. With stdin not a terminal (a script,
</dev/null) the demo shows the same and approves as a stand-in; --no-wait
stops there instead and exits 3 with the commands that approve or deny.
The scripted model claims only what happened: after a denied edit the
run ends with its answer that nothing changed and the tests still fail;
if the edit cannot be made or the tests still fail after it, the run
fails, saying so.

With --server, the demo runs on the team server, with the same policy: at
a terminal the command asks you as above (the edit as a diff, y or n),
decided through the server, while anyone else may decide it meanwhile
(keel --server URL approve, the web UI); with stdin not a terminal it
stops there and exits 3 with the commands that approve or deny (--wait
keeps waiting).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.demo(cmd.Context(), sb, keep, gate) },
	}
	cmd.Flags().StringVar(&sb, "sandbox", "", "sandbox backend: linux (default) or none (NO isolation)")
	cmd.Flags().BoolVar(&keep, "keep", true, "keep the demo workspace (a new directory in the system's temporary directory, named at the end) after the run; --keep=false removes it once the run ended (a run paused at its approval keeps it)")
	registerWaitFlags(cmd.Flags(), &gate)
	cmd.Flags().Lookup("no-wait").Usage = "on an approval, pause the run and exit 3 instead of approving as a stand-in when stdin is not a terminal"
	return cmd
}

func (a *app) demo(ctx context.Context, sbFlag string, keep bool, gate gateFlags) error {
	sbKind, err := a.sandboxKind(sbFlag)
	if err != nil {
		return err
	}
	fmt.Fprintln(a.stderr, "keel demo:", demo.Label)
	// The demo shows the gate: its policy asks before the edit. At a
	// terminal you decide; otherwise (a script, a pipe) the demo approves
	// as a stand-in, showing what it approved, unless --no-wait stops it
	// at the approval.
	live := &liveOptions{gate: gate, demo: true}
	if !gate.wait && !gate.noWait && !a.inline() {
		live.gate.wait, live.standIn = true, "keel demo (stand-in)"
	}
	// The service makes the demo run as it makes the server's, in a
	// fresh copy of the demo project.
	var created *agent.RunCreated
	runID, execErr := a.createAndExecute(ctx, func(ctx context.Context, svc *service.Service) (*agent.RunCreated, error) {
		c, err := svc.Prepare(ctx, service.Local(a.person("")), &service.CreateRun{CreateRun: api.CreateRun{Demo: true, Sandbox: sbKind}})
		created = c
		return c, err
	}, live, false, false)
	remove := false
	if created != nil {
		ws := created.Workspace
		// A demo whose run was not journaled keeps nothing.
		if keep && runID != "" {
			// Whatever the outcome, say where the project stays.
			defer fmt.Fprintf(a.stderr, "keel demo: the demo workspace stays in %s (remove it with: rm -rf %s; keel demo --keep=false removes it at the end)\n", ws, ws)
		} else {
			remove = true
			defer func() {
				if remove {
					os.RemoveAll(ws)
				}
			}()
		}
	}
	if runID == "" {
		return execErr
	}
	// Show what the run did even when Ctrl-C ended it.
	ctx, cancel := closingContext(ctx)
	defer cancel()
	store, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if remove {
		// A run that waits for a person (Ctrl-C at the question,
		// --no-wait) goes on in its workspace when it is decided:
		// --keep=false removes it only after a run that ended.
		events, err := store.Read(ctx, runID, 1)
		types := make([]journal.Type, len(events))
		for i, e := range events {
			types[i] = e.Type
		}
		if s, _ := journal.TailStatus(types...); err == nil && !s.Terminal() {
			remove = false
			ws := created.Workspace
			defer fmt.Fprintf(a.stderr, "keel demo: run %s is %s, so its workspace stays in %s for the decision (keel approve, keel deny) and the rest of the run; --keep=false removes a demo's workspace only after its run ended (remove it with: rm -rf %s)\n", runID, s, ws, ws)
		}
	}
	if err := a.demoShow(ctx, &local{a: a, store: store}, runID, a.keelCmd()); err != nil {
		return err
	}
	return execErr
}

// demoSource is where keel demo reads what its run did: the local
// journal (a local without its service) or the team server.
type demoSource interface {
	Events(ctx context.Context, id string) ([]journal.Event, error)
	VerifyEvents(ctx context.Context, id string, events []journal.Event) error
	tui.DiffSource
}

// demoShow prints on stdout what the demo's run did, in both forms
// alike: its timeline, the files it changed with their diff (none for a
// paused or denied demo), and how to run a real
// model. keel is the command that reaches the run (keel --db FILE, keel
// --server URL), for the hints.
func (a *app) demoShow(ctx context.Context, src demoSource, runID, keel string) error {
	events, err := src.Events(ctx, runID)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "\n== timeline (%s runs show %s) ==\n", keel, runID)
	if err := a.showTimeline(runID, events, src.VerifyEvents(ctx, runID, events), nil); err != nil {
		return err
	}
	created, err := agent.Created(events)
	if err != nil {
		return err
	}
	tui.DemoEnd(ctx, a.stdout, a.stderr, src, runID, created, keel)
	return nil
}
