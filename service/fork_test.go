package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// forkSource journals a completed run in a git-less workspace holding
// a.txt: "one" at its first checkpoint (event 2), "two" at its second
// (event 3); event 4 completes it. It returns the
// run's id and workspace.
func forkSource(t *testing.T, ctx context.Context, rt *agent.Runtime) (string, string) {
	t.Helper()
	if !checkpoint.Available() {
		t.Skip("git is not installed: .ci/run installs it")
	}
	ws, store := t.TempDir(), filepath.Join(t.TempDir(), "checkpoints")
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	id, err := rt.Create(ctx, &agent.RunCreated{Task: "t", Model: "test:none", Workspace: ws, MountPath: "/workspace", Sandbox: "none",
		StateDir: filepath.Join(t.TempDir(), "state"), Git: &agent.GitStart{Commit: "0123456789abcdef0123456789abcdef01234567"},
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(policy.Default())})
	if err != nil {
		t.Fatal(err)
	}
	hook, release := checkpoint.Hook(store, ws)
	defer release()
	seq := int64(1)
	add := func(typ journal.Type, v any) {
		t.Helper()
		p, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Store().Append(ctx, id, seq, journal.Draft{Type: typ, Time: time.Now(), Payload: p}); err != nil {
			t.Fatal(err)
		}
		seq++
	}
	var prev *agent.Snapshot
	snap := func() {
		t.Helper()
		cp, err := hook(ctx, id, prev)
		if err != nil || cp == nil {
			t.Fatalf("checkpoint: %+v, %v", cp, err)
		}
		add(journal.WorkspaceCheckpoint, cp)
		prev = &agent.Snapshot{Seq: seq - 1, Tree: cp.Tree, Commit: cp.Commit, Store: cp.Store}
	}
	write("one")
	snap()
	write("two")
	snap()
	add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
	return id, ws
}

func created(t *testing.T, ctx context.Context, rt *agent.Runtime, id string) *agent.RunCreated {
	t.Helper()
	st, _, err := rt.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return st.Created
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var se *service.Error
	if !errors.As(err, &se) || se.Code != code {
		t.Fatalf("err = %v, want code %s", err, code)
	}
}

