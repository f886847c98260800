package skillhost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/skill"
	"github.com/keel-run/keel/tool"
)

// Tools of agent-written skills.
const (
	ProposeTool = skill.ProposeTool
	PromoteTool = skill.PromoteTool
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

// AddPromotionTools registers propose_skill and promote_skill for run
// c when it learns (it was offered memory), over the host's journal
// (nil: definitions only).
func (h *Host) AddPromotionTools(r *tool.Registry, c *agent.RunCreated) {
	if c.Recall == nil {
		return
	}
	tool.Add(r, &tool.Tool{
		Name: ProposeTool,
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
		return h.propose(ctx, c, req, &in)
	})
	tool.Add(r, &tool.Tool{
		Name:        PromoteTool,
		Description: "Ask a person to approve a skill candidate whose tests passed and that beat the baseline; once approved Keel signs it, stores it and pins it in this project's lockfile, and later runs are offered it.",
		InputSchema: []byte(`{"type":"object","additionalProperties":false,"properties":{"name":{"type":"string","minLength":1,"maxLength":200}},"required":["name"]}`),
		Effect:      tool.External,
		Scope:       func(json.RawMessage) []string { return []string{} },
	}, func(ctx context.Context, req *tool.Request, in promoteInput) (*tool.Result, error) {
		return h.promote(ctx, c, req, in.Name)
	})
}

// propose stores a candidate in the run's state directory (visible
// read-only in the sandbox), journals it and runs its tests in the run's
// sandbox.
func (h *Host) propose(ctx context.Context, c *agent.RunCreated, req *tool.Request, in *proposeInput) (*tool.Result, error) {
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
	cands := skill.NewCandidates(h.Store, nil)
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

// promote runs once a person approved the call (the default policy
// asks before every promote_skill): it checks the evidence, signs the
// candidate with the run's agent key, stores it and pins it.
func (h *Host) promote(ctx context.Context, c *agent.RunCreated, req *tool.Request, name string) (*tool.Result, error) {
	cands := skill.NewCandidates(h.Store, nil)
	cand, err := cands.Find(ctx, name)
	if err != nil {
		return tool.Errorf("%v", err), nil
	}
	if cand.State != skill.StateEvaluated {
		return tool.Errorf("candidate %s is %s: only a candidate whose tests passed and that beat the baseline can be promoted", cand.ID(), cand.State), nil
	}
	by, err := approver(ctx, h.Store, req.RunID, req.CallID)
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
	s, err := h.sign(ctx, sk, req.Principal, version, by, "keel auth key generate makes the vault key")
	if err != nil {
		return tool.Errorf("%v", err), nil
	}
	stored, err := h.storePinned(sk, s, c.Workspace)
	if err != nil {
		return nil, err
	}
	if _, err := cands.RecordApproval(ctx, cand.ID(), s, c.Workspace); err != nil {
		return nil, err
	}
	return tool.Text(fmt.Sprintf("skill %s v%d approved by %s, signed with %s, stored as %s and pinned in %s: later runs in this project are offered it",
		stored.Name, version, by, s.KeyID, stored.Digest, skill.LockFile)), nil
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
