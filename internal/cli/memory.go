package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/memory"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/visible"
)

// memoryScopes returns the memory scopes a run sees: its agent's, the
// user's it acts for, its project's (the workspace) and the team's.
func memoryScopes(c *agent.RunCreated) memory.Scopes {
	return memory.Scopes{Agent: c.Principal, User: c.OnBehalfOf, Project: memory.ProjectID(c.Workspace)}
}

// offerMemory fixes in c the memory offered to the run (c.Recall): the
// entries of its scopes relevant to its task within budget tokens (0:
// memory.DefaultBudget). The run is then offered the memory tools.
func offerMemory(ctx context.Context, store journal.Store, c *agent.RunCreated, budget int) error {
	r, err := memory.New(store, nil).Recall(ctx, &memory.RecallParams{Scopes: memoryScopes(c), Task: c.Task, Budget: budget, Family: agent.LookupFamily(c.Model)})
	if err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	c.Recall = r
	return nil
}

// addMemoryTools registers memory_search and memory_write in r for a
// run that was offered memory (c.Recall), over store (nil: a registry
// that only records the tools' definitions, never runs them).
func addMemoryTools(r *tool.Registry, c *agent.RunCreated, store journal.Store) {
	if c.Recall == nil {
		return
	}
	var ms *memory.Store
	if store != nil {
		ms = memory.New(store, nil)
	}
	memory.AddTools(r, &memory.ToolParams{Store: ms, Scopes: memoryScopes(c)})
}

// moreTools adds a run's memory and skill tools (assemble.Assembler's
// MoreTools): memory_search and memory_write when it was offered
// memory, use_skill when it was offered skills, propose_skill and
// promote_skill when it proposes skills.
func (a *app) moreTools(ctx context.Context, c *agent.RunCreated, r *tool.Registry, p *assemble.Params) (func() error, error) {
	propose := p != nil && p.ProposeSkills || hasTool(c.Tools, proposeSkillTool)
	addSkillTool(r, c)
	if c.Recall == nil {
		return nil, nil
	}
	st, err := a.openStore(ctx)
	if err != nil {
		return nil, err
	}
	addMemoryTools(r, c, st)
	if propose {
		a.addSkillPromotionTools(r, c, st)
	}
	return st.Close, nil
}

func (a *app) memoryCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "List, show, edit and forget what agents remember across runs",
		Long: `Memory entries are notes agents (memory_write) and people keep across
runs, per scope: agent:NAME, agent:NAME/user:USER, user:USER, project:PATH
(a workspace) and team. Each entry names the run and call that wrote it and
carries labels (trusted or untrusted origin, public or private). Nothing is
overwritten: edit writes a new entry that supersedes the old one, and
forget keeps the entry in the journal but offers it to no later run.
See docs/memory.md.`,
	}
	cmd.AddCommand(a.memoryListCmd(), a.memoryShowCmd(), a.memoryEditCmd(), a.memoryForgetCmd(), a.memoryExportCmd(), a.memoryImportCmd())
	return cmd
}

func (a *app) memoryListCmd() *cobra.Command {
	var scopes []string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List memory entries with the runs they were offered to and used by",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openStore(cmd.Context())
			if err != nil {
				return err
			}
			defer store.Close()
			p := &memory.ListParams{All: all}
			for _, s := range scopes {
				if err := memory.Scope(s).Check(); err != nil {
					return &usageError{err}
				}
				p.Scopes = append(p.Scopes, memory.Scope(s))
			}
			list, err := memory.New(store, nil).List(cmd.Context(), p)
			if err != nil {
				return err
			}
			use, err := memory.Usage(cmd.Context(), store)
			if err != nil {
				return err
			}
			return printMemory(a.stdout, list, use, asJSON)
		},
	}
	cmd.Flags().StringArrayVar(&scopes, "scope", nil, "only this scope (repeatable): agent:NAME, agent:NAME/user:USER, user:USER, project:PATH, team")
	cmd.Flags().BoolVar(&all, "all", false, "include superseded and forgotten entries")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines")
	return cmd
}

