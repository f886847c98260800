package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/google/renameio/v2"
	"github.com/spf13/cobra"

	"github.com/keel-run/keel/audit"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

func (a *app) auditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Verify journals (hash chains, index, fold) and export them with their hashes",
	}
	cmd.AddCommand(a.auditVerifyCmd(), a.auditExportCmd(), a.auditAnchorCmd(), a.auditCallsCmd())
	return cmd
}

func (a *app) auditAnchorCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "anchor [-o FILE]",
		Short: "Print the head (sequence number and hash) of every stream, to keep outside this machine",
		Long: `Anchor verifies every stream of the journal and prints its newest event's
sequence number and hash as JSON lines, with a SHA-256 digest of them all on
stderr. The hash chain shows changes made without recomputing the hashes;
someone who can write the journal file can recompute them, and the chain
then verifies. Keep the anchor (or just its digest) where that person
cannot change it: mail it, print it, commit it elsewhere. Later,
keel audit verify --all --anchor FILE finds any change at or before it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			anchors, err := audit.Anchors(ctx, store)
			if err != nil {
				return err
			}
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			for _, an := range anchors {
				if err := enc.Encode(an); err != nil {
					return err
				}
			}
			if err := writeOutput(out, a.stdout, func(w io.Writer) error { _, err := w.Write(b.Bytes()); return err }); err != nil {
				return err
			}
			sum := sha256.Sum256(b.Bytes())
			fmt.Fprintf(a.stderr, "keel: anchored %d streams · digest sha256:%s\n", len(anchors), hex.EncodeToString(sum[:]))
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file (default stdout)")
	return cmd
}

// readAnchors reads an anchor file written by keel audit anchor.
func readAnchors(path string) ([]audit.Anchor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("--anchor: %v", err)
	}
	defer f.Close()
	var out []audit.Anchor
	dec := json.NewDecoder(f)
	for dec.More() {
		var an audit.Anchor
		if err := dec.Decode(&an); err != nil {
			return nil, usagef("--anchor %s: not an anchor file (keel audit anchor): %v", path, err)
		}
		if an.RunID == "" || an.Seq < 1 || len(an.Hash) != 64 {
			return nil, usagef("--anchor %s: entry %d is incomplete (run_id, seq, hash)", path, len(out)+1)
		}
		out = append(out, an)
	}
	if len(out) == 0 {
		return nil, usagef("--anchor %s: no anchors in it", path)
	}
	return out, nil
}

// writeOutput writes what write produces to the file path, or to stdout
// when path is "" or "-". A file is written beside its final name and
// renamed into place only when everything was written, so a failure
// leaves neither an empty nor a partial file (and an earlier file at that
// path stays as it was).
func writeOutput(path string, stdout io.Writer, write func(io.Writer) error) error {
	if path == "" || path == "-" {
		return write(stdout)
	}
	// Beside path (not in $TMPDIR), readable by its owner only, synced
	// before it replaces path.
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(filepath.Dir(path)), renameio.WithStaticPermissions(0o600))
	if err != nil {
		return err
	}
	defer f.Cleanup() // a no-op after the rename
	if err := write(f); err != nil {
		return err
	}
	return f.CloseAtomicallyReplace()
}

func (a *app) auditVerifyCmd() *cobra.Command {
	var all, asJSON bool
	var anchorFile string
	cmd := &cobra.Command{
		Use:   "verify RUN|_keel.STREAM... | --all",
		Short: "Check every event of runs (or all streams): report the first bad event",
		Long: `Verify reads each run's events, recomputes every hash of its chain,
compares its newest event with the journal's run index (events cut off or
added behind Keel's back), and folds the events into a run. It reports the
first bad event of each run. --all also checks the system streams (the
identity directory, tokens, the API's log, memory, schedules...), which
can also be named whole (keel audit verify _keel.identity). Exit status 1
if anything is bad; a RUN that names no run is refused (exit 2).

The chain does not show a rewrite by someone who can write the journal
file and recomputes the hashes. --anchor FILE (from keel audit anchor,
kept elsewhere) also checks that every anchored stream still has the
anchored hash at the anchored event: any change at or before it shows.`,
		Annotations: annotated(argsAreJournals, bothForms),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if all == (len(args) > 0) {
				return usagef("give RUN ids or --all")
			}
			var anchors []audit.Anchor
			if anchorFile != "" {
				var err error
				if anchors, err = readAnchors(anchorFile); err != nil {
					return err
				}
			}
			b, err := a.open(ctx, cmd, "all", "json")
			if err != nil {
				return err
			}
			defer b.Close()
			if len(a.missingRuns) > 0 {
				return fmt.Errorf("%s: %w", a.missingRuns[0], journal.ErrNotFound) // Main says "no run"
			}
			rep, err := b.VerifyAudit(ctx, &api.VerifyAudit{Runs: args})
			if err != nil {
				return err
			}
			rows := make([]tui.AuditRow, 0, len(rep.Journals))
			for _, j := range rep.Journals {
				rows = append(rows, tui.AuditRow{Report: audit.Report{RunID: j.ID, Kind: j.Kind, Events: j.Events, OK: j.OK, FirstBad: j.FirstBad, Reason: j.Reason,
					Status: journal.Status(j.Status), Head: j.Head}, Shown: b.shown(ctx, j.ID, j.Status)})
			}
			bad, err := tui.Audit(a.stdout, rows, asJSON)
			if err != nil {
				return err
			}
			if anchors != nil {
				if !all {
					anchors = slices.DeleteFunc(anchors, func(an audit.Anchor) bool { return !slices.Contains(args, an.RunID) })
				}
				// --anchor is refused with --server: the backend is local.
				checks, err := audit.CheckAnchors(ctx, b.(*local).store, anchors)
				if err != nil {
					return err
				}
				failed, err := tui.Anchors(a.stdout, checks, anchorFile, asJSON)
				if err != nil {
					return err
				}
				bad += failed
			}
			if bad > 0 {
				return &exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every run and the identity stream")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON report per line")
	cmd.Flags().StringVar(&anchorFile, "anchor", "", "also check the heads recorded by keel audit anchor in this file")
	return cmd
}

// auditBackend is what keel audit verify needs of a journal or a team
// server.
type auditBackend interface {
	// VerifyAudit audits runs req.Runs, or every stream (runs and system
	// streams) when it is empty.
	VerifyAudit(ctx context.Context, req *api.VerifyAudit) (*api.AuditReport, error)
}

func (a *app) auditExportCmd() *cobra.Command {
	var all, unverified bool
	var out string
	cmd := &cobra.Command{
		Use:         "export RUN... | --all",
		Annotations: argsAreRuns,
		Short:       "Write runs' events as JSON lines with prev_hash and hash",
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
			err = writeOutput(out, a.stdout, func(w io.Writer) error {
				return audit.Export(ctx, store, ids, w, &audit.ExportOptions{Unverified: unverified})
			})
			if ce := (*journal.CorruptError)(nil); errors.As(err, &ce) && !unverified {
				return fmt.Errorf("%w\n(nothing was written; to examine the events as stored, bad ones included: keel audit export --unverified)", err)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every run and the identity stream, oldest first")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file (default stdout)")
	cmd.Flags().BoolVar(&unverified, "unverified", false, "export runs that fail verification too, as stored")
	return cmd
}
