package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/audit"
)

func (a *app) auditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Verify journals (hash chains, index, fold) and export them with their hashes",
	}
	cmd.AddCommand(a.auditVerifyCmd(), a.auditExportCmd())
	return cmd
}

func (a *app) auditVerifyCmd() *cobra.Command {
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "verify RUN... | --all",
		Short: "Check every event of runs (or all streams): report the first bad event",
		Long: `Verify reads each run's events, recomputes every hash of its chain,
compares its newest event with the journal's run index (events cut off or
added behind Keel's back), and folds the events into a run. It reports the
first bad event of each run. --all also checks the identity stream (agents,
revocations, standing approvals). Exit status 1 if anything is bad.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if all == (len(args) > 0) {
				return usagef("give RUN ids or --all")
			}
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			var reports []audit.Report
			if all {
				if reports, err = audit.VerifyAll(ctx, store); err != nil {
					return err
				}
			} else {
				for _, id := range args {
					r, err := audit.Verify(ctx, store, id)
					if err != nil {
						return err
					}
					reports = append(reports, r)
				}
			}
			bad := 0
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				for _, r := range reports {
					if err := enc.Encode(r); err != nil {
						return err
					}
				}
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			if !asJSON {
				fmt.Fprintln(tw, "STREAM\tKIND\tEVENTS\tSTATUS\tRESULT")
			}
			for _, r := range reports {
				res := "ok · head " + short(r.Head)
				if !r.OK {
					bad++
					res = fmt.Sprintf("BAD at event %d: %s", r.FirstBad, r.Reason)
				}
				if !asJSON {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.RunID, r.Kind, r.Events, r.Status, res)
				}
			}
			if !asJSON {
				tw.Flush()
				fmt.Fprintf(a.stdout, "%d of %d streams verified\n", len(reports)-bad, len(reports))
			}
			if bad > 0 {
				return &exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every run and the identity stream")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON report per line")
	return cmd
}

func short(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	return h
}

func (a *app) auditExportCmd() *cobra.Command {
	var all, unverified bool
	var out string
	cmd := &cobra.Command{
		Use:   "export RUN... | --all",
		Short: "Write runs' events as JSON lines with prev_hash and hash",
		Long: `Export writes each run's events, verified first, as JSON lines:
{"run_id","seq","type","time","payload","prev_hash","hash"}, the payload
byte for byte as hashed, so that anyone can recompute the chain
(hash = SHA-256(prev_hash bytes ‖ canonical event), see docs/policy.md).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if all == (len(args) > 0) {
				return usagef("give RUN ids or --all")
			}
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			ids := args
			if all {
				runs, err := store.Runs(ctx, nil)
				if err != nil {
					return err
				}
				ids = nil
				for i := len(runs) - 1; i >= 0; i-- {
					ids = append(ids, runs[i].RunID)
				}
			}
			var w io.Writer = a.stdout
			if out != "" && out != "-" {
				f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			if err := audit.Export(ctx, store, ids, w, &audit.ExportOptions{Unverified: unverified}); err != nil {
				return err
			}
			if f, ok := w.(*os.File); ok && f != os.Stdout {
				return f.Close()
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every run and the identity stream, oldest first")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file (default stdout)")
	cmd.Flags().BoolVar(&unverified, "unverified", false, "export runs that fail verification too, as stored")
	return cmd
}
