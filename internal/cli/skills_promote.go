package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/internal/skillhost"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/server/api"
)

func (a *app) skillsPromotionCmds() []*cobra.Command {
	return []*cobra.Command{a.skillsCandidatesCmd(), a.skillsEvaluateCmd()}
}

// skillsBackend is the skills commands' backend (see backend.go): the
// local journal and Keel's home directory or, with --server, the team
// server's. Evaluate is local only.
type skillsBackend interface {
	SkillCandidates(ctx context.Context) ([]api.SkillCandidate, error)
	// Skills and Skill find the skills a run in workspace ws ("": none,
	// the user's or the server's own skills only) is offered.
	Skills(ctx context.Context, ws string) (*api.SkillList, error)
	Skill(ctx context.Context, ws, name string) (*api.SkillDetail, error)
	InstallSkill(ctx context.Context, req *api.InstallSkill) (*api.Skill, error)
}

func (a *app) skillsCandidatesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "candidates",
		Annotations: bothForms,
		Short:       "List agent-written skill candidates with their evidence: tests, comparison, approval",
		Args:        cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				list, err := b.SkillCandidates(ctx)
				if err != nil {
					return err
				}
				return tui.SkillCandidates(a.stdout, list, asJSON)
			}, "json")
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines")
	return cmd
}

func (a *app) skillsEvaluateCmd() *cobra.Command {
	var recording, repo, covers, mount string
	var env []string
	cmd := &cobra.Command{
		Use:   "evaluate CANDIDATE --recording TRAJ --repo DIR",
		Short: "Compare a tested candidate with the baseline on a recorded case, in the sandbox, and journal the numbers",
		Long: `evaluate runs both arms of a recorded case in the Linux sandbox, each on its
own copy of --repo (a git repository at the case's starting commit): the
baseline arm runs the commands of the recording (a trajectory) that the
candidate covers (its covers expression, or --covers), the other arm the
commands of the candidate's usage (its tests' commands when it gave
none). It journals the comparison; a candidate that does not beat the
baseline is kept as rejected with its numbers.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if recording == "" || repo == "" {
				return usagef("evaluate needs --recording and --repo")
			}
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			cand, cmp, err := a.skillHost(store).Evaluate(ctx, args[0], &skillhost.Case{Recording: recording, Repo: repo, MountPath: mount, Covers: covers, Env: env})
			if err != nil {
				return err
			}
			for _, c := range cmp.Cases {
				fmt.Fprintf(a.stdout, "case %s\n  baseline: %d commands, %d failed, %d tests passed, achieved %v, %d bytes of output\n  with skill: %d commands, %d failed, %d tests passed, achieved %v, %d bytes of output\n",
					c.Case, c.Baseline.Commands, c.Baseline.Failed, c.Baseline.Passed, c.Baseline.Achieved, c.Baseline.OutputBytes,
					c.With.Commands, c.With.Failed, c.With.Passed, c.With.Achieved, c.With.OutputBytes)
			}
			fmt.Fprintf(a.stdout, "candidate %s: %s (%s)\n", cand.ID(), cand.State, strings.TrimSuffix(cmp.Why, "; "))
			return nil
		},
	}
	cmd.Flags().StringVar(&recording, "recording", "", "the recorded trajectory of the case")
	cmd.Flags().StringVar(&repo, "repo", "", "a git repository at the case's starting commit (each arm works on its own clone)")
	cmd.Flags().StringVar(&covers, "covers", "", "regular expression of the recorded commands the skill replaces (default: the candidate's)")
	cmd.Flags().StringVar(&mount, "mount-path", "/testbed", "where the case's workspace appears in the sandbox")
	cmd.Flags().StringArrayVar(&env, "env", nil, "KEY=VALUE for both arms' sandboxes (repeatable)")
	return cmd
}
