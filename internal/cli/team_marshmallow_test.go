package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/replay"
)

// splitTrajectory writes a trajectory made of the recorded one's system
// prompt, a task, the recorded turns [from, to) (each assistant message
// with its tool results, exactly as recorded, provider responses
// included), and, when final is not empty, a last answer without calls.
func splitTrajectory(t *testing.T, recorded, task string, from, to int, final string) string {
	t.Helper()
	b, err := os.ReadFile(recorded)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Format   string            `json:"trajectory_format"`
		Instance string            `json:"instance_id"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var msgs []json.RawMessage
	k := -1
	for _, m := range f.Messages {
		var r struct {
			Role string `json:"role"`
		}
		json.Unmarshal(m, &r)
		switch r.Role {
		case "system":
			msgs = append(msgs, m)
			q, _ := json.Marshal(map[string]any{"role": "user", "content": task})
			msgs = append(msgs, q)
		case "assistant":
			k++
			fallthrough
		case "tool":
			if k >= from && k < to {
				msgs = append(msgs, m)
			}
		}
	}
	if final != "" {
		a, _ := json.Marshal(map[string]any{"role": "assistant", "content": final})
		msgs = append(msgs, a)
	}
	out, err := json.Marshal(map[string]any{"trajectory_format": f.Format, "instance_id": f.Instance, "messages": msgs, "info": map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), fmt.Sprintf("turns_%d_%d.traj.json", from, to))
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTeamMarshmallowSplit: the recorded SWE-bench task solved by a team.
// A lead delegates the investigation to one child (an "investigator"
// definition replaying the recording's first 36 turns: listing, a
// reproduction, reading the code, then its report) and the fix to another
// (an "editor" replaying the remaining 38: the fix, the tests, the
// submission), each from .keel/agents, in the Linux sandbox on a clone at
// the task's base commit. The workspace ends with the recorded patch,
// the editor's delivered result is that patch, and the tree stays within
// its budget. The lead's two spawns, its final answer and the
// investigator's report are scripted; the 74 turns between are the
// recording's. Skipped unless KEEL_MARSHMALLOW_GIT names a clone or
// mirror of marshmallow-code/marshmallow.
func TestTeamMarshmallowSplit(t *testing.T) {
	ws := marshmallowAtBase(t)
	db := setup(t)
	recorded, err := filepath.Abs(trajectory)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := replay.Load(recorded)
	if err != nil {
		t.Fatal(err)
	}
	const split = 36
	investigate := "Investigate this issue in the repository at /testbed and report where the bug is and why; do not fix it.\n\n" + rec.Task()
	report := "The bug is in DateTime._bind_to_schema (src/marshmallow/fields.py): it reads getattr(schema.opts, SCHEMA_OPTS_VAR_NAME), but inside a container field (List, Tuple) `schema` is the container field, which has no opts. The root schema (self.root) holds the opts."
	edit := "Fix this issue in the repository at /testbed, test the fix, and submit the patch. An investigation found: " + report + "\n\n" + rec.Task()
	defs := map[string]string{
		"investigator": fmt.Sprintf("---\ndescription: investigates a bug and reports where it is\nmodel: replay:%s\ntools: [bash]\nmax_steps: 40\n---\nYou investigate; you do not change the code.\n", splitTrajectory(t, recorded, investigate, 0, split, report)),
		"editor":       fmt.Sprintf("---\ndescription: fixes a bug that was located, tests the fix and submits the patch\nmodel: replay:%s\ntools: [bash]\nmax_steps: 40\n---\nYou fix the bug and submit the patch.\n", splitTrajectory(t, recorded, edit, split, 1000, "")),
	}
	dir := filepath.Join(ws, ".keel", "agents")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, def := range defs {
		if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(def), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errOut := keel(t, "config", "trust", "--workspace", ws); code != 0 {
		t.Fatalf("config trust = %d\n%s", code, errOut)
	}
	lead := writeTrajectory(t, rec.Task(),
		[]fcall{{agent.SpawnTool, map[string]any{"agent": "investigator", "task": investigate}}},
		[]fcall{{agent.SpawnTool, map[string]any{"agent": "editor", "task": edit}}},
		nil,
	)
	code, out, errOut := keel(t, "run", "--db", db, "--model", "replay:"+lead, "--workspace", ws, "--mount-path", "/testbed",
		"--env", "PYTHONPATH=/testbed/src", "--team", "--max-steps", "90", "--max-children", "2", "--max-depth", "1", "-q", "--no-wait")
	if code != 0 {
		t.Fatalf("keel run --team = %d\n%s%s", code, out, errOut)
	}
	root := teamRuns(t, db)[0]
	st, _ := loadRun(t, db, root)
	if st.Status != journal.StatusCompleted || len(st.Children) != 2 {
		t.Fatalf("lead %s with %d children", st.Status, len(st.Children))
	}
	steps := st.Own().Steps
	for i, ch := range st.Children {
		d := ch.Delivered
		if d == nil || d.Status != agent.ChildCompleted {
			t.Fatalf("child %s delivered %+v", ch.ID, d)
		}
		cst, _ := loadRun(t, db, ch.ID)
		steps += cst.Steps
		want := []int{split + 1, 74 - split}[i]
		if cst.Steps != want {
			t.Errorf("child %s (%s) made %d model calls, want %d", ch.ID, ch.Spawned.Agent, cst.Steps, want)
		}
		t.Logf("child %s (%s): %s, %d model calls, spent %s of its slice %s", ch.ID, ch.Spawned.Agent, d.Status, cst.Steps, d.Spend, ch.Spawned.Slice)
	}
	if got, want := stripIndex(st.Children[1].Delivered.Output), stripIndex(rec.Submission()); strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("the editor delivered:\n%s\nwant the recorded patch:\n%s", got, want)
	}
	diff, err := exec.Command("git", "-C", ws, "diff").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := stripIndex(string(diff)), stripIndex(rec.Submission()); got != want {
		t.Errorf("the workspace's diff is not the recorded patch:\n%s\nwant:\n%s", got, want)
	}
	if steps > 90 {
		t.Errorf("the tree made %d model calls, past the root's 90", steps)
	}
	t.Logf("lead %s: completed, %d model calls in the tree (limit 90), the recorded patch in the workspace", root, steps)
}
