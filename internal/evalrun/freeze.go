package evalrun

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/eval"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/assemble/builder"
	"github.com/keel-run/keel/journal"
)

// FreezeParams says what [Freeze] freezes into what case.
type FreezeParams struct {
	// Run is the run to freeze; Out the directory of the case (new or
	// empty).
	Run, Out string
	// Name is the case's name (default: the run's id); MountPath its
	// mount path (default: the run's).
	Name, MountPath string
	// Checks are shell commands run in the sandbox after a trial (exit
	// 0 passes); Passed the test ids the last one's output must report
	// passed; Files "PATH" or "PATH=CONTENT" files that must exist
	// (with that content); Patch checks that a trial's git diff is the
	// run's.
	Checks, Passed, Files []string
	Patch                 bool
	// Sandbox is the kind of sandbox the checks run in now.
	Sandbox string
	// Home is Keel's home; Store the run's journal; Builder wires the
	// sandbox of the checks.
	Home    string
	Store   journal.Store
	Builder *builder.Builder
	// Warn gets notes and each check's outcome.
	Warn io.Writer
}

// Frozen is the case a [Freeze] wrote: its directory and the run's
// verdict, which the case expects.
type Frozen struct {
	Dir     string
	Verdict eval.Verdict
}

// freezeTeam refuses a run of a team: a case replays one run's
// recording in one run, without a team, so a lead's spawn_agent calls
// would not be offered there and its children's work not redone, and a
// child's run is its lead's part (its starting files are the lead's
// work at its spawn).
func freezeTeam(st *agent.State) error {
	if p := st.Created.Parent; p != nil {
		return refusef("run %s is a child agent of run %s: a case is one run without a team, and a child's run is its lead's part; freeze a run without child agents", st.RunID, p.Run)
	}
	if n := len(st.Children); n > 0 {
		children := "1 child"
		if n > 1 {
			children = fmt.Sprintf("%d children", n)
		}
		return refusef("run %s led a team of child agents (%s): a case replays one run without a team, so its spawn_agent calls would not be offered and its children's work not redone; freeze a run without child agents", st.RunID, children)
	}
	return nil
}