// memoryRow is one entry as keel memory list prints it.
type memoryRow struct {
	memory.Entry
	Offered int `json:"offered_runs"`
	Used    int `json:"used_runs"`
}

func printMemory(w io.Writer, list []memory.Entry, use map[string]*memory.Use, asJSON bool) error {
	if asJSON {
		rows := make([]memoryRow, len(list))
		for i, e := range list {
			rows[i] = memoryRow{Entry: e}
			if u := use[e.ID]; u != nil {
				rows[i].Offered, rows[i].Used = len(u.Offered), len(u.Used)
			}
		}
		return jsonLines(w, rows)
	}
	if len(list) == 0 {
		fmt.Fprintln(w, "no memory entries")
		return nil
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSCOPE\tLABELS\tFROM\tOFFERED\tUSED\tSTATE\tTEXT")
	for _, e := range list {
		from := e.Source.Run
		if from == "" {
			from = e.Source.By
		}
		state := "current"
		switch {
		case e.Forgotten != nil:
			state = "forgotten"
		case e.SupersededBy != "":
			state = "superseded by " + e.SupersededBy
		}
		off, used := 0, 0
		if u := use[e.ID]; u != nil {
			off, used = len(u.Offered), len(u.Used)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s,%s\t%s\t%d\t%d\t%s\t%s\n", e.ID, visible.String(string(e.Scope)), e.Labels.Integrity, e.Labels.Confidentiality,
			visible.String(from), off, used, state, visible.String(firstLineOf(e.Text, 60)))
	}
	return tw.Flush()
}

func firstLineOf(s string, n int) string {
	l, _, _ := strings.Cut(s, "\n")
	if r := []rune(l); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return l
}

func (a *app) memoryShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show an entry: its text, provenance, labels, versions and the runs that were offered and used it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			hist, err := memory.New(store, nil).History(ctx, args[0])
			if errors.Is(err, memory.ErrNotFound) {
				return &usageError{err}
			}
			if err != nil {
				return err
			}
			use, err := memory.Usage(ctx, store)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(a.stdout).Encode(struct {
					Versions []memory.Entry         `json:"versions"`
					Use      map[string]*memory.Use `json:"use"`
				}{hist, use})
			}
			for i, e := range hist {
				if i > 0 {
					fmt.Fprintln(a.stdout)
				}
				mark := ""
				if e.ID == args[0] {
					mark = "  <-"
				}
				fmt.Fprintf(a.stdout, "%s%s\n", e.ID, mark)
				fmt.Fprintf(a.stdout, "  scope:   %s\n  labels:  %s, %s\n  written: %s", visible.String(string(e.Scope)), e.Labels.Integrity, e.Labels.Confidentiality, e.Time.UTC().Format("2006-01-02 15:04:05Z"))
				if e.Source.Run != "" {
					fmt.Fprintf(a.stdout, " by run %s (call %s, agent %s", e.Source.Run, visible.String(e.Source.Call), visible.String(e.Source.Agent))
					if e.Source.User != "" {
						fmt.Fprintf(a.stdout, " for %s", visible.String(e.Source.User))
					}
					fmt.Fprint(a.stdout, ")")
				}
				if e.Source.By != "" {
					fmt.Fprintf(a.stdout, " by %s", visible.String(e.Source.By))
				}
				fmt.Fprintf(a.stdout, " (memory stream event %d)\n", e.Seq)
				if e.Supersedes != "" {
					fmt.Fprintf(a.stdout, "  supersedes: %s\n", e.Supersedes)
				}
				if e.SupersededBy != "" {
					fmt.Fprintf(a.stdout, "  superseded by: %s\n", e.SupersededBy)
				}
				if f := e.Forgotten; f != nil {
					fmt.Fprintf(a.stdout, "  forgotten: %s by %s: %s\n", f.Time.UTC().Format("2006-01-02 15:04:05Z"), visible.String(f.By), visible.String(f.Reason))
				}
				if u := use[e.ID]; u != nil {
					fmt.Fprintf(a.stdout, "  offered to %d runs %s\n  used by %d runs %s\n", len(u.Offered), strings.Join(u.Offered, " "), len(u.Used), strings.Join(u.Used, " "))
				} else {
					fmt.Fprintln(a.stdout, "  offered to no run")
				}
				for _, l := range strings.Split(e.Text, "\n") {
					fmt.Fprintf(a.stdout, "  | %s\n", visible.String(l))
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON")
	return cmd
}

func (a *app) memoryEditCmd() *cobra.Command {
	var text, file, by string
	cmd := &cobra.Command{
		Use:   "edit ID (--text TEXT | --file FILE)",
		Short: "Write a new version of an entry; the old one is kept, superseded",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (text == "") == (file == "") {
				return usagef("give the new text with --text or --file ('-' for stdin)")
			}
			if file != "" {
				var b []byte
				var err error
				if file == "-" {
					b, err = io.ReadAll(io.LimitReader(os.Stdin, memory.MaxText+1))
				} else {
					b, err = os.ReadFile(file)
				}
				if err != nil {
					return &usageError{err}
				}
				text = string(b)
			}
			store, err := a.openStore(cmd.Context())
			if err != nil {
				return err
			}
			defer store.Close()
			e, err := memory.New(store, nil).Edit(cmd.Context(), args[0], text, a.person(by))
			if errors.Is(err, memory.ErrNotFound) || errors.Is(err, memory.ErrSuperseded) || errors.Is(err, memory.ErrInvalid) {
				return &usageError{err}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s supersedes %s\n", e.ID, args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&text, "text", "", "the new text")
	cmd.Flags().StringVar(&file, "file", "", "read the new text from this file ('-' for stdin)")
	cmd.Flags().StringVar(&by, "by", "", "who edits (default: your login name)")
	return cmd
}

func (a *app) memoryForgetCmd() *cobra.Command {
	var by, reason string
	cmd := &cobra.Command{
		Use:   "forget ID",
		Short: "Offer an entry to no later run (it stays in the journal, marked)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := a.openStore(cmd.Context())
			if err != nil {
				return err
			}
			defer store.Close()
			err = memory.New(store, nil).Forget(cmd.Context(), args[0], a.person(by), reason)
			if errors.Is(err, memory.ErrNotFound) {
				return &usageError{err}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "forgot %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&by, "by", "", "who forgets (default: your login name)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (journaled)")
	return cmd
}

func (a *app) memoryExportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "export",
		Short: "Write the memory stream as JSON lines with its hashes (keel memory import reads them)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openStore(cmd.Context())
			if err != nil {
				return err
			}
			defer store.Close()
			evs, err := memory.New(store, nil).Export(cmd.Context(), store)
			if errors.Is(err, journal.ErrNotFound) {
				return nil // no memory yet
			}
			if err != nil {
				return err
			}
			return jsonLines(a.stdout, evs)
		},
	}
}

func (a *app) memoryImportCmd() *cobra.Command {
	var by string
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Add the current entries of an exported memory stream (chain verified; ids already here are skipped)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			evs, err := readJSONLFile(args[0])
			if err != nil {
				return err
			}
			store, err := a.openStore(cmd.Context())
			if err != nil {
				return err
			}
			defer store.Close()
			res, err := memory.New(store, nil).Import(cmd.Context(), evs, a.person(by))
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "imported %d entries, skipped %d already here\n", res.Imported, res.Skipped)
			return nil
		},
	}
	cmd.Flags().StringVar(&by, "by", "", "who imports (default: your login name)")
	return cmd
}

// offer fixes in c, a run keel run creates, the memory and skills it
// is offered (live's settings: --memory-budget, --no-memory,
// --no-skills), from store.
func (a *app) offer(ctx context.Context, store journal.Store, c *agent.RunCreated, live *liveOptions) error {
	if live.memoryBudget > 0 && c.Recall == nil {
		if err := offerMemory(ctx, store, c, live.memoryBudget); err != nil {
			return err
		}
	}
	if !live.skills || c.Skills != nil {
		return nil
	}
	eng, err := agent.RunPolicy(c)
	if err != nil {
		return err
	}
	if eng == nil {
		eng = policy.Default()
	}
	a.offerSkills(ctx, store, c, eng)
	return nil
}
