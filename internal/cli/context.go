package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/memory"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/codeact"
	"github.com/keel-run/keel/tool"
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

// apply fixes the context configuration, memory and action mode in c.
// modelName is the model's name for the family table (the recorded
// model of a replay). A window too small for the run's fixed part is a
// usage error (see checkContextWindow).
func (f *contextFlags) apply(a *app, c *agent.RunCreated, modelName string) error {
	if f.threshold <= 0 || f.threshold > 1 {
		return usagef("--compact-threshold %g: want a fraction in (0, 1]", f.threshold)
	}
	if f.handoffAfter < 0 {
		return usagef("--handoff-after %d: want 0 or more", f.handoffAfter)
	}
	switch f.actionMode {
	case "tools", "":
	case "text":
		// A run in text mode completes only through its marker: the
		// convention of mini-swe-agent unless the user set another.
		if c.CompletionMarker == "" {
			c.CompletionMarker = DefaultCompletionMarker
		}
		c.FormatError = codeact.FormatError(nil, c.CompletionMarker)
	default:
		return usagef("--action-mode %q: want tools or text", f.actionMode)
	}
	if !f.noMemory {
		max := defaultMemoryBytes
		if a.cfg != nil && a.cfg.MemoryMaxBytes > 0 {
			max = a.cfg.MemoryMaxBytes
		}
		mem, warns, err := readMemory(a.home, c.Workspace, max)
		if err != nil {
			return err
		}
		for _, w := range warns {
			fmt.Fprintln(a.stderr, "keel: "+w)
		}
		c.Memory = mem
	}
	fam := agent.LookupFamily(modelName)
	if f.window >= 0 {
		w := f.window
		if w == 0 {
			w = fam.Window
		}
		c.Context = &agent.ContextConfig{Window: w, Threshold: f.threshold, Family: fam.Name, HandoffAfter: f.handoffAfter, NotesFile: f.notesFile}
		probe := *c
		if len(probe.Tools) == 0 {
			// The tools are recorded when the run is wired; they are the
			// same set, estimated as the journal will hold them
			// (run.created re-encodes their schemas).
			r := assemble.ToolRegistry(agent.DefaultSettings())
			if !f.noMemory {
				addMemoryTools(r, &agent.RunCreated{Recall: &agent.Recall{}}, nil)
			}
			b, err := json.Marshal(agent.ToolInfos(r))
			if err == nil {
				err = json.Unmarshal(b, &probe.Tools)
			}
			if err != nil {
				return fmt.Errorf("tool schemas: %w", err)
			}
		}
		if err := checkContextWindow(&probe, w, f.window == 0); err != nil {
			return err
		}
	}
	return nil
}

// checkContextWindow refuses a context window smaller than the run's
// fixed part plus agent.MinContextRoom (agent.MinContextWindow): no
// request could fit, and every compaction would be in vain. fromFamily
// says the window is the model family's default, not a flag.
func checkContextWindow(c *agent.RunCreated, window int, fromFamily bool) error {
	fl := agent.MinContextWindow(c)
	if window >= fl.Min {
		return nil
	}
	what := fmt.Sprintf("--context-window %d", window)
	if fromFamily {
		what = fmt.Sprintf("the model family's context window (%d tokens)", window)
	}
	return usagef("%s is too small for this run: every request carries %s tokens that never leave it (system prompt and memory %s, tool schemas %s, task %s), and a window needs at least %s tokens more for the conversation and the answer; pass --context-window %d or more (or a negative value to never compact)",
		what, num(int64(fl.System+fl.Tools+fl.Task)), num(int64(fl.System)), num(int64(fl.Tools)), num(int64(fl.Task)), num(agent.MinContextRoom), fl.Min)
}

// defaultMemoryBytes caps the memory files put in the system prompt
// (config.toml: memory_max_bytes).
const defaultMemoryBytes = 16 << 10

// memoryNames are the memory files, in the order they are read from each
// directory.
var memoryNames = []string{"AGENTS.md", "KEEL.md"}

