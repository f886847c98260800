package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/server"
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
The scripted model claims only what happened: after a denied edit or
failing tests the run fails, saying so.

With --server, the demo runs on the team server, with the same policy: at
a terminal the command asks you; with stdin not a terminal it stops there
and exits 3 with the commands that approve or deny (--wait keeps waiting).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.demo(cmd.Context(), sb, keep, gate) },
	}
	cmd.Flags().StringVar(&sb, "sandbox", "", "sandbox backend: linux (default) or none (NO isolation)")
	cmd.Flags().BoolVar(&keep, "keep", true, "keep the demo workspace (a new directory in the system's temporary directory, named at the end) after the run; --keep=false removes it")
	registerWaitFlags(cmd.Flags(), &gate)
	return cmd
}

func (a *app) demo(ctx context.Context, sbFlag string, keep bool, gate gateFlags) error {
	sbKind, err := a.sandboxKind(sbFlag)
	if err != nil {
		return err
	}
	fmt.Fprintln(a.stderr, "keel demo:", demo.Label)
	ws, err := os.MkdirTemp("", "keel-demo-")
	if err != nil {
		return err
	}
	if keep {
		// Whatever the outcome, say where the project stays.
		defer func() {
			fmt.Fprintf(a.stderr, "keel demo: the demo workspace stays in %s (remove it with: rm -rf %s; keel demo --keep=false removes it at the end)\n", ws, ws)
		}()
	} else {
		defer os.RemoveAll(ws)
	}
	if err := demo.WriteProject(ws); err != nil {
		return err
	}
	haveGit := gitInit(ws) == nil
	created := &agent.RunCreated{
		Task: demo.Task, System: defaultSystemPrompt("/workspace"), Model: "scripted:demo",
		Limits:    agent.Limits{MaxSteps: 20},
		Workspace: ws, MountPath: "/workspace", Sandbox: sbKind, Principal: "keel-demo",
	}
	if created.SandboxLimits, err = (&limitFlags{memory: defaultMemory, processes: defaultProcesses, fileSize: defaultFileSize, openFiles: defaultOpenFiles, output: defaultOutput}).parse(); err != nil {
		return err
	}
	set := agent.DefaultSettings()
	created.Settings = &set
	created.StateDir = assemble.StateDir(a.home, ws)
	// The demo shows the gate: its policy asks before the edit. At a
	// terminal you decide; otherwise (a script, a pipe) the demo approves
	// as a stand-in, showing what it approved, unless --no-wait stops it
	// at the approval.
	created.Policy = agent.NewPolicyRef(server.DemoPolicy())
	live := &liveOptions{gate: gate}
	if !gate.wait && !gate.noWait && !a.inline() {
		live.gate.wait, live.standIn = true, "keel demo (stand-in)"
	}
	runID, execErr := a.createAndExecute(ctx, created, live, false, false)
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
	events, err := store.Read(ctx, runID, 1)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "\n== timeline (keel runs show %s --db %s) ==\n", runID, redact.DSN(a.dbPath()))
	if err := a.showTimeline(runID, events, verifyRun(ctx, store, runID, events), nil); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "\n== diff made in %s (keel runs diff %s --db %s) ==\n", ws, runID, redact.DSN(a.dbPath()))
	if haveGit {
		if err := printRunDiff(ctx, a.stdout, workspaceDiff, runID, created, false); err != nil {
			fmt.Fprintf(a.stdout, "(diff failed: %v)\n", err)
		}
	} else {
		fmt.Fprintln(a.stdout, "(git is not installed: compare textstats.py yourself)")
	}
	fmt.Fprintln(a.stdout, "\nThe model in this demo was scripted, not an AI model. Run a real one with:")
	fmt.Fprintln(a.stdout, "  OPENAI_API_KEY=... keel run --model openai:gpt-4o --workspace DIR 'your task'")
	return execErr
}

// gitInit makes dir a git repository with one commit, so the demo can show
// its diff. It uses a fixed identity and no user config.
func gitInit(dir string) error {
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "-A"},
		{"-c", "user.name=keel demo", "-c", "user.email=demo@keel.invalid", "-c", "commit.gpgsign=false", "commit", "-q", "-m", "textstats before the demo"},
	} {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %v: %s", args, err, out)
		}
	}
	return nil
}
