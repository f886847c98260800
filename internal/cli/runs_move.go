package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/eval"
	"github.com/keel-run/keel/journal"
)

// runsExportCmd and runsImportCmd move runs between journals (a laptop's
// SQLite file and a team's PostgreSQL database, either way) as JSON lines
// with their hashes.
func (a *app) runsExportCmd() *cobra.Command {
	var out string
	var atif bool
	cmd := &cobra.Command{
		Use:         "export RUN...",
		Annotations: argsAreRuns,
		Short:       "Write runs, chain verified, as JSON lines for keel runs import",
		Long: `Export writes each run's events, verified first, as JSON lines with their
hashes (the format of keel audit export). keel runs import reads them into
another journal, for example from a laptop's SQLite file to a team's
PostgreSQL database:

  keel runs export RUN --db ~/.keel/keel.db -o run.jsonl
  keel runs import run.jsonl --db postgres://keel@db/keel

The workspace is not part of the journal: copy it too if the run is to be
resumed in the other place.

--atif writes one run as an Agent Trajectory Interchange Format (ATIF)
trajectory instead: its messages, tool calls and their observations, and
per-step tokens and cost (docs/eval.md).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if atif && len(args) != 1 {
				return usagef("--atif exports one run")
			}
			return a.withStore(ctx, func(store journal.Store) error {
				evs, err := journal.ReadRuns(ctx, store, args...)
				if err != nil {
					return fmt.Errorf("%w (nothing was written)", err)
				}
				if !atif {
					return writeOutput(out, a.stdout, func(w io.Writer) error { return journal.WriteJSONL(w, evs) })
				}
				b, err := eval.ATIF(evs, Version)
				if err != nil {
					return err
				}
				return writeOutput(out, a.stdout, func(w io.Writer) error { _, err := w.Write(append(b, '\n')); return err })
			})
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file (default stdout)")
	cmd.Flags().BoolVar(&atif, "atif", false, "write one run as an ATIF trajectory (Harbor's Agent Trajectory Interchange Format)")
	return cmd
}

func (a *app) runsImportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import FILE...",
		Short: "Store runs exported by keel runs export (or keel audit export) in this journal",
		Long: `Import reads JSON lines written by keel runs export ("-" reads stdin) and
stores each run in the journal named by --db with its sequence numbers,
times, payloads and hashes unchanged. Each run's chain is verified before
anything is stored and again as it is stored; a run is stored whole or
not at all. A run already present with the same events is skipped; one
with other events under the same id is refused. System streams (` + journal.SystemPrefix + `*)
belong to their journal and are not imported.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			var runs [][]journal.Event
			for _, name := range args {
				evs, err := readJSONLFile(name)
				if err != nil {
					return err
				}
				rs, err := journal.SplitRuns(evs)
				if err != nil {
					return fmt.Errorf("%s: %w (nothing was stored)", name, err)
				}
				runs = append(runs, rs...)
			}
			return a.withStore(ctx, func(store journal.Store) error {
				stored, err := journal.ImportRuns(ctx, store, runs)
				for i, ok := range stored {
					evs := runs[i]
					if ok {
						fmt.Fprintf(a.stdout, "imported run %s: %d events, chain verified, %s\n", evs[0].RunID, len(evs), journal.StatusOf(evs[len(evs)-1].Type))
					} else {
						fmt.Fprintf(a.stdout, "run %s is already in this journal (%d events, the same chain)\n", evs[0].RunID, len(evs))
					}
				}
				return err
			})
		},
	}
	return cmd
}

func readJSONLFile(name string) ([]journal.Event, error) {
	var r io.Reader
	if name == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	evs, torn, err := journal.ReadJSONL(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (nothing was stored)", name, err)
	}
	if torn != nil {
		return nil, fmt.Errorf("%s: %s: the export was cut short; export the run again (nothing was stored)", name, torn)
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("%s: no events", name)
	}
	return evs, nil
}
