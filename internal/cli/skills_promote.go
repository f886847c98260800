package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/skill"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/visible"
)

// Tools of agent-written skills.
const (
	proposeSkillTool = "propose_skill"
	promoteSkillTool = "promote_skill"
)

type proposeInput struct {
	Name         string            `json:"name"`
	Description  string            `json:"description"`
	Instructions string            `json:"instructions"`
	Files        map[string]string `json:"files,omitempty"`
	Tests        []skill.TestCase  `json:"tests"`
	Covers       string            `json:"covers,omitempty"`
	Usage        []string          `json:"usage,omitempty"`
}

type promoteInput struct {
	Name string `json:"name"`
}

// testTimeout bounds one test of a candidate.
const testTimeout = 5 * time.Minute

// addSkillPromotionTools registers propose_skill and promote_skill for
// a run that learns (offered memory), over store (nil: definitions only).
func (a *app) addSkillPromotionTools(r *tool.Registry, c *agent.RunCreated, store journal.Store) {
	if c.Recall == nil {
		return
	}
	tool.Add(r, &tool.Tool{
		Name: proposeSkillTool,
		Description: "Propose a skill from work that succeeded: a name, a description of when to use it, its instructions, its files (scripts/..., references/...) and the tests that show it works (shell commands run in the sandbox from the workspace, the candidate's files at $SKILL_DIR; exit 0 passes). Keel runs the tests now; a candidate whose tests fail is never offered. One that passes is compared with the baseline on recorded cases and needs a person's approval (promote_skill) before any run is offered it. " +
			"covers is a regular expression of the commands the skill replaces; usage the commands an agent following it runs.",
		InputSchema: []byte(`{"type":"object","additionalProperties":false,"properties":{` +
			`"name":{"type":"string","pattern":"^[a-z0-9]+(-[a-z0-9]+)*$","maxLength":64},` +
			`"description":{"type":"string","minLength":1,"maxLength":1024},` +
			`"instructions":{"type":"string","minLength":1,"maxLength":20000},` +
			`"files":{"type":"object","additionalProperties":{"type":"string","maxLength":200000}},` +
			`"tests":{"type":"array","minItems":1,"maxItems":20,"items":{"type":"object","additionalProperties":false,"properties":{"name":{"type":"string","minLength":1},"command":{"type":"string","minLength":1}},"required":["name","command"]}},` +
			`"covers":{"type":"string","maxLength":500},` +
			`"usage":{"type":"array","maxItems":20,"items":{"type":"string"}}},` +
			`"required":["name","description","instructions","tests"]}`),
		Effect: tool.External,
	}, func(ctx context.Context, req *tool.Request, in proposeInput) (*tool.Result, error) {
		return a.proposeSkill(ctx, store, c, req, &in)
	})
	tool.Add(r, &tool.Tool{
		Name:        promoteSkillTool,
		Description: "Ask a person to approve a skill candidate whose tests passed and that beat the baseline; once approved Keel signs it, stores it and pins it in this project's lockfile, and later runs are offered it.",
		InputSchema: []byte(`{"type":"object","additionalProperties":false,"properties":{"name":{"type":"string","minLength":1,"maxLength":200}},"required":["name"]}`),
		Effect:      tool.External,
		Scope:       func(json.RawMessage) []string { return []string{} },
	}, func(ctx context.Context, req *tool.Request, in promoteInput) (*tool.Result, error) {
		return a.promoteSkill(ctx, store, c, req, in.Name)
	})
}

// proposeSkill stores a candidate in the run's state directory (visible
// read-only in the sandbox), journals it and runs its tests in the run's
// sandbox.
func (a *app) proposeSkill(ctx context.Context, store journal.Store, c *agent.RunCreated, req *tool.Request, in *proposeInput) (*tool.Result, error) {
	files, err := skill.NewCandidateFiles(in.Name, in.Description, in.Instructions, in.Files)
	if err != nil {
		return tool.Errorf("%v", err), nil
	}
	if c.StateDir == "" {
		return tool.Errorf("this run has no state directory to keep a candidate in"), nil
	}
	sk, err := skill.WriteCandidate(filepath.Join(c.StateDir, "skill-candidates"), in.Name, files)
	if err != nil {
		return tool.Errorf("%v", err), nil
	}
	cands := skill.NewCandidates(store, nil)
	cand, err := cands.Propose(ctx, &skill.Candidate{Name: sk.Name, Digest: sk.Digest, Dir: sk.Dir, Run: req.RunID, Call: req.CallID,
		Agent: req.Principal, Tests: in.Tests, Covers: in.Covers, Usage: in.Usage})
	if err != nil {
		return nil, err
	}
	if cand.State != skill.StateProposed {
		return tool.Text(fmt.Sprintf("candidate %s was proposed before; it is %s", cand.ID(), cand.State)), nil
	}
	passed := true
	var results []skill.TestResult
	for _, t := range in.Tests {
		var out bytes.Buffer
		res, err := req.Env.Sandbox.Exec(ctx, &sandbox.Cmd{Args: []string{"bash", "-c", t.Command}, Env: []string{"SKILL_DIR=" + sk.Dir}, Stdout: &out, Timeout: testTimeout})
		code := -1
		if err == nil {
			code = res.ExitCode
		} else {
			out.WriteString(err.Error())
		}
		results = append(results, skill.TestResult{Name: t.Name, ExitCode: code, Output: tool.Preview(out.String(), 2000)})
		passed = passed && code == 0
	}
	cand, err = cands.RecordTests(ctx, cand.ID(), passed, results)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "candidate %s: %s\n", cand.ID(), cand.State)
	for _, r := range results {
		fmt.Fprintf(&b, "- test %s: exit %d\n%s\n", r.Name, r.ExitCode, r.Output)
	}
	if passed {
		b.WriteString("Its tests passed. Next it is compared with the baseline (keel skills evaluate), then promote_skill asks a person to approve it.")
	} else {
		b.WriteString("Its tests failed: it will never be offered. Fix it and propose it again.")
	}
	return &tool.Result{Content: b.String(), IsError: !passed}, nil
}

