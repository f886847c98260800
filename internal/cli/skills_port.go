package cli

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/skill"
)

// bundleLine is the line of an export that carries an approved skill
// (the other lines are the candidates stream's events).
type bundleLine struct {
	Skill *skill.Bundle `json:"skill"`
}

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
			cands := skill.NewCandidates(store, nil)
			evs, err := cands.Export(ctx, store)
			if err != nil {
				return err
			}
			list, err := cands.List(ctx)
			if err != nil {
				return err
			}
			var bundles []bundleLine
			for _, c := range list {
				if c.State != skill.StateApproved || c.Approval == nil {
					continue
				}
				rs, ok := store.(journal.Records)
				if !ok {
					return errors.New("this journal keeps no agent keys")
				}
				key, err := credential.AgentPublicKey(ctx, rs, c.Approval.Agent, c.Approval.KeyID)
				if err != nil {
					fmt.Fprintf(a.stderr, "keel: skill %s is left out: %v\n", c.ID(), err)
					continue
				}
				b, err := skill.NewBundle(filepath.Join(a.skillStore(), c.Name, strings.TrimPrefix(c.Digest, "sha256:")), c.Digest, c.Approval, key)
				if err != nil {
					fmt.Fprintf(a.stderr, "keel: skill %s is left out: %v\n", c.ID(), err)
					continue
				}
				bundles = append(bundles, bundleLine{b})
			}
			return writeOutput(out, a.stdout, func(w io.Writer) error {
				if err := tui.JSONLines(w, evs); err != nil {
					return err
				}
				return tui.JSONLines(w, bundles)
			})
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
			evs, bundles, err := readSkillsExport(args[0])
			if err != nil {
				return &usageError{err}
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
			cands := skill.NewCandidates(store, nil)
			res := &skill.ImportResult{}
			if len(evs) > 0 {
				if res, err = cands.Import(ctx, evs); err != nil {
					return err
				}
			}
			fmt.Fprintf(a.stdout, "imported %d candidates with their evidence, skipped %d already here\n", res.Imported, res.Skipped)
			person := a.person(by)
			tmp, err := os.MkdirTemp("", "keel-skills-import-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			var failed error
			for _, b := range bundles {
				if err := a.importSkill(cmd, store, cands, b, tmp, abs, person, agentName); err != nil {
					fmt.Fprintf(a.stderr, "keel: skill %s is not imported: %v\n", b.Name, err)
					failed = errors.New("some skills were not imported")
				}
			}
			return failed
		},
	}
	cmd.Flags().StringVar(&ws, "workspace", ".", "the project whose lockfile pins the imported skills")
	cmd.Flags().StringVar(&by, "by", "", "who imports, and so approves the skills here (default: your login name)")
	cmd.Flags().StringVar(&agentName, "agent", "", "sign with this agent's key (default: the agent that signed each skill)")
	return cmd
}

// importSkill verifies, stores, signs and pins one exported skill.
func (a *app) importSkill(cmd *cobra.Command, store journal.Store, cands *skill.Candidates, b *skill.Bundle, tmp, ws, person, agentName string) error {
	ctx := cmd.Context()
	sk, err := b.Verify(tmp)
	if err != nil {
		return err
	}
	id := b.Name + "@" + b.Digest
	c, err := cands.Find(ctx, id)
	if err != nil || c.State != skill.StateApproved {
		return fmt.Errorf("the export holds no approved candidate %s: a skill comes only with its evidence", id)
	}
	signer := agentName
	if signer == "" {
		signer = b.Signature.Agent
	}
	v, err := a.openVault(store)
	if err != nil {
		return fmt.Errorf("cannot sign: %w", err)
	}
	version := b.Signature.Version
	kid, sig, err := v.SignAsAgent(ctx, signer, skill.SignedMessage(sk.Name, sk.Digest, version, person))
	if err != nil {
		return fmt.Errorf("cannot sign with agent %s's key here: %w (keel agents create %s, or --agent)", signer, err, signer)
	}
	s := &skill.Signature{Agent: signer, KeyID: kid, Version: version, ApprovedBy: person, Sig: base64.StdEncoding.EncodeToString(sig)}
	stored, err := skill.Store(sk, a.skillStore())
	if err != nil {
		return err
	}
	if err := a.pin(ws, skill.Pinned{Name: stored.Name, Digest: stored.Digest, Source: skill.SourceAgent, Signature: s}); err != nil {
		return err
	}
	if _, err := cands.RecordImport(ctx, id, s, ws); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "skill %s v%d (approved by %s there) verified, signed by %s for %s, stored as %s and pinned in %s\n",
		stored.Name, version, b.Signature.ApprovedBy, signer, person, stored.Digest, filepath.Join(ws, skill.LockFile))
	return nil
}

// readSkillsExport splits a keel skills export into the candidates
// stream's events and the approved skills.
func readSkillsExport(name string) ([]journal.Event, []*skill.Bundle, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var events bytes.Buffer
	var bundles []*skill.Bundle
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte(`{"skill":`)) {
			var b bundleLine
			if err := json.Unmarshal(line, &b); err != nil || b.Skill == nil {
				return nil, nil, fmt.Errorf("%s:%d: not a skill: %v (nothing was stored)", name, n, err)
			}
			bundles = append(bundles, b.Skill)
			continue
		}
		events.Write(line)
		events.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if events.Len() == 0 {
		return nil, bundles, nil
	}
	evs, torn, err := journal.ReadJSONL(&events)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w (nothing was stored)", name, err)
	}
	if torn != nil {
		return nil, nil, fmt.Errorf("%s: %s: the export was cut short; export again (nothing was stored)", name, torn)
	}
	return evs, bundles, nil
}