// readMemory reads the memory files of the user's Keel directory and of
// the workspace (in that order: the workspace's are more specific and
// come last) into one text of at most max bytes. A workspace is the
// agent's to change, so a memory file is read only when it is a regular
// file that resolves inside its directory: a symbolic link leading out
// of it (to a secret the sandbox hides), a FIFO (whose open would block
// forever) or a device (/dev/zero never ends) is skipped with a warning,
// and no file is read beyond max bytes (tool.ReadRegular). Missing
// files are skipped; an unreadable directory is an error for the
// workspace and skipped for the Keel directory.
func readMemory(home, workspace string, max int) (string, []string, error) {
	type file struct{ label, text string }
	var files []file
	var warns []string
	for _, dir := range []struct{ path, label string }{{home, "~/.keel/"}, {workspace, ""}} {
		if dir.path == "" {
			continue
		}
		root, err := os.OpenRoot(dir.path)
		if errors.Is(err, fs.ErrNotExist) || err != nil && dir.label != "" {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("memory files in %s: %w", dir.path, err)
		}
		for _, n := range memoryNames {
			b, err := tool.ReadRegular(root, n, int64(max))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				warns = append(warns, fmt.Sprintf("memory file %s not read (a memory file must be a regular file inside its directory): %v", filepath.Join(dir.path, n), err))
				continue
			}
			if t := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD")); t != "" {
				files = append(files, file{dir.label + n, t})
			}
		}
		root.Close()
	}
	if len(files) == 0 {
		return "", warns, nil
	}
	var b strings.Builder
	b.WriteString("# Memory files\n\nInstructions and notes from the user and the project; follow them.")
	for _, f := range files {
		fmt.Fprintf(&b, "\n\n## %s\n\n%s", f.label, f.text)
	}
	s := b.String()
	if len(s) > max {
		cut := max
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + fmt.Sprintf("\n\n[… memory files cut at %d bytes (memory_max_bytes in config.toml)]", max)
	}
	return s, warns, nil
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
			rep, err := tokenReport(args[0], events)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return rep.print(a.stdout)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// tokenRow is one model call or compaction of a token report.
type tokenRow struct {
	Step int `json:"step,omitempty"`
	// Estimate is Keel's estimate of the request; Recorded the provider's
	// input tokens; Cached their cached part.
	Estimate int   `json:"estimate"`
	Recorded int64 `json:"recorded"`
	Cached   int64 `json:"cached,omitempty"`
	// Growth is Estimate minus the previous step's.
	Growth int `json:"growth"`
	// Messages is the number of messages in the request.
	Messages int `json:"messages"`
	// Compaction describes a context.compacted event instead of a step.
	Compaction string `json:"compaction,omitempty"`
}

// tokenReportT is the result of `keel runs tokens`.
type tokenReportT struct {
	RunID  string `json:"run_id"`
	Model  string `json:"model"`
	Family string `json:"family"`
	Window int    `json:"window"`
	Prefix int    `json:"prefix_tokens"`
	System int    `json:"system_tokens"`
	Tools  int    `json:"tool_schema_tokens"`
	// PerTool is each tool schema's share of Tools, sorted by name.
	PerTool []toolTokens `json:"per_tool"`
	Rows    []tokenRow   `json:"rows"`
	// Replay is set when the recorded counts come from a recording.
	Replay bool `json:"replay,omitempty"`
	// MeanError and WorstError compare Estimate with Recorded over the
	// steps that have both, as fractions.
	MeanError  float64 `json:"mean_error"`
	WorstError float64 `json:"worst_error"`
	// GrowthKeel and GrowthRecorded are the mean growth per step, in
	// tokens, of Keel's estimate and of the recorded count, over pairs of
	// consecutive steps with no compaction between them (0 without any).
	GrowthKeel     float64 `json:"growth_per_step_keel"`
	GrowthRecorded float64 `json:"growth_per_step_recorded"`
}

// toolTokens is one tool schema's estimated size.
type toolTokens struct {
	Name   string `json:"name"`
	Tokens int    `json:"tokens"`
}