// Freeze writes Out/case.toml and Out/trajectory.json: the run's task,
// system prompt, environment, setup and mount path; its workspace at its
// start (the git commit it started from and, when it started from
// uncommitted files, its first checkpoint's files in Out/files); its
// model answers and tool results as a recording; and the checks. The
// checks run now on the run's files at its end (its newest checkpoint
// over its starting commit, in a new directory), and the verdict is the
// case's expect. A run of a team (a lead that started child agents, or
// a child) is refused.
func Freeze(ctx context.Context, p *FreezeParams) (*Frozen, error) {
	out, err := filepath.Abs(p.Out)
	if err != nil {
		return nil, err
	}
	if err := EmptyDir(out, "-o"); err != nil {
		return nil, err
	}
	id := p.Run
	events, err := journal.ReadVerified(ctx, p.Store, id)
	if err != nil {
		return nil, err
	}
	st, err := agent.Fold(id, events)
	if err != nil {
		return nil, err
	}
	created := st.Created
	if err := freezeTeam(st); err != nil {
		return nil, err
	}
	if st.Ended == nil {
		return nil, refusef("run %s has not ended (%s): freeze a finished run", id, st.Status)
	}
	name, mount := p.Name, p.MountPath
	if name == "" {
		name = id
	}
	if mount == "" {
		mount = created.MountPath
	}
	if err := Recording(events, created, filepath.Join(out, "trajectory.json")); err != nil {
		return nil, err
	}
	c := &eval.Case{Name: name, Task: created.Task, System: created.System, Env: created.Env, Setup: created.Setup,
		Recordings: []string{"trajectory.json"}, Workspace: eval.Workspace{MountPath: mount},
		// The run's own bounds (0 in a case: the evaluation's, else Keel's
		// defaults).
		MaxSteps: created.Limits.MaxSteps, Timeout: eval.Duration(created.Limits.Timeout)}
	if len(created.Network) > 0 || len(created.SecretEnv) > 0 {
		// An evaluation's trials have no network and no secrets: say so
		// rather than freeze a case that quietly differs.
		fmt.Fprintf(p.Warn, "keel: note: the run allowed hosts %v and held secrets %v; a frozen case runs without network or secrets, so calls that used them will differ\n",
			created.Network, created.SecretEnv)
	}
	if created.Git != nil && created.Git.Commit != "" {
		c.Workspace.Git, c.Workspace.Commit = caseRepo(created), created.Git.Commit
	}
	if created.Git == nil || len(created.Git.Dirty) > 0 {
		// The start had files git does not hold: keep the first
		// checkpoint's.
		start := filepath.Join(out, "start")
		if err := restoreFiles(ctx, events, &agent.RunCreated{Workspace: created.Workspace}, start, false, p.Warn); err != nil {
			return nil, fmt.Errorf("the run's starting files: %w", err)
		}
		if err := os.Rename(start, filepath.Join(out, "files")); err != nil {
			return nil, err
		}
		c.Workspace.Files = "files"
	}
	// The checks run now on the run's files at its end, in a new
	// directory: not on its workspace, which may have changed since.
	tmp, err := os.MkdirTemp("", "keel-freeze-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	ws := filepath.Join(tmp, "workspace")
	if err := restoreFiles(ctx, events, created, ws, true, p.Warn); err != nil {
		return nil, fmt.Errorf("the run's files at its end: %w", err)
	}
	wc := *created
	wc.Workspace, wc.Sandbox, wc.Setup = ws, p.Sandbox, ""
	wc.StateDir = assemble.StateDir(p.Home, ws)
	wc.Model = "replay:" + filepath.Join(out, "trajectory.json")
	wc.MCP, wc.SQL, wc.OpenAPI = nil, nil, nil
	wiring, closer, err := p.Builder.Wire(ctx, &wc)
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	sh := Shell(wiring.Env.Sandbox)
	if p.Patch {
		code, diff, err := sh(ctx, eval.PatchCommand, 0)
		if err != nil {
			return nil, err
		}
		if code != 0 || strings.TrimSpace(diff) == "" {
			return nil, refusef("--patch: the run's files at its end have no git diff to check (exit status %d): %s", code, agent.Clip(diff, 200))
		}
		c.Checks = append(c.Checks, eval.Check{Name: "patch", Patch: diff})
	}
	for i, cmd := range p.Checks {
		ch := eval.Check{Run: cmd}
		if i == len(p.Checks)-1 {
			ch.Passed = p.Passed
		}
		c.Checks = append(c.Checks, ch)
	}
	for _, f := range p.Files {
		path, content, hasContent := strings.Cut(f, "=")
		ch := eval.Check{File: path}
		if hasContent {
			ch.Equals = content
		}
		c.Checks = append(c.Checks, ch)
	}
	results, err := eval.RunChecks(ctx, c, ws, sh)
	if err != nil {
		return nil, err
	}
	u, err := eval.Measure(events)
	if err != nil {
		return nil, err
	}
	ok := true
	for _, r := range results {
		ok = ok && r.Passed
		mark := "passed"
		if !r.Passed {
			mark = "FAILED: " + r.Detail
		}
		fmt.Fprintf(p.Warn, "keel: check %s: %s\n", r.Name, mark)
	}
	v := eval.Classify(u, ok)
	if v == eval.Infra {
		return nil, fmt.Errorf("run %s ended on an infrastructure failure (%s): not a case to freeze", id, u.Infra)
	}
	c.Expect = "fail"
	if v == eval.Passed {
		c.Expect = "pass"
	}
	f, err := os.Create(filepath.Join(out, "case.toml"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fmt.Fprintf(f, "# Frozen from run %s by keel eval freeze: its verdict was %s (%s).\n", id, v, u.Status+" "+u.Reason)
	if err := toml.NewEncoder(f).Encode(c); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return &Frozen{Dir: out, Verdict: v}, nil
}
