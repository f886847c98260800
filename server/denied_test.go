package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/server/api"
)

// An edit waiting for approval whose file has become a link to one the
// run's policy denies ([paths] deny) is never previewed: the run page
// and the inbox show the refusal, not the file; the run's diff (API and
// files panel) lists a denied file that changed without its content.
func TestDeniedPathsAreNotShown(t *testing.T) {
	e := newEnv(t, &envOptions{checkpoints: true})
	ctx := t.Context()
	const canary = "CANARY-denied-7f3a91"
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "secrets"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "secrets", "key.txt"), []byte(canary+" old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("notes old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "open.txt"), []byte("open old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.models.set("test:peek", modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("edit", modeltest.Call("e1", "edit_file", map[string]any{"path": "notes.txt", "old_string": "old", "new_string": "new"})),
		modeltest.Text("done"),
	}, nil))
	demoPol, err := os.ReadFile("../service/demo_policy.toml")
	if err != nil {
		t.Fatal(err)
	}
	pol := string(demoPol) + "\n[paths]\ndeny = [\"secrets\"]\n"
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:peek", Workspace: ws, Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	paused := e.waitStop(run.ID, 1)
	if paused.Type != journal.ApprovalRequested {
		t.Fatalf("the run stopped with %s, want approval.requested: %s", paused.Type, paused.Payload)
	}
	// While it waits, the file becomes a link to the denied one (a
	// command of the same turn, say): the preview reads the workspace
	// as it is now.
	if err := os.Remove(filepath.Join(ws, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("secrets/key.txt", filepath.Join(ws, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/ui/runs/" + run.ID, "/ui/approvals"} {
		body := e.page(p)
		if strings.Contains(body, canary) {
			t.Errorf("%s shows the denied file's content", p)
		}
		if !strings.Contains(body, "policy forbids this path") {
			i := strings.Index(body, "class=\"proposed\"")
			t.Errorf("%s does not say the edit's file is denied:\n%s", p, body[max(i, 0):min(len(body), max(i, 0)+600)])
		}
	}

	// A denied file changed by hand beside an open one while the run
	// waits (the checkpoint after the call has both): the diff lists
	// both, the denied one without its content.
	if err := os.WriteFile(filepath.Join(ws, "secrets", "key.txt"), []byte(canary+" changed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "open.txt"), []byte("open changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Deny(ctx, run.ID, "e1", &api.Decide{Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	// Every call denied: the run fails (all_denied), after the
	// checkpoint of the batch.
	end := e.waitStop(run.ID, paused.Seq+1)
	if end.Type != journal.RunFailed && end.Type != journal.RunCompleted {
		t.Fatalf("the run ended with %s", end.Type)
	}
	d, err := e.admin.Diff(ctx, run.ID, end.Seq)
	if err != nil {
		t.Fatal(err)
	}
	var sawDenied, sawOpen bool
	for _, f := range d.Files {
		if strings.Contains(f.Patch, canary) {
			t.Errorf("GET /v1/runs/%s/diff: %s holds the denied content", run.ID, f.Path)
		}
		switch f.Path {
		case "secrets/key.txt":
			sawDenied = f.Denied && f.Patch == ""
		case "open.txt":
			sawOpen = strings.Contains(f.Patch, "+open changed")
		}
	}
	if !sawDenied || !sawOpen {
		t.Errorf("diff = %+v, want secrets/key.txt denied and open.txt's patch", d.Files)
	}
	// The run's own changes (the web UI's files) leave out what a
	// person changed while it waited, and name it.
	if body := e.page("/ui/runs/" + run.ID); strings.Contains(body, canary) || !strings.Contains(body, "changed while the run was paused or waiting") || !strings.Contains(body, "secrets/key.txt") {
		t.Errorf("the files panel shows the denied file or does not name the files changed while the run waited:\n%s", body[:min(len(body), 3000)])
	}
}
