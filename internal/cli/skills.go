package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/internal/skillhost"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
)

// skillHost is the skills of Keel's home on this machine, signatures
// verified against the agent keys of store's journal (nil: none); it is
// the service's SkillHost.
func (a *app) skillHost(store journal.Store) *skillhost.Host {
	return &skillhost.Host{Home: a.home, Store: store, OpenVault: a.openVault}
}

func (a *app) skillsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "skills",
		Short: "List, show, install and promote skills (Agent Skills format)",
		Long: `Skills are directories in the Agent Skills format (SKILL.md with front
matter, scripts, references). A run is offered the user's skills
(~/.keel/skills/NAME) and the skills its project's lockfile
(.keel/skills.lock) pins by digest; names and descriptions only until the
model calls use_skill. With --server, the team server's: --workspace
names a directory on the server, a token sees the skills runs of its
agents would be offered, and only an admin installs. See docs/skills.md.`,
	}
	cmd.AddCommand(a.skillsListCmd(), a.skillsShowCmd(), a.skillsInstallCmd(), a.skillsExportCmd(), a.skillsImportCmd())
	cmd.AddCommand(a.skillsPromotionCmds()...)
	return cmd
}

// skillsWorkspace is the workspace of a skills command: --workspace
// made absolute; with --server only when given (a directory on the
// server), else "" (the server's own skills).
func (a *app) skillsWorkspace(cmd *cobra.Command, ws string) (string, error) {
	if a.serverURL() != "" && !cmd.Flags().Changed("workspace") {
		return "", nil
	}
	abs, err := filepath.Abs(ws)
	if err != nil {
		return "", usagef("--workspace: %v", err)
	}
	return abs, nil
}

func (a *app) skillsListCmd() *cobra.Command {
	var ws string
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "list",
		Annotations: bothForms,
		Short:       "List the skills a run in the workspace would be offered, verified",
		Args:        cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := a.skillsWorkspace(cmd, ws)
			if err != nil {
				return err
			}
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				list, err := b.Skills(ctx, abs)
				if err != nil {
					return err
				}
				for _, r := range list.Refused {
					fmt.Fprintf(a.stderr, "keel: %s\n", visible.String(r))
				}
				return tui.Skills(a.stdout, list.Skills, asJSON)
			}, "workspace", "json")
		},
	}
	cmd.Flags().StringVar(&ws, "workspace", ".", "the project whose lockfile to read (with --server, a directory on the server)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines")
	return cmd
}

func (a *app) skillsShowCmd() *cobra.Command {
	var ws string
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "show NAME",
		Annotations: bothForms,
		Short:       "Show a skill a run in the workspace would be offered: its source, digest, signature, files and instructions",
		Args:        cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			abs, err := a.skillsWorkspace(cmd, ws)
			if err != nil {
				return err
			}
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				d, err := b.Skill(ctx, abs, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(a.stdout).Encode(d)
				}
				tui.Skill(a.stdout, d)
				return nil
			}, "workspace", "json")
		},
	}
	cmd.Flags().StringVar(&ws, "workspace", ".", "the project whose lockfile to read (with --server, a directory on the server)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON")
	return cmd
}

func (a *app) skillsInstallCmd() *cobra.Command {
	var ws string
	var scripts bool
	cmd := &cobra.Command{
		Use:         "install INDEX_URL NAME",
		Annotations: bothForms,
		Short:       "Install a skill from a discovery index (digests verified) and pin it in the project's lockfile",
		Long: `install fetches a skill from an Agent Skills discovery index, verifies every
file against its digest and the archive-safety rules (or stores nothing),
stores it at an immutable path and pins it in the project's lockfile.
With --server the team server installs it in its own store and pins it
in the lockfile of --workspace, a directory on the server (an admin
token).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.serverURL() != "" && !cmd.Flags().Changed("workspace") {
				return usagef("with --server, name the project on the server whose lockfile pins the skill: --workspace DIR")
			}
			abs, err := a.skillsWorkspace(cmd, ws)
			if err != nil {
				return err
			}
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				sk, err := b.InstallSkill(ctx, &api.InstallSkill{URL: args[0], Name: args[1], Workspace: abs, AllowScripts: scripts})
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "installed %s %s (%d files, verified), pinned in %s\n", sk.Name, sk.Digest, sk.Files, sk.Lockfile)
				return nil
			}, "workspace", "allow-scripts")
		},
	}
	cmd.Flags().StringVar(&ws, "workspace", ".", "the project whose lockfile pins it (with --server, a directory on the server)")
	cmd.Flags().BoolVar(&scripts, "allow-scripts", false, "let runs execute the skill's scripts (in their sandbox); without it the default policy gives them no scripts")
	return cmd
}
