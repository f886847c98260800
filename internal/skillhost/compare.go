package skillhost

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/skill"
)

// Case is a recorded case a candidate is compared on (keel skills
// evaluate).
type Case struct {
	// Recording is the recorded trajectory of the case; Repo a git
	// repository at its starting commit (each arm works on its own
	// clone), seen in the sandbox at MountPath.
	Recording, Repo, MountPath string
	// Covers is the regular expression of the recorded commands the
	// skill replaces ("": the candidate's).
	Covers string
	// Env is KEY=VALUE for both arms' sandboxes.
	Env []string
}

// Evaluate compares the candidate ref names with the baseline on k in
// the Linux sandbox: the baseline arm runs the recording's commands the
// candidate covers, the other arm the candidate's usage (its tests'
// commands when it gave none). It journals the comparison and returns
// the candidate as it now is. A reference that names no candidate and a
// bad covers expression are *service.Error of code invalid_request.
func (h *Host) Evaluate(ctx context.Context, ref string, k *Case) (*skill.Candidate, *skill.Comparison, error) {
	cands := skill.NewCandidates(h.Store, nil)
	cand, err := cands.Find(ctx, ref)
	if err != nil {
		return nil, nil, invalid(err)
	}
	covers := k.Covers
	if covers == "" {
		covers = cand.Covers
	}
	rec, err := replay.Load(k.Recording)
	if err != nil {
		return nil, nil, err
	}
	base, err := skill.Baseline(recordedCommands(rec), covers)
	if err != nil {
		return nil, nil, invalid(err)
	}
	with := cand.Usage
	if len(with) == 0 {
		for _, t := range cand.Tests {
			with = append(with, t.Command)
		}
	}
	r := &sandboxRunner{repo: k.Repo, mount: k.MountPath, env: append(k.Env, "SKILL_DIR="+cand.Dir), readOnly: []string{cand.Dir}, copies: map[string]string{}}
	defer r.Close()
	cmp, err := skill.Compare(ctx, r, []skill.Case{{Name: filepath.Base(k.Recording), Baseline: base, With: with}})
	if err != nil {
		return nil, nil, err
	}
	cand, err = cands.RecordComparison(ctx, cand.ID(), cmp)
	return cand, cmp, err
}

// invalid is err as a bad request, which front ends show as the
// caller's mistake.
func invalid(err error) error {
	return &service.Error{Code: api.CodeInvalidRequest, Message: err.Error()}
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
