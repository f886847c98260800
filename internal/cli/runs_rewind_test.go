package cli_test

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/oklog/ulid/v2"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/server/api"
)

// files reads every file under dir as path → content (links as their
// target).
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "__pycache__" {
				// The demo's .gitignore ignores it: not in the
				// checkpoints, left alone by a rewind.
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		m[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkpointSeqs returns the events of keel runs checkpoints' rows.
func checkpointSeqs(t *testing.T, args ...string) []string {
	t.Helper()
	if len(args) > 1 {
		args = []string{args[0], args[1], "runs", "checkpoints", args[2]}
	} else {
		args = []string{"runs", "checkpoints", args[0]}
	}
	code, out, errOut := keel(t, args...)
	if code != 0 {
		t.Fatalf("runs checkpoints = %d: %s", code, errOut)
	}
	return regexp.MustCompile(`(?m)^(\d+)\s+\S+\s+checkpoint`).FindAllString(out, -1)
}

// The demo run is checkpointed after each step that changed a file;
// keel runs rewind restores the files byte for byte (and is undone by
// rewinding to the event before it); the run stays completed; keel runs
// fork starts a run from an event with the files of that point, in a new
// directory or in the run's own workspace.
func TestRewindAndFork(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	db := setup(t)
	ws := demoProject(t)
	before := files(t, ws)
	if code, _, errOut := keel(t, "run", "--model", "scripted:demo", "--workspace", ws, "-q", "fix it"); code != 0 {
		t.Fatalf("keel run = %d: %s", code, errOut)
	}
	id, st := lastRun(t, db)
	after := files(t, ws)
	if cmp.Equal(before, after) {
		t.Fatal("the demo changed no file")
	}
	rows := checkpointSeqs(t, id)
	if len(rows) < 2 {
		t.Fatalf("checkpoints: %q, want the start and the edit", rows)
	}
	first := strings.Fields(rows[0])[0]
	last := strings.Fields(rows[len(rows)-1])[0]

	if code, out, _ := keel(t, "runs", "diff", "--at", last, id); code != 0 || !strings.Contains(out, "M textstats.py +1 -1") || !strings.Contains(out, "+    return len(text.split())") {
		t.Errorf("runs diff --at %s = %d:\n%s", last, code, out)
	}
	code, out, errOut := keel(t, "runs", "rewind", id, "--to", first)
	if code != 0 || !strings.Contains(out, "M textstats.py") || !strings.Contains(out, "undo: keel runs rewind "+id) {
		t.Fatalf("runs rewind = %d: %s\n%s", code, errOut, out)
	}
	if d := cmp.Diff(before, files(t, ws)); d != "" {
		t.Errorf("rewound workspace (-before the run +now):\n%s", d)
	}
	undo := regexp.MustCompile(`--to (\d+)`).FindStringSubmatch(out)[1]
	if code, _, errOut := keel(t, "runs", "rewind", id, "--to", undo); code != 0 {
		t.Fatalf("undo = %d: %s", code, errOut)
	}
	if d := cmp.Diff(after, files(t, ws)); d != "" {
		t.Errorf("undone rewind (-after the run +now):\n%s", d)
	}
	// Rewinding to the tool.finished of the edit gives the files with the
	// edit (the checkpoint at the end of its step), and says so.
	if code, _, errOut := keel(t, "runs", "rewind", id, "--to", first); code != 0 {
		t.Fatalf("runs rewind = %d: %s", code, errOut)
	}
	edited := editFinished(t, db, id)
	code, out, errOut = keel(t, "runs", "rewind", id, "--to", edited)
	if code != 0 || !strings.Contains(out, "event "+edited+" is in a step whose checkpoint is event ") || !strings.Contains(out, "M textstats.py") {
		t.Fatalf("runs rewind --to %s (the edit's tool.finished) = %d: %s\n%s", edited, code, errOut, out)
	}
	if d := cmp.Diff(after, files(t, ws)); d != "" {
		t.Errorf("rewound to the edit's result (-after the run +now):\n%s", d)
	}
	// Trial 10, N26: runs diff --at and runs fork --at the same event
	// give the same files as the rewind (they gave the checkpoint before
	// the edit, without it).
	if code, out, errOut := keel(t, "runs", "diff", "--at", edited, id); code != 0 || !strings.Contains(out, "M textstats.py +1 -1") {
		t.Errorf("runs diff --at %s (the edit's tool.finished) = %d: %s\n%s", edited, code, errOut, out)
	}
	atEdit := filepath.Join(t.TempDir(), "fork-at-edit")
	if code, _, errOut := keel(t, "runs", "fork", id, "--at", edited, "--workspace", atEdit, "--no-start"); code != 0 || !strings.Contains(errOut, "event "+edited+" is in a step whose checkpoint is event ") {
		t.Errorf("runs fork --at %s (the edit's tool.finished) = %d: %s", edited, code, errOut)
	}
	if got := files(t, atEdit)["textstats.py"]; got != after["textstats.py"] {
		t.Errorf("the fork at the edit's result lacks the edit:\n%s", got)
	}
	if code, out, _ := keel(t, "runs", "list"); code != 0 || !strings.Contains(out, id+"  completed") {
		t.Errorf("a rewound run is no longer completed:\n%s", out)
	}
	// Event 1 (the task) comes before the first checkpoint, with nothing
	// that changes files between: its files are that checkpoint's (chat's
	// /undo after the first answer).
	if code, _, errOut := keel(t, "runs", "rewind", id, "--to", "1"); code != 0 {
		t.Errorf("rewind to the task = %d: %s", code, errOut)
	}
	if d := cmp.Diff(before, files(t, ws)); d != "" {
		t.Errorf("rewound to the task (-before the run +now):\n%s", d)
	}
	if code, _, errOut := keel(t, "runs", "rewind", id, "--to", edited); code != 0 {
		t.Fatalf("runs rewind --to %s = %d: %s", edited, code, errOut)
	}
	if code, _, errOut := keel(t, "runs", "rewind", id, "--to", "9999"); code == 0 || !strings.Contains(errOut, "has events 1 to") {
		t.Errorf("rewind past the end = %d: %s", code, errOut)
	}

	// A fork in a new directory gets the files of the fork point; the
	// source's workspace is left alone.
	dir := filepath.Join(t.TempDir(), "fork")
	code, out, errOut = keel(t, "runs", "fork", id, "--at", first, "--workspace", dir, "--no-start")
	if code != 0 || !strings.Contains(errOut, "the files are those of the checkpoint of event "+first) {
		t.Fatalf("runs fork = %d: %s", code, errOut)
	}
	fork := strings.TrimSpace(out)
	if d := cmp.Diff(before, files(t, dir)); d != "" {
		t.Errorf("fork's files (-before the run +fork):\n%s", d)
	}
	if d := cmp.Diff(after, files(t, ws)); d != "" {
		t.Errorf("the source's workspace changed (-after +now):\n%s", d)
	}
	if code, out, _ := keel(t, "runs", "show", fork); code != 0 || !strings.Contains(out, "workspace.restored") || !strings.Contains(out, "paused (forked)") {
		t.Errorf("the fork's timeline = %d:\n%s", code, out)
	}
	// Started, the fork runs the rest of the demo in its directory.
	if code, _, errOut := keel(t, "runs", "resume", fork, "-q"); code != 0 {
		t.Fatalf("resume of the fork = %d: %s", code, errOut)
	}
	if got := files(t, dir)["textstats.py"]; got != after["textstats.py"] {
		t.Errorf("the fork did not make the edit in its own directory:\n%s", got)
	}
	if code, _, errOut := keel(t, "runs", "fork", id, "--at", first, "--workspace", dir); code != 2 || !strings.Contains(errOut, "is not empty") {
		t.Errorf("fork into a non-empty directory = %d: %s", code, errOut)
	}
	// A fork makes its workspace directory, not missing parents.
	deep := filepath.Join(t.TempDir(), "typo", "fork")
	if code, _, errOut := keel(t, "runs", "fork", id, "--at", first, "--workspace", deep, "--no-start"); code != 2 || !strings.Contains(errOut, "parent directory") {
		t.Errorf("fork into a directory whose parent is missing = %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Dir(deep)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused fork made %s: %v", filepath.Dir(deep), err)
	}
	// Without --workspace the run's own workspace is restored in place.
	if code, _, errOut := keel(t, "runs", "fork", id, "--at", first, "--no-start"); code != 0 {
		t.Fatalf("runs fork in place = %d: %s", code, errOut)
	}
	if d := cmp.Diff(before, files(t, ws)); d != "" {
		t.Errorf("fork in place (-before +now):\n%s", d)
	}
	_ = st
}

// editFinished is the event of run id's tool.finished of edit_file.
func editFinished(t *testing.T, db, id string) string {
	t.Helper()
	s, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := s.Read(t.Context(), id, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type == journal.ToolFinished && strings.Contains(string(e.Payload), `"tool":"edit_file"`) {
			return strconv.FormatInt(e.Seq, 10)
		}
	}
	t.Fatalf("run %s has no edit_file result", id)
	return ""
}

// The same through a team server: keel --server URL runs checkpoints,
// rewind and fork act on the server's run and its workspace.
func TestRewindAndForkWithServer(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	s := startServe(t)
	c := s.apiClient(t)
	run, err := c.CreateRun(t.Context(), &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	last := untilStopped(t, c, run.ID, 1)
	if _, err := c.Approve(t.Context(), run.ID, "demo_4", &api.Decide{}); err != nil {
		t.Fatalf("approve: %v (last event %s)", err, last.Type)
	}
	if end := untilStopped(t, c, run.ID, last.Seq+1); end.Type != journal.RunCompleted {
		t.Fatalf("the demo ended with %s", end.Type)
	}
	rows := checkpointSeqs(t, "--server", s.url, run.ID)
	if len(rows) < 2 {
		t.Fatalf("checkpoints through the server: %q, want the start and the edit", rows)
	}
	first := strings.Fields(rows[0])[0]
	file := filepath.Join(run.Workspace, "textstats.py")
	edited := mustRead(t, file)
	// The demo run is its creator's (here the admin's): another runs:write
	// token may not rewind it, send it a message or cancel it.
	other, err := c.CreateToken(t.Context(), &api.CreateToken{Name: "wr", Scopes: []string{api.ScopeRunsWrite}})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"runs", "rewind", run.ID, "--to", first}, {"runs", "resume", run.ID, "--message", "hi from wr"}, {"runs", "cancel", run.ID}} {
		code, out, errOut := keel(t, append([]string{"--server", s.url, "--token", other.Secret}, args...)...)
		if code == 0 || !strings.Contains(errOut, "only that person (or an admin) may resume, message, rewind or cancel it") {
			t.Errorf("%v by another token = %d, want refused:\n%s%s", args, code, out, errOut)
		}
	}
	if b := mustRead(t, file); string(b) != string(edited) {
		t.Fatalf("another token's refused rewind changed the demo's files:\n%s", b)
	}
	code, out, errOut := keel(t, "--server", s.url, "runs", "rewind", run.ID, "--to", first)
	if code != 0 || !strings.Contains(out, "M textstats.py") {
		t.Fatalf("rewind through the server = %d: %s\n%s", code, errOut, out)
	}
	if b := mustRead(t, file); !strings.Contains(string(b), `text.split(" ")`) {
		t.Errorf("the server's workspace was not rewound:\n%s", b)
	}
	code, out, errOut = keel(t, "--server", s.url, "runs", "fork", run.ID, "--at", strings.Fields(rows[len(rows)-1])[0], "--no-start")
	if code != 0 || !strings.Contains(errOut, "the files are those of the checkpoint of event") {
		t.Fatalf("fork through the server = %d: %s", code, errOut)
	}
	fork, err := c.Run(t.Context(), strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	if fork.Workspace == run.Workspace || string(mustRead(t, filepath.Join(fork.Workspace, "textstats.py"))) != string(edited) {
		t.Errorf("the fork's workspace %s does not have the edited file", fork.Workspace)
	}
	// Started, the server executes the fork and the command follows it
	// from its first new event.
	code, out, errOut = keel(t, "--server", s.url, "runs", "fork", run.ID, "--at", first, "--no-wait")
	if code != 3 || !strings.Contains(errOut, "approval needed for edit_file") || strings.Count(errOut, "step 1 ·") != 1 {
		t.Errorf("started fork through the server = %d (want 3, stopped at the demo's approval, each step printed once):\n%s%s", code, out, errOut)
	}
}

// keel runs show counts a fork's duration from its own first event: the
// events it copied keep the source's times (here an hour old); keel runs
// list shows it when it was made.
func TestForkDurationIsItsOwn(t *testing.T) {
	db := setup(t)
	traj := writeTrajectory(t, "say done", []fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")})
	if code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", t.TempDir(), "--sandbox", "none", "-q"); code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	id, _ := lastRun(t, db)
	s, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.Read(t.Context(), id, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The same run as if made an hour ago.
	old := strings.ToLower(ulid.Make().String())
	drafts := make([]journal.Draft, len(evs))
	for i, e := range evs {
		drafts[i] = journal.Draft{Type: e.Type, Time: e.Time.Add(-time.Hour), Payload: e.Payload}
	}
	if _, err := s.Append(t.Context(), old, 0, drafts...); err != nil {
		t.Fatal(err)
	}
	s.Close()
	code, out, errOut := keel(t, "runs", "fork", "--db", db, old, "--at", "1", "--no-start")
	if code != 0 {
		t.Fatalf("keel runs fork = %d\n%s", code, errOut)
	}
	fork := strings.TrimSpace(out)
	code, out, errOut = keel(t, "runs", "show", "--db", db, fork)
	if code != 0 {
		t.Fatalf("keel runs show = %d\n%s", code, errOut)
	}
	// Event 1 precedes the first checkpoint with nothing between: the
	// fork gets those files (workspace.restored), as a rewind would.
	if m := regexp.MustCompile(`(?m)^3 events · .* · (\S+)$`).FindStringSubmatch(out); m == nil || m[1] != "0s" {
		t.Errorf("the fork's header (want a duration of 0s: it has only the copied run.created, its files and its own pause):\n%s", out)
	}
	// keel runs list puts the fork first, as the newest run: it was made
	// now, not an hour ago with its source.
	code, out, errOut = keel(t, "runs", "list", "--db", db)
	if lines := strings.Split(out, "\n"); code != 0 || len(lines) < 4 || !strings.HasPrefix(lines[1], fork) || !strings.HasSuffix(strings.Fields(lines[3])[0], old) {
		t.Errorf("keel runs list = %d (want the fork first, its source last)\n%s%s", code, out, errOut)
	}
}

// keel runs fork at the event that completes a run follows it up in the
// fork with --message (in a directory of its own: the source's
// workspace is left alone); without a message it refuses and makes
// nothing; with --no-start the fork waits for one.
func TestForkFollowsUpACompletedRun(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	traj := writeTrajectory(t, "answer, then more", nil, []fcall{sh("echo more > more.txt")}, nil)
	if code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", allowAllPolicy(t), "--completion-marker", "NONE", "-q"); code != 0 {
		t.Fatalf("run = %d\n%s", code, errOut)
	}
	id, _ := lastRun(t, db)
	_, evs := loadRun(t, db, id)
	last := strconv.Itoa(len(evs))
	code, _, errOut := keel(t, "runs", "fork", "--db", db, id, "--at", last)
	if code != 1 || !strings.Contains(errOut, "completes run") || !strings.Contains(errOut, "send a message") {
		t.Errorf("fork at the completion without a message = %d: %s", code, errOut)
	}
	if got, _ := lastRun(t, db); got != id {
		t.Errorf("the refused fork made run %s", got)
	}
	code, out, errOut := keel(t, "runs", "fork", "--db", db, id, "--at", last, "--no-start")
	if code != 0 || !strings.Contains(errOut, "follow it up with: ") || !strings.Contains(errOut, " runs resume "+strings.TrimSpace(out)+" --message TEXT") {
		t.Errorf("unstarted fork at the completion = %d: %s%s", code, out, errOut)
	}
	dir := filepath.Join(t.TempDir(), "fork")
	code, out, errOut = keel(t, "runs", "fork", "--db", db, id, "--at", last, "--workspace", dir, "--message", "also write more.txt", "-q")
	if code != 0 || !strings.Contains(errOut, "continues with your message as a follow-up") {
		t.Fatalf("fork with a follow-up = %d\n%s%s", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "more.txt")); err != nil || string(b) != "more\n" {
		t.Errorf("the fork's more.txt = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "more.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the follow-up in the fork wrote into the source's workspace: %v", err)
	}
}

// A fork's limits are checked by the service before it makes anything:
// a negative one is refused with exit status 2 and leaves no run and no
// copy of the demo project, in both forms (fresh-user trial 8, F7); with
// --server the fork takes them as keel runs resume does, and the server
// journals them when the fork starts (F9).
func TestForkLimitsBothForms(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	db := setup(t)
	tmp := os.Getenv("TMPDIR")
	if code, out, errOut := keel(t, "demo", "--no-wait"); code != 3 {
		t.Fatalf("keel demo --no-wait = %d, want 3 at the approval\n%s%s", code, out, errOut)
	}
	local, _ := lastRun(t, db)
	s := startServe(t)
	c := s.apiClient(t)
	remote, err := c.CreateRun(t.Context(), &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	untilStopped(t, c, remote.ID, 1)
	count := func() (runs, demos int) {
		t.Helper()
		list, err := c.Runs(t.Context(), &client.RunsParams{})
		if err != nil {
			t.Fatal(err)
		}
		m, _ := filepath.Glob(filepath.Join(tmp, "keel-demo-*"))
		return len(list), len(m)
	}
	for _, form := range []struct {
		name string
		pre  []string
		src  string
	}{{"local", nil, local}, {"server", []string{"--server", s.url}, remote.ID}} {
		t.Run(form.name, func(t *testing.T) {
			at := strings.Fields(checkpointSeqs(t, append(form.pre, form.src)...)[0])[0]
			fork := func(extra ...string) (int, string, string) {
				return keel(t, append(append(form.pre, "runs", "fork", form.src, "--at", at), extra...)...)
			}
			runs, demos := count()
			for _, bad := range [][]string{{"--max-steps", "-1"}, {"--max-cost", "-1"}, {"--max-steps", "10", "--no-start"}} {
				code, _, errOut := fork(bad...)
				if r, d := count(); code != 2 || r != runs || d != demos {
					t.Errorf("fork %v = %d, runs %d → %d, demo copies %d → %d; want 2 and nothing made\n%s", bad, code, runs, r, demos, d, errOut)
				}
			}
			code, out, errOut := fork("--max-steps", "10", "--no-wait")
			if code != 3 {
				t.Fatalf("fork --max-steps 10 = %d, want 3 at the demo's approval\n%s%s", code, out, errOut)
			}
			id := regexp.MustCompile(`as run (\S+)`).FindStringSubmatch(errOut)
			if id == nil {
				t.Fatalf("no fork named:\n%s", errOut)
			}
			st := runState(t, db, id[1])
			if st.Limits.MaxSteps != 10 {
				t.Errorf("the fork's limits: %+v, want max_steps 10", st.Limits)
			}
		})
	}
}

// runState is run id of the journal db, folded.
func runState(t *testing.T, db, id string) *agent.State {
	t.Helper()
	s, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, _, err := agent.NewRuntime(s, nil).Load(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// keel runs rewind leaves a file written by hand after the run alone and
// says so; one the run and a person both changed needs --force; the undo
// line restores exactly, without a warning (fresh-user report 12, B5 and
// N6).
func TestRewindLeavesHandEdits(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	db := setup(t)
	ws := demoProject(t)
	before := files(t, ws)
	if code, _, errOut := keel(t, "run", "--model", "scripted:demo", "--workspace", ws, "-q", "fix it"); code != 0 {
		t.Fatalf("keel run = %d: %s", code, errOut)
	}
	id, _ := lastRun(t, db)
	after := files(t, ws)
	first := strings.Fields(checkpointSeqs(t, id)[0])[0]
	notes := filepath.Join(ws, "MYNOTES.txt")
	if err := os.WriteFile(notes, []byte("my own edit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := keel(t, "runs", "rewind", id, "--to", first)
	if code != 0 || !strings.Contains(out, "left as they are: 1 file(s) changed since then only outside the run") || !strings.Contains(out, "  MYNOTES.txt") ||
		!strings.Contains(out, "M textstats.py") || strings.Contains(out, "D MYNOTES.txt") {
		t.Fatalf("runs rewind = %d: %s\n%s", code, errOut, out)
	}
	if b, err := os.ReadFile(notes); err != nil || string(b) != "my own edit\n" {
		t.Errorf("MYNOTES.txt after the rewind = %q, %v", b, err)
	}
	if got := files(t, ws)["textstats.py"]; got != before["textstats.py"] {
		t.Errorf("textstats.py not rewound:\n%s", got)
	}
	undo := regexp.MustCompile(`undo: keel runs rewind \S+ --to (\d+)`).FindStringSubmatch(out)
	if undo == nil {
		t.Fatalf("no undo line:\n%s", out)
	}
	code, out, errOut = keel(t, "runs", "rewind", id, "--to", undo[1])
	if code != 0 || strings.Contains(out, "without the effects") || strings.Contains(out, "event "+undo[1]+":") {
		t.Errorf("the undo = %d, want the checkpoint itself, no warning: %s\n%s", code, errOut, out)
	}
	want := maps.Clone(after)
	want["MYNOTES.txt"] = "my own edit\n"
	if d := cmp.Diff(want, files(t, ws)); d != "" {
		t.Errorf("undone (-want +got):\n%s", d)
	}
	// A person edits the file the run fixed: both changed it.
	if err := os.WriteFile(filepath.Join(ws, "textstats.py"), []byte(after["textstats.py"]+"# mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = keel(t, "runs", "rewind", id, "--to", first)
	if code == 0 || !strings.Contains(errOut, "textstats.py") || !strings.Contains(errOut, "--force") || !strings.Contains(errOut, "nothing rewound") {
		t.Errorf("rewind over a file changed by both = %d, want it refused naming textstats.py and --force: %s", code, errOut)
	}
	if got := files(t, ws)["textstats.py"]; got != after["textstats.py"]+"# mine\n" {
		t.Errorf("the refused rewind changed textstats.py:\n%s", got)
	}
	if code, _, errOut := keel(t, "runs", "rewind", id, "--to", first, "--force"); code != 0 {
		t.Fatalf("runs rewind --force = %d: %s", code, errOut)
	}
	if got := files(t, ws); got["textstats.py"] != before["textstats.py"] || got["MYNOTES.txt"] != "my own edit\n" {
		t.Errorf("after --force: textstats.py %q, MYNOTES.txt %q", got["textstats.py"], got["MYNOTES.txt"])
	}
}

// gitCmd runs git in dir for a test, with its own identity.
func gitCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// keel runs fork --workspace DIR of a run in a git repository makes DIR
// a working copy of it at the run's start commit: the fork's git works
// and its diff compares with that commit (fresh-user report 12, N7/B6).
func TestForkIntoNewDirectoryKeepsGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	db := setup(t)
	ws := demoProject(t)
	gitCmd(t, ws, "init", "-q")
	gitCmd(t, ws, "add", ".")
	gitCmd(t, ws, "commit", "-qm", "start")
	commit := strings.TrimSpace(gitCmd(t, ws, "rev-parse", "HEAD"))
	if code, _, errOut := keel(t, "run", "--model", "scripted:demo", "--workspace", ws, "-q", "fix it"); code != 0 {
		t.Fatalf("keel run = %d: %s", code, errOut)
	}
	id, _ := lastRun(t, db)
	rows := checkpointSeqs(t, id)
	last := strings.Fields(rows[len(rows)-1])[0]
	dir := filepath.Join(t.TempDir(), "fork")
	code, out, errOut := keel(t, "runs", "fork", id, "--at", last, "--workspace", dir, "--no-start")
	if code != 0 || strings.Contains(errOut, "not a git repository") {
		t.Fatalf("runs fork = %d: %s", code, errOut)
	}
	fork := strings.TrimSpace(out)
	// The sandbox made .keel in dir when the fork was checked, before
	// the repository was copied in beside it.
	if _, err := os.Stat(filepath.Join(dir, ".keel")); err != nil {
		t.Logf("no .keel in the fork (a sandbox that makes none): %v", err)
	}
	if got := strings.TrimSpace(gitCmd(t, dir, "rev-parse", "HEAD")); got != commit {
		t.Errorf("the fork's HEAD = %s, want the run's start commit %s", got, commit)
	}
	if got := gitCmd(t, dir, "status", "--porcelain"); got != " M textstats.py\n" {
		t.Errorf("git status in the fork:\n%s", got)
	}
	code, out, errOut = keel(t, "runs", "diff", fork, "--stat")
	if code != 0 || !strings.Contains(out, commit[:12]) || !strings.Contains(out, "M textstats.py +1 -1") || strings.Contains(out, "no git commit") {
		t.Errorf("runs diff of the fork = %d: %s\n%s", code, errOut, out)
	}
}