// tokenReport folds events one by one and, before each model response,
// rebuilds the request the run sent.
func tokenReport(runID string, events []journal.Event) (*tokenReportT, error) {
	if err := journal.Verify(runID, events); err != nil {
		return nil, err
	}
	st := &agent.State{RunID: runID}
	rep := &tokenReportT{RunID: runID}
	prev, steps := 0, 0
	var sum float64
	for i := range events {
		e := &events[i]
		if e.Type == journal.ModelResponded && st.Created != nil {
			v, err := agent.Decode(e)
			if err != nil {
				return nil, err
			}
			mr := v.(*agent.ModelResponded)
			req := agent.BuildRequest(st, 0)
			est := agent.EstimateRequest(req, st.Family())
			steps++
			rep.Rows = append(rep.Rows, tokenRow{Step: steps, Estimate: est, Recorded: mr.Usage.InputTokens, Cached: mr.Usage.CachedInputTokens, Growth: est - prev, Messages: len(req.Messages)})
			prev = est
			if mr.Usage.InputTokens > 0 {
				d := float64(int64(est)-mr.Usage.InputTokens) / float64(mr.Usage.InputTokens)
				if d < 0 {
					d = -d
				}
				sum += d
				rep.WorstError = max(rep.WorstError, d)
			}
		}
		if err := st.Apply(e); err != nil {
			return nil, err
		}
		if e.Type == journal.RunCreated {
			fam := st.Family()
			rep.Model, rep.Family, rep.Window = st.Created.Model, fam.Name, st.ContextWindow()
			rep.Prefix = agent.PrefixTokens(st, fam)
			rep.System = agent.EstimateRequest(&model.Request{System: agent.BuildRequest(st, 0).System}, fam)
			rep.Tools = rep.Prefix - rep.System
			for _, t := range st.Created.Tools {
				rep.PerTool = append(rep.PerTool, toolTokens{t.Name, agent.EstimateRequest(&model.Request{Tools: []model.ToolSpec{t.ToolSpec}}, fam)})
			}
			rep.Replay = strings.HasPrefix(st.Created.Model, "replay:")
		}
		if e.Type == journal.ContextCompacted {
			cs := st.Compactions()
			c := cs[len(cs)-1]
			kind := "compacted"
			if c.Handoff {
				kind = "handoff"
			}
			how := "model summary"
			if c.Mechanical {
				how = "mechanical summary"
			}
			rep.Rows = append(rep.Rows, tokenRow{Estimate: c.TokensAfter, Growth: c.TokensAfter - c.TokensBefore,
				Compaction: fmt.Sprintf("%s steps %d–%d (%s): %s → %s tokens", kind, c.FirstStep, c.LastStep, how, num(int64(c.TokensBefore)), num(int64(c.TokensAfter)))})
			prev = c.TokensAfter
		}
	}
	n := 0
	for _, r := range rep.Rows {
		if r.Compaction == "" && r.Recorded > 0 {
			n++
		}
	}
	if n > 0 {
		rep.MeanError = sum / float64(n)
	}
	var pairs int
	var gk, gr int64
	for i := 1; i < len(rep.Rows); i++ {
		a, b := rep.Rows[i-1], rep.Rows[i]
		if a.Compaction != "" || b.Compaction != "" || a.Recorded == 0 || b.Recorded == 0 {
			continue
		}
		pairs++
		gk += int64(b.Estimate - a.Estimate)
		gr += b.Recorded - a.Recorded
	}
	if pairs > 0 {
		rep.GrowthKeel, rep.GrowthRecorded = float64(gk)/float64(pairs), float64(gr)/float64(pairs)
	}
	return rep, nil
}

func (r *tokenReportT) print(w interface{ Write([]byte) (int, error) }) error {
	fmt.Fprintf(w, "run %s · model %s · family %s · window %s tokens\n", r.RunID, r.Model, r.Family, num(int64(r.Window)))
	fmt.Fprintf(w, "fixed prefix: %s tokens (system prompt and memory %s, tool schemas %s), the same in every request\n", num(int64(r.Prefix)), num(int64(r.System)), num(int64(r.Tools)))
	if len(r.PerTool) > 0 {
		var parts []string
		for _, t := range r.PerTool {
			parts = append(parts, fmt.Sprintf("%s %s", t.Name, num(int64(t.Tokens))))
		}
		fmt.Fprintf(w, "tool schemas: %s\n", strings.Join(parts, ", "))
	}
	if r.Replay {
		fmt.Fprintln(w, "RECORDED is the recorded run's own prompt (its system prompt and tools), not Keel's request: compare the growth.")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "STEP\tKEEL EST\tRECORDED\tCACHED\tDIFF\tGROWTH\tMSGS\t")
	for _, row := range r.Rows {
		if row.Compaction != "" {
			fmt.Fprintf(tw, "—\t%s\t\t\t\t%+d\t\t  %s\n", num(int64(row.Estimate)), row.Growth, row.Compaction)
			continue
		}
		diff := ""
		if row.Recorded > 0 {
			diff = fmt.Sprintf("%+.1f%%", 100*float64(int64(row.Estimate)-row.Recorded)/float64(row.Recorded))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%+d\t%d\t\n", row.Step, num(int64(row.Estimate)), num(row.Recorded), num(row.Cached), diff, row.Growth, row.Messages)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	what := "estimate vs recorded"
	if r.Replay {
		what = "estimate vs recorded (different prompts: the gap includes the difference of fixed prefixes)"
	}
	fmt.Fprintf(w, "\n%s: mean %.1f%%, worst %.1f%%\n", what, 100*r.MeanError, 100*r.WorstError)
	if r.GrowthKeel != 0 || r.GrowthRecorded != 0 {
		fmt.Fprintf(w, "growth per step (steps with no compaction between them): Keel %+.0f tokens, recorded %+.0f tokens\n", r.GrowthKeel, r.GrowthRecorded)
	}
	return nil
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