// promoteSkill runs once a person approved the call (the default policy
// asks before every promote_skill): it checks the evidence, signs the
// candidate with the run's agent key, stores it and pins it.
func (a *app) promoteSkill(ctx context.Context, store journal.Store, c *agent.RunCreated, req *tool.Request, name string) (*tool.Result, error) {
	cands := skill.NewCandidates(store, nil)
	cand, err := cands.Find(ctx, name)
	if err != nil {
		return tool.Errorf("%v", err), nil
	}
	if cand.State != skill.StateEvaluated {
		return tool.Errorf("candidate %s is %s: only a candidate whose tests passed and that beat the baseline can be promoted", cand.ID(), cand.State), nil
	}
	by, err := approver(ctx, store, req.RunID, req.CallID)
	if err != nil {
		return tool.Errorf("%v", err), nil
	}
	sk, err := skill.Read(cand.Dir)
	if err != nil || sk.Digest != cand.Digest {
		return tool.Errorf("candidate %s changed since it was tested (%v): propose it again", cand.ID(), err), nil
	}
	version := 1
	if list, err := cands.List(ctx); err == nil {
		for _, x := range list {
			if x.Name == cand.Name && x.State == skill.StateApproved {
				version++
			}
		}
	}
	v, err := a.openVault(store)
	if err != nil {
		return tool.Errorf("cannot sign: %v", err), nil
	}
	kid, sig, err := v.SignAsAgent(ctx, req.Principal, skill.SignedMessage(sk.Name, sk.Digest, version, by))
	if err != nil {
		return tool.Errorf("cannot sign with agent %s's key: %v (keel auth key generate makes the vault key)", req.Principal, err), nil
	}
	s := &skill.Signature{Agent: req.Principal, KeyID: kid, Version: version, ApprovedBy: by, Sig: base64.StdEncoding.EncodeToString(sig)}
	stored, err := skill.Store(sk, a.skillStore())
	if err != nil {
		return nil, err
	}
	if err := a.pin(c.Workspace, skill.Pinned{Name: stored.Name, Digest: stored.Digest, Source: skill.SourceAgent, Signature: s}); err != nil {
		return nil, err
	}
	if _, err := cands.RecordApproval(ctx, cand.ID(), s, c.Workspace); err != nil {
		return nil, err
	}
	return tool.Text(fmt.Sprintf("skill %s v%d approved by %s, signed with %s, stored as %s and pinned in %s: later runs in this project are offered it",
		stored.Name, version, by, kid, stored.Digest, skill.LockFile)), nil
}

// approver returns who approved call of run (approval.resolved), or an
// error when no person did.
func approver(ctx context.Context, store journal.Store, run, call string) (string, error) {
	evs, err := store.Read(ctx, run, 1)
	if err != nil {
		return "", err
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type != journal.ApprovalResolved {
			continue
		}
		var p agent.ApprovalResolved
		if json.Unmarshal(evs[i].Payload, &p) == nil && p.CallID == call && p.Decision == policy.Allow && p.By != "" {
			return p.By, nil
		}
	}
	return "", errors.New("no person approved this promotion (the policy must ask before promote_skill)")
}

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

func (l *local) SkillCandidates(ctx context.Context) ([]api.SkillCandidate, error) {
	return viaMemory(ctx, l, "", func(svc *service.Service, who *service.Caller) ([]api.SkillCandidate, error) {
		return svc.SkillCandidates(ctx, who)
	})
}

func (r *remote) SkillCandidates(ctx context.Context) ([]api.SkillCandidate, error) {
	return r.cl.SkillCandidates(ctx)
}

func (l *local) Skills(ctx context.Context, ws string) (*api.SkillList, error) {
	return viaMemory(ctx, l, "", func(svc *service.Service, who *service.Caller) (*api.SkillList, error) {
		list, err := svc.Skills(ctx, who, ws)
		return &list, err
	})
}

