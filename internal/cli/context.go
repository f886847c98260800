package cli

import (
	"encoding/json"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/memory"
)

// contextFlags are the flags of `keel run` about the context window,
// compaction, memory files and the action mode (docs/context.md).
type contextFlags struct {
	window       int
	threshold    float64
	handoffAfter int
	notesFile    string
	actionMode   string
	noMemory     bool
	memoryBudget int
	noSkills     bool
	// proposeSkills offers propose_skill and promote_skill.
	proposeSkills bool
}

func (f *contextFlags) register(fl *pflag.FlagSet) {
	fl.IntVar(&f.window, "context-window", 0, "the model's context window in tokens (0: from the model family; negative: never compact)")
	fl.Float64Var(&f.threshold, "compact-threshold", agent.DefaultCompactThreshold, "compact when the next request passes this fraction of the window")
	fl.IntVar(&f.handoffAfter, "handoff-after", 0, "after this many compactions, continue in a fresh context from a summary and the notes file (0: never)")
	fl.StringVar(&f.notesFile, "notes-file", agent.DefaultNotesFile, "workspace file whose notes a handoff carries into the fresh context")
	fl.StringVar(&f.actionMode, "action-mode", "tools", "how the model acts: tools (function calling) or text (```bash and ```python blocks, for models without function calling)")
	fl.BoolVar(&f.noMemory, "no-memory", false, "leave memory out: no AGENTS.md / KEEL.md memory files, no entries from the memory stores, no memory tools")
	fl.BoolVar(&f.proposeSkills, "propose-skills", false, "let the agent propose skills from its work (propose_skill) and ask a person to promote one (promote_skill); see docs/skills.md")
	fl.BoolVar(&f.noSkills, "no-skills", false, "offer no skills (the user's ~/.keel/skills and the project's .keel/skills.lock)")
	fl.IntVar(&f.memoryBudget, "memory-budget", memory.DefaultBudget, "most tokens the memory section (entries of the memory stores relevant to the task) adds to each request")
}

// runsTokensCmd is `keel runs tokens RUN`.
func (a *app) runsTokensCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "tokens RUN",
		Annotations: firstArgIsRun,
		Short:       "Per step: the prompt tokens Keel estimated against those the provider counted, the fixed prefix and compactions",
		Long: `tokens prints, for each model call of RUN, Keel's estimate of the prompt
it sent (see docs/context.md) next to the input tokens the provider
reported (for a replay: the recorded run's), the cached part, the
growth from the previous step, and the compactions. The header gives the
fixed prefix (system prompt, memory files and tool schemas), which is the
same in every request so that provider prompt caching applies.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			events, err := store.Read(ctx, args[0], 1)
			if err != nil {
				return err
			}
			rep, err := tui.Tokens(args[0], events)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return rep.Print(a.stdout)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// runsHandoffCmd is `keel runs handoff RUN`.
func (a *app) runsHandoffCmd() *cobra.Command {
	var f runFlags
	var message string
	cmd := &cobra.Command{
		Use:         "handoff RUN",
		Annotations: firstArgIsRun,
		Short:       "Continue a run in a fresh context: a summary, the plan and the notes file replace its turns",
		Long: `handoff resumes RUN after replacing everything in its context with a
summary written by the model (or a mechanical one), the plan and the
workspace notes file (see --notes-file of keel run). The journal and the
workspace keep everything; only what the model sees is renewed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.handoff = true
			f.changed = cmd.Flags().Changed
			return a.resume(cmd.Context(), args[0], &f, message)
		},
	}
	registerResumeFlags(cmd.Flags(), &f, &message)
	return cmd
}
