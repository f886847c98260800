package cli

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/skill"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/visible"
)

// skillsDir is the user's own skills; skillStore the installed and
// approved ones (NAME/HEX, never changed).
func (a *app) skillsDir() string  { return filepath.Join(a.home, "skills") }
func (a *app) skillStore() string { return filepath.Join(a.home, "skill-store") }

// skillLibrary is where a run in workspace ws finds its skills, with
// signatures verified against the agent keys of store's journal.
func (a *app) skillLibrary(store journal.Store, ws string) *skill.Library {
	lib := &skill.Library{UserDir: a.skillsDir(), StoreDir: a.skillStore(), Workspace: ws, LockTrusted: a.lockTrusted(ws)}
	if rs, ok := store.(journal.Records); ok {
		lib.Key = func(agentName, kid string) (ed25519.PublicKey, error) {
			return credential.AgentPublicKey(context.Background(), rs, agentName, kid)
		}
	}
	return lib
}

// lockTrusted reports whether the person trusts a lockfile's content:
// it is recorded in trusted-projects like a project file (keel config
// trust, or a keel skills command that wrote it).
func (a *app) lockTrusted(ws string) func([]byte) bool {
	p := filepath.Join(ws, skill.LockFile)
	return func(content []byte) bool {
		want := fmt.Sprintf("%x %s", sha256.Sum256(content), p)
		t, err := os.ReadFile(a.trustFile())
		return err == nil && slices.Contains(strings.Split(string(t), "\n"), want)
	}
}

// offerSkills fixes in c the skills offered to the run: the user's and
// the project's pinned ones, each verified, that the run's policy lets
// its agent load (skill_load), with scripts where it lets them run
// (skill_scripts). What is refused is said on stderr and never offered.
func (a *app) offerSkills(ctx context.Context, store journal.Store, c *agent.RunCreated, eng *policy.Engine) {
	found, errs := a.skillLibrary(store, c.Workspace).Find()
	for _, err := range errs {
		fmt.Fprintf(a.stderr, "keel: %v\n", err)
	}
	if len(found) == 0 {
		return
	}
	k := &agent.Skills{}
	for _, f := range found {
		args := map[string]any{"name": f.Name, "digest": f.Digest, "source": f.Source}
		if f.Pinned != nil {
			args["signed"] = f.Pinned.Signature != nil
			args["agent_written"] = f.Source == skill.SourceAgent
			args["approved"] = f.Pinned.Scripts || f.Source == skill.SourceAgent
		}
		decide := func(t string) policy.Effect {
			b, _ := json.Marshal(args)
			return eng.Decide(ctx, &policy.Call{Principal: c.Principal, OnBehalfOf: c.OnBehalfOf, Tool: t, Effect: tool.ReadOnly.String(),
				Arguments: b, Workspace: c.Workspace, MountPath: c.MountPath, Sandbox: c.Sandbox, Network: c.Network}).Effect
		}
		if e := decide(policy.SkillLoadTool); e != policy.Allow {
			fmt.Fprintf(a.stderr, "keel: skill %s is not offered: the policy's decision on loading it is %s\n", f.Name, e)
			continue
		}
		o := agent.OfferedSkill{Name: f.Name, Description: f.Description, Digest: f.Digest, Source: f.Source, Dir: f.Dir,
			Signed: f.Pinned != nil && f.Pinned.Signature != nil}
		o.Scripts = f.Scripts() && decide(policy.SkillScriptsTool) == policy.Allow
		k.Entries = append(k.Entries, o)
	}
	if len(k.Entries) == 0 {
		return
	}
	k.Tokens = agent.LookupFamily(c.Model).TextTokens(k.Section())
	c.Skills = k
}

// addSkillTool verifies and copies the run's skills into its state
// directory and registers use_skill.
func addSkillTool(r *tool.Registry, c *agent.RunCreated) {
	if c.Skills == nil || len(c.Skills.Entries) == 0 {
		return
	}
	dest := filepath.Join(c.StateDir, "skills")
	if c.StateDir == "" {
		dest = filepath.Join(os.TempDir(), "keel-skills-unused")
	}
	skill.AddTool(r, c.Skills, skill.Materialize(c.Skills, dest))
}

func (a *app) skillsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "skills",
		Short: "List, install and promote skills (Agent Skills format)",
		Long: `Skills are directories in the Agent Skills format (SKILL.md with front
matter, scripts, references). A run is offered the user's skills
(~/.keel/skills/NAME) and the skills its project's lockfile
(.keel/skills.lock) pins by digest; names and descriptions only until the
model calls use_skill. See docs/skills.md.`,
	}
	cmd.AddCommand(a.skillsListCmd(), a.skillsInstallCmd())
	cmd.AddCommand(a.skillsPromotionCmds()...)
	return cmd
}

func (a *app) skillsListCmd() *cobra.Command {
	var ws string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the skills a run in the workspace would be offered, verified",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openStore(cmd.Context())
			if err != nil {
				return err
			}
			defer store.Close()
			abs, err := filepath.Abs(ws)
			if err != nil {
				return err
			}
			found, errs := a.skillLibrary(store, abs).Find()
			for _, err := range errs {
				fmt.Fprintf(a.stderr, "keel: %v\n", err)
			}
			if asJSON {
				return jsonLines(a.stdout, found)
			}
			tw := tabwriter.NewWriter(a.stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSOURCE\tDIGEST\tSIGNED\tSCRIPTS\tDESCRIPTION")
			for _, f := range found {
				signed := "-"
				if f.Pinned != nil && f.Pinned.Signature != nil {
					signed = fmt.Sprintf("v%d by %s", f.Pinned.Signature.Version, f.Pinned.Signature.Agent)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", f.Name, f.Source, f.Digest[:19], signed, f.Scripts(), visible.String(firstLineOf(f.Description, 60)))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&ws, "workspace", ".", "the project whose lockfile to read")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines")
	return cmd
}

func (a *app) skillsInstallCmd() *cobra.Command {
	var ws string
	var scripts bool
	cmd := &cobra.Command{
		Use:   "install INDEX_URL NAME",
		Short: "Install a skill from a discovery index (digests verified) and pin it in the project's lockfile",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			abs, err := filepath.Abs(ws)
			if err != nil {
				return err
			}
			sk, err := skill.Install(cmd.Context(), &skill.InstallParams{URL: args[0], Name: args[1], Dir: a.skillStore()})
			if errors.Is(err, skill.ErrRefused) {
				return fmt.Errorf("%w (nothing was installed)", err)
			}
			if err != nil {
				return err
			}
			if err := a.pin(abs, skill.Pinned{Name: sk.Name, Digest: sk.Digest, Source: skill.SourceIndex, URL: args[0], Scripts: scripts}); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "installed %s %s (%d files, verified), pinned in %s\n", sk.Name, sk.Digest, len(sk.Files), filepath.Join(abs, skill.LockFile))
			return nil
		},
	}
	cmd.Flags().StringVar(&ws, "workspace", ".", "the project whose lockfile pins it")
	cmd.Flags().BoolVar(&scripts, "allow-scripts", false, "let runs execute the skill's scripts (in their sandbox); without it the default policy gives them no scripts")
	return cmd
}

// pin writes p into the workspace's lockfile and trusts the new
// content: the person wrote it.
func (a *app) pin(ws string, p skill.Pinned) error {
	lock, _, err := skill.ReadLock(ws)
	if err != nil {
		return err
	}
	b, err := lock.Pin(ws, p)
	if err != nil {
		return err
	}
	return a.trustProject(filepath.Join(ws, skill.LockFile), b)
}