func (l *local) Skill(ctx context.Context, ws, name string) (*api.SkillDetail, error) {
	return viaMemory(ctx, l, "", func(svc *service.Service, who *service.Caller) (*api.SkillDetail, error) {
		d, err := svc.Skill(ctx, who, ws, name)
		return &d, err
	})
}

func (l *local) InstallSkill(ctx context.Context, req *api.InstallSkill) (*api.Skill, error) {
	return viaMemory(ctx, l, "", func(svc *service.Service, who *service.Caller) (*api.Skill, error) {
		sk, err := svc.InstallSkill(ctx, who, req)
		return &sk, err
	})
}

func (r *remote) Skills(ctx context.Context, ws string) (*api.SkillList, error) {
	return r.cl.Skills(ctx, ws)
}

func (r *remote) Skill(ctx context.Context, ws, name string) (*api.SkillDetail, error) {
	return r.cl.Skill(ctx, ws, name)
}

func (r *remote) InstallSkill(ctx context.Context, req *api.InstallSkill) (*api.Skill, error) {
	return r.cl.InstallSkill(ctx, req)
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
				if asJSON {
					return tui.JSONLines(a.stdout, list)
				}
				tw := tabwriter.NewWriter(a.stdout, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "CANDIDATE\tSTATE\tFROM RUN\tTESTS\tEVIDENCE")
				for _, c := range list {
					ev := c.Evidence
					if c.ApprovedBy != "" {
						ev = fmt.Sprintf("v%d approved by %s; %s", c.Version, c.ApprovedBy, ev)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\n", c.Name+"@"+c.Digest[7:19], c.State, c.Run, c.TestsPassed, c.Tests, visible.String(ev))
				}
				return tw.Flush()
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
			cands := skill.NewCandidates(store, nil)
			cand, err := cands.Find(ctx, args[0])
			if err != nil {
				return &usageError{err}
			}
			if covers == "" {
				covers = cand.Covers
			}
			rec, err := replay.Load(recording)
			if err != nil {
				return err
			}
			base, err := skill.Baseline(recordedCommands(rec), covers)
			if err != nil {
				return &usageError{err}
			}
			with := cand.Usage
			if len(with) == 0 {
				for _, t := range cand.Tests {
					with = append(with, t.Command)
				}
			}
			r := &sandboxRunner{repo: repo, mount: mount, env: append(env, "SKILL_DIR="+cand.Dir), readOnly: []string{cand.Dir}, copies: map[string]string{}}
			defer r.Close()
			cmp, err := skill.Compare(ctx, r, []skill.Case{{Name: filepath.Base(recording), Baseline: base, With: with}})
			if err != nil {
				return err
			}
			cand, err = cands.RecordComparison(ctx, cand.ID(), cmp)
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

// sandboxRunner runs a comparison's commands in the Linux sandbox, each
// arm on its own clone of repo.
type sandboxRunner struct {
	repo, mount string
	env         []string
	readOnly    []string
	copies      map[string]string
}

func (r *sandboxRunner) Run(ctx context.Context, arm, command string) (int, []byte, error) {
	dir, ok := r.copies[arm]
	if !ok {
		var err error
		if dir, err = os.MkdirTemp("", "keel-compare-"); err != nil {
			return 0, nil, err
		}
		r.copies[arm] = dir
		if out, err := exec.CommandContext(ctx, "git", "clone", "-q", "--no-hardlinks", r.repo, dir).CombinedOutput(); err != nil {
			return 0, nil, fmt.Errorf("clone %s: %v: %s", r.repo, err, out)
		}
	}
	sb, err := linux.New(&sandbox.Spec{Workspace: dir, MountPath: r.mount, Env: r.env, Limits: sandbox.Limits{Memory: 2 << 30, Processes: 512, WallTime: testTimeout}}, &linux.Options{ReadOnlyPaths: r.readOnly})
	if err != nil {
		return 0, nil, err
	}
	defer sb.Close()
	var out bytes.Buffer
	res, err := sb.Exec(ctx, &sandbox.Cmd{Args: []string{"bash", "-c", command}, Stdout: &out})
	if err != nil {
		return 0, nil, err
	}
	return res.ExitCode, out.Bytes(), nil
}

// Close removes the arms' clones.
func (r *sandboxRunner) Close() {
	for _, d := range r.copies {
		os.RemoveAll(d)
	}
}

// recordedCommands returns the bash commands of a recording, in order.
func recordedCommands(r *replay.Trajectory) []string {
	var out []string
	for _, t := range r.Turns() {
		for _, c := range t.Message.ToolCalls {
			var a struct {
				Command string `json:"command"`
			}
			if c.Name == "bash" && json.Unmarshal([]byte(c.Arguments), &a) == nil && a.Command != "" {
				out = append(out, a.Command)
			}
		}
	}
	return out
}

// hasTool reports whether the run's recorded tools include name.
func hasTool(tools []agent.ToolInfo, name string) bool {
	for _, t := range tools {
		if t.Name == name {
			return true
		}
	}
	return false
}
