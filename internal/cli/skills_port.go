package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/keel-run/keel/internal/skillhost"
	"github.com/spf13/cobra"
)

func (a *app) skillsExportCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "export [-o FILE]",
		Short: "Write the skill candidates with their evidence and the approved skills' files and signatures (keel skills import reads them)",
		Long: `export writes JSON lines: the candidates stream (_keel.skills) verified,
with its hashes (every proposal, test result, comparison and approval),
then one line per approved skill in this machine's store with its files,
its signature and the public key of the agent that signed it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			var left []error
			err = writeOutput(out, a.stdout, func(w io.Writer) (err error) {
				left, err = a.skillHost(store).Export(ctx, w)
				return err
			})
			for _, e := range left {
				fmt.Fprintf(a.stderr, "keel: %v\n", e)
			}
			return err
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to FILE (default: stdout)")
	return cmd
}

func (a *app) skillsImportCmd() *cobra.Command {
	var ws, by, agentName string
	cmd := &cobra.Command{
		Use:   "import FILE --workspace DIR",
		Short: "Add exported skill candidates with their evidence, and sign and pin the approved skills in a project here",
		Long: `import reads a keel skills export: it verifies the candidates stream's
chain and adds the candidates this journal does not hold (their
evidence, unchanged); then, for each approved skill, it checks its files
against its digest and its signature against the exported key, stores
it, signs it with this journal's key of the same agent (--agent for
another) in your name (the import is your approval here), pins it in
the lockfile of --workspace and journals the approval. Nothing is
stored if the export's chain does not verify.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			x, err := skillhost.ReadExport(args[0])
			if err != nil {
				return err
			}
			abs, err := filepath.Abs(ws)
			if err != nil {
				return usagef("--workspace: %v", err)
			}
			if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
				return usagef("--workspace %s is not a directory", ws)
			}
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			res, err := a.skillHost(store).Import(ctx, x, abs, a.person(by), agentName)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "imported %d candidates with their evidence, skipped %d already here\n", res.Imported, res.Skipped)
			for _, im := range res.Skills {
				fmt.Fprintf(a.stdout, "skill %s v%d (approved by %s there) verified, signed by %s for %s, stored as %s and pinned in %s\n",
					im.Skill.Name, im.Version, im.ExportedBy, im.Signer, im.By, im.Skill.Digest, im.Lockfile)
			}
			for _, e := range res.Failed {
				fmt.Fprintf(a.stderr, "keel: %v\n", e)
			}
			if len(res.Failed) > 0 {
				return errors.New("some skills were not imported")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&ws, "workspace", ".", "the project whose lockfile pins the imported skills")
	cmd.Flags().StringVar(&by, "by", "", "who imports, and so approves the skills here (default: your login name)")
	cmd.Flags().StringVar(&agentName, "agent", "", "sign with this agent's key (default: the agent that signed each skill)")
	return cmd
}
