package cli_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// files reads every file under dir as path → content (links as their
// target).
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
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
func checkpointSeqs(t *testing.T, id string) []string {
	t.Helper()
	code, out, errOut := keel(t, "runs", "checkpoints", id)
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
	if len(rows) < 3 {
		t.Fatalf("checkpoints: %q, want the start, the edit and more", rows)
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
	if code, out, _ := keel(t, "runs", "list"); code != 0 || !strings.Contains(out, id+"  completed") {
		t.Errorf("a rewound run is no longer completed:\n%s", out)
	}
	if code, _, errOut := keel(t, "runs", "rewind", id, "--to", "1"); code == 0 || !strings.Contains(errOut, "no workspace checkpoint at or before event 1") {
		t.Errorf("rewind before the first checkpoint = %d: %s", code, errOut)
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
	// Without --workspace the run's own workspace is restored in place.
	if code, _, errOut := keel(t, "runs", "fork", id, "--at", first, "--no-start"); code != 0 {
		t.Fatalf("runs fork in place = %d: %s", code, errOut)
	}
	if d := cmp.Diff(before, files(t, ws)); d != "" {
		t.Errorf("fork in place (-before +now):\n%s", d)
	}
	_ = st
}