// A fork in a workspace of its own gets the files of its fork point in a
// directory it makes (not its parents) or an empty one, never over
// files; it records no git start (its files are a checkpoint's, not the
// source's commit) and keeps the source's state directory (where the
// whole outputs its copied events name are). The command line of the
// journal's machine forks in the source's own workspace too.
func TestForkIntoItsOwnWorkspace(t *testing.T) {
	ctx := t.Context()
	rt := agent.NewRuntime(mem.New(), nil)
	svc := service.New(rt, nil)
	defer svc.Shutdown(context.WithoutCancel(ctx))
	src, ws := forkSource(t, ctx, rt)
	me := service.Local("ada")

	dir := filepath.Join(t.TempDir(), "fork")
	fork, err := svc.Fork(ctx, me, src, &api.ForkRun{Seq: 2, Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a.txt")); err != nil || string(b) != "one" {
		t.Errorf("the fork's a.txt = %q, %v; want the checkpoint of event 2's", b, err)
	}
	c, sc := created(t, ctx, rt, fork.ID), created(t, ctx, rt, src)
	if c.Git != nil || c.StateDir != sc.StateDir || fork.Status != "paused" || fork.Reason != service.ReasonForked {
		t.Errorf("fork in %s: git %+v, state dir %q (source's %q), %s (%s); want no git start, the source's state directory, paused (forked)",
			c.Workspace, c.Git, c.StateDir, sc.StateDir, fork.Status, fork.Reason)
	}

	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "mine.txt"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = svc.Fork(ctx, me, src, &api.ForkRun{Seq: 2, Workspace: full})
	wantCode(t, err, api.CodeInvalidRequest)
	if ents, _ := os.ReadDir(full); len(ents) != 1 {
		t.Errorf("a refused fork wrote into %s: %v", full, ents)
	}
	deep := filepath.Join(t.TempDir(), "typo", "fork")
	_, err = svc.Fork(ctx, me, src, &api.ForkRun{Seq: 2, Workspace: deep})
	wantCode(t, err, api.CodeInvalidRequest)
	if _, err := os.Stat(filepath.Dir(deep)); err == nil {
		t.Errorf("a refused fork made %s", filepath.Dir(deep))
	}

	// In place: the source's workspace gets the files of the fork point
	// and keeps its git start.
	inPlace, err := svc.Fork(ctx, me, src, &api.ForkRun{Seq: 2})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "one" {
		t.Errorf("the source's a.txt after a fork in place = %q, want one", b)
	}
	if c := created(t, ctx, rt, inPlace.ID); c.Git == nil || c.Workspace != ws {
		t.Errorf("fork in place: workspace %s, git %+v; want the source's", c.Workspace, c.Git)
	}
}

// A fork into a directory whose reading fails for another reason than
// its absence (a loop of symbolic links, a file) is refused with what is
// wrong with it, and nothing is made: whether it holds files is unknown.
func TestForkRefusesAWorkspaceItCannotRead(t *testing.T) {
	ctx := t.Context()
	rt := agent.NewRuntime(mem.New(), nil)
	svc := service.New(rt, nil)
	defer svc.Shutdown(context.WithoutCancel(ctx))
	src, _ := forkSource(t, ctx, rt)
	me := service.Local("ada")
	dir := t.TempDir()
	loop := filepath.Join(dir, "loop")
	if err := os.Symlink(loop, loop); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := func() int {
		t.Helper()
		list, err := rt.Store().Runs(ctx, &journal.ListParams{})
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}
	before := n()
	for ws, want := range map[string]string{
		loop: "cannot be read (too many levels of symbolic links)",
		file: "is not a directory",
	} {
		_, err := svc.Fork(ctx, me, src, &api.ForkRun{Seq: 2, Workspace: ws})
		wantCode(t, err, api.CodeInvalidRequest)
		if !strings.Contains(err.Error(), ws+" "+want) {
			t.Errorf("fork into %s: %v; want it to say the workspace %s", ws, err, want)
		}
	}
	if n() != before {
		t.Error("a refused fork was journaled")
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "x" {
		t.Errorf("the file named as the fork's workspace = %q, %v", b, err)
	}
}

// A fork at the event that completes its source follows it up: not
// started it is a completed run that waits for a message; started, it
// needs one (a fork that would do nothing is refused, and nothing is
// made).
func TestForkAtCompletion(t *testing.T) {
	ctx := t.Context()
	rt := agent.NewRuntime(mem.New(), nil)
	svc := service.New(rt, nil)
	defer svc.Shutdown(context.WithoutCancel(ctx))
	src, _ := forkSource(t, ctx, rt)
	me := service.Local("ada")
	runs := func() int {
		t.Helper()
		list, err := rt.Store().Runs(ctx, &journal.ListParams{})
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}

	n := runs()
	_, err := svc.Fork(ctx, me, src, &api.ForkRun{Seq: 4, Start: true, Workspace: filepath.Join(t.TempDir(), "f")})
	wantCode(t, err, api.CodeRunCompleted)
	if runs() != n {
		t.Error("a refused fork was journaled")
	}
	for _, req := range []*api.ForkRun{{Seq: 4}, {Seq: 4, Start: true, Message: "and then?"}} {
		fork, err := svc.Fork(ctx, me, src, req)
		if err != nil {
			t.Fatalf("fork %+v: %v", req, err)
		}
		// This service executes nothing: a started fork is the caller's
		// to resume with the message.
		if fork.Status != "completed" || fork.Events != 5 {
			t.Errorf("fork %+v at the completion = %s with %d events; want completed: the copies and the files' restore", req, fork.Status, fork.Events)
		}
	}
	// Before the completion: paused, not started.
	fork, err := svc.Fork(ctx, me, src, &api.ForkRun{Seq: 3, Workspace: filepath.Join(t.TempDir(), "f")})
	if err != nil {
		t.Fatal(err)
	}
	if fork.Status != "paused" || fork.Reason != service.ReasonForked {
		t.Errorf("fork before the completion = %s (%s), want paused (forked)", fork.Status, fork.Reason)
	}
}

// A fork's limits are checked before anything is made: a negative one,
// or limits for a fork that is not started, are refused with no run
// journaled and no workspace made (fresh-user trial 8, F7).
func TestForkRefusesBadLimitsFirst(t *testing.T) {
	ctx := t.Context()
	rt := agent.NewRuntime(mem.New(), nil)
	svc := service.New(rt, nil)
	defer svc.Shutdown(context.WithoutCancel(ctx))
	src, _ := forkSource(t, ctx, rt)
	me := service.Local("ada")
	runs := func() int {
		t.Helper()
		list, err := rt.Store().Runs(ctx, &journal.ListParams{})
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}
	n, neg, ten := runs(), -1, 10
	dir := filepath.Join(t.TempDir(), "fork")
	for _, req := range []*api.ForkRun{
		{Seq: 2, Start: true, Workspace: dir, Limits: &api.Limits{MaxSteps: &neg}},
		{Seq: 2, Start: true, Workspace: dir, Limits: &api.Limits{Timeout: "soon"}},
		{Seq: 2, Workspace: dir, Limits: &api.Limits{MaxSteps: &ten}},
	} {
		_, err := svc.Fork(ctx, me, src, req)
		wantCode(t, err, api.CodeInvalidRequest)
		if _, serr := os.Stat(dir); runs() != n || serr == nil {
			t.Errorf("a fork refused for its limits (%v) made a run or its workspace", err)
		}
	}
	fork, err := svc.Fork(ctx, me, src, &api.ForkRun{Seq: 2, Start: true, Workspace: dir, Limits: &api.Limits{MaxSteps: &ten}})
	if err != nil || runs() != n+1 {
		t.Fatalf("fork with limits: %+v, %v", fork, err)
	}
}

// gitIn runs git in dir for a test, with its own identity.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// A fork into a new directory of a run in a git repository is a working
// copy of that repository at the run's start commit, the checkpoint's
// files on top: git works in it and its diff compares with the same
// commit (fresh-user report 12, N7/B6: it had no .git, the agent's git
// commands failed, and keel runs diff said no commit was recorded). It
// is a copy of its own: the source's branches, configuration and remote
// are not shared.
func TestForkIntoNewDirectoryIsARepository(t *testing.T) {
	if !checkpoint.Available() {
		t.Skip("git is not installed: .ci/run installs it")
	}
	ctx := t.Context()
	rt := agent.NewRuntime(mem.New(), nil)
	svc := service.New(rt, nil)
	defer svc.Shutdown(context.WithoutCancel(ctx))
	ws, store := t.TempDir(), filepath.Join(t.TempDir(), "checkpoints")
	writeFile := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(ws, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, ws, "init", "-q")
	writeFile("a.txt", "one\n")
	writeFile(".gitignore", "*.log\n")
	gitIn(t, ws, "add", ".")
	gitIn(t, ws, "commit", "-qm", "start")
	commit := strings.TrimSpace(gitIn(t, ws, "rev-parse", "HEAD"))
	start := checkpoint.StartOf(ctx, ws)
	if start == nil || start.Commit != commit {
		t.Fatalf("StartOf = %+v, want commit %s", start, commit)
	}
	id, err := rt.Create(ctx, &agent.RunCreated{Task: "t", Model: "test:none", Workspace: ws, MountPath: "/workspace", Sandbox: "none",
		StateDir: filepath.Join(t.TempDir(), "state"), Git: start, Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(policy.Default())})
	if err != nil {
		t.Fatal(err)
	}
	hook, release := checkpoint.Hook(store, ws)
	defer release()
	seq := int64(1)
	add := func(typ journal.Type, v any) {
		t.Helper()
		p, _ := json.Marshal(v)
		if _, err := rt.Store().Append(ctx, id, seq, journal.Draft{Type: typ, Time: time.Now(), Payload: p}); err != nil {
			t.Fatal(err)
		}
		seq++
	}
	var prev *agent.Snapshot
	snap := func() {
		t.Helper()
		cp, err := hook(ctx, id, prev)
		if err != nil || cp == nil {
			t.Fatalf("checkpoint: %+v, %v", cp, err)
		}
		add(journal.WorkspaceCheckpoint, cp)
		prev = &agent.Snapshot{Seq: seq, Tree: cp.Tree, Commit: cp.Commit, Store: cp.Store}
	}
	snap()
	add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "c1", Name: "bash", Arguments: "{}"}}}})
	add(journal.GateDecided, &agent.GateDecided{CallID: "c1", Tool: "bash", Decision: policy.Decision{Effect: policy.Allow}})
	add(journal.ToolStarted, &agent.ToolStarted{CallID: "c1", Tool: "bash"})
	writeFile("a.txt", "two\n")
	writeFile("b.txt", "new\n")
	add(journal.ToolFinished, &agent.ToolFinished{CallID: "c1", Tool: "bash"})
	snap()
	at := seq // the second checkpoint
	add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
	// Meanwhile the source moves on: a commit on its branch.
	gitIn(t, ws, "commit", "-qam", "later")

	dir := filepath.Join(t.TempDir(), "fork")
	fork, err := svc.Fork(ctx, service.Local("ada"), id, &api.ForkRun{Seq: at, Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(gitIn(t, dir, "rev-parse", "HEAD")); got != commit {
		t.Errorf("the fork's HEAD = %s, want the source's start commit %s", got, commit)
	}
	if got := gitIn(t, dir, "status", "--porcelain"); got != " M a.txt\n?? b.txt\n" {
		t.Errorf("git status in the fork:\n%s", got)
	}
	if got := gitIn(t, dir, "diff", "--", "a.txt"); !strings.Contains(got, "-one\n+two\n") {
		t.Errorf("git diff in the fork:\n%s", got)
	}
	if got := gitIn(t, dir, "remote"); got != "" {
		t.Errorf("the fork's remotes: %q, want none (the source had none; not the source's directory)", got)
	}
	if got := strings.TrimSpace(gitIn(t, dir, "rev-parse", "refs/heads/main")); got != commit {
		t.Errorf("the fork's main = %s, want it as at the source's start, %s", got, commit)
	}
	if _, err := os.Stat(filepath.Join(dir, ".git", "objects", "info", "alternates")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the fork borrows the source's objects: %v", err)
	}
	c := created(t, ctx, rt, fork.ID)
	if c.Git == nil || c.Git.Commit != commit {
		t.Fatalf("the fork's git start = %+v, want commit %s", c.Git, commit)
	}
	events, err := rt.Store().Read(ctx, fork.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := checkpoint.Changed(ctx, c, events)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range sum.Changes {
		got = append(got, string(ch.Status)+" "+ch.Path)
	}
	if strings.Join(got, ", ") != "M a.txt, A b.txt" {
		t.Errorf("the fork's changes since the start commit: %v, want M a.txt, A b.txt", got)
	}
}
