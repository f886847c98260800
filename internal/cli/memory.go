package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/memory"
	"github.com/keel-run/keel/server/api"
)

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
With --server, the team server's memory: a token sees the scopes of its
agents' runs. See docs/memory.md.`,
	}
	cmd.AddCommand(a.memoryListCmd(), a.memoryShowCmd(), a.memoryEditCmd(), a.memoryForgetCmd(), a.memoryExportCmd(), a.memoryImportCmd())
	return cmd
}

// memoryBackend is the memory commands' backend (see backend.go): the
// local journal or, with --server, the team server, where a token sees
// only its agents' scopes. Export and import are local only.
type memoryBackend interface {
	Memory(ctx context.Context, p *client.MemoryParams) ([]api.MemoryEntry, error)
	MemoryEntry(ctx context.Context, id string) (*api.MemoryHistory, error)
	// EditMemory and ForgetMemory act as the backend's person (--by
	// locally; a server records the token's name).
	EditMemory(ctx context.Context, id, text string) (*api.MemoryEntry, error)
	ForgetMemory(ctx context.Context, id, reason string) error
}

func (a *app) memoryListCmd() *cobra.Command {
	var scopes []string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:         "list",
		Annotations: bothForms,
		Short:       "List memory entries with the runs they were offered to and used by",
		Args:        cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range scopes {
				if err := memory.Scope(s).Check(); err != nil {
					return &usageError{err}
				}
			}
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				list, err := b.Memory(ctx, &client.MemoryParams{Scopes: scopes, All: all})
				if err != nil {
					return err
				}
				return tui.MemoryEntries(a.stdout, list, asJSON)
			}, "scope", "all", "json")
		},
	}
	cmd.Flags().StringArrayVar(&scopes, "scope", nil, "only this scope (repeatable): agent:NAME, agent:NAME/user:USER, user:USER, project:PATH, team")
	cmd.Flags().BoolVar(&all, "all", false, "include superseded and forgotten entries")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines")
	return cmd
}

func (a *app) memoryShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "show ID",
		Annotations: bothForms,
		Short:       "Show an entry: its text, provenance, labels, versions and the runs that were offered and used it",
		Args:        cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				h, err := b.MemoryEntry(ctx, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(a.stdout).Encode(h)
				}
				tui.MemoryHistory(a.stdout, h, args[0])
				return nil
			}, "json")
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON")
	return cmd
}

func (a *app) memoryEditCmd() *cobra.Command {
	var text, file, by string
	cmd := &cobra.Command{
		Use:         "edit ID (--text TEXT | --file FILE)",
		Annotations: bothForms,
		Short:       "Write a new version of an entry; the old one is kept, superseded",
		Args:        cobra.ExactArgs(1),
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
			return a.withBackendAs(cmd, by, func(ctx context.Context, b backend) error {
				e, err := b.EditMemory(ctx, args[0], text)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "%s supersedes %s\n", e.ID, args[0])
				return nil
			}, "text", "file")
		},
	}
	cmd.Flags().StringVar(&text, "text", "", "the new text")
	cmd.Flags().StringVar(&file, "file", "", "read the new text from this file ('-' for stdin)")
	cmd.Flags().StringVar(&by, "by", "", "who edits (default: your login name; with --server, your token's name)")
	return cmd
}

func (a *app) memoryForgetCmd() *cobra.Command {
	var by, reason string
	cmd := &cobra.Command{
		Use:         "forget ID",
		Annotations: bothForms,
		Short:       "Offer an entry to no later run (it stays in the journal, marked)",
		Args:        cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackendAs(cmd, by, func(ctx context.Context, b backend) error {
				if err := b.ForgetMemory(ctx, args[0], reason); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "forgot %s\n", args[0])
				return nil
			}, "reason")
		},
	}
	cmd.Flags().StringVar(&by, "by", "", "who forgets (default: your login name; with --server, your token's name)")
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
			return tui.JSONLines(a.stdout, evs)
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
