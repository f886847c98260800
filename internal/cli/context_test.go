package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
)

// The recorded trajectory replayed with a tiny context window compacts
// several times (mechanical summaries: a replay cannot summarise) and
// still completes on the recorded turn sequence; runs tokens and runs
// show report it.
func TestReplayCompacts(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	code, _, errOut := keel(t, "run", "--model", "replay:"+trajectory, "--workspace", ws, "--mount-path", "/testbed", "--context-window", "12000", "-q")
	if code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	id, st := lastRun(t, db)
	if st.Steps != 74 || st.Ended.Reason != "marker" {
		t.Fatalf("steps %d, end %+v", st.Steps, st.Ended)
	}
	cs := st.Compactions()
	if len(cs) < 2 {
		t.Fatalf("%d compactions, want at least 2", len(cs))
	}
	for _, c := range cs {
		if !c.Mechanical || !strings.HasPrefix(c.Summary, "Mechanical summary") || len(c.Attempts) != 1 || c.Attempts[0].Kind != "invalid_request" {
			t.Errorf("compaction %d–%d: mechanical %v, attempts %+v", c.FirstStep, c.LastStep, c.Mechanical, c.Attempts)
		}
	}
	checkOneResultPerCall(t, st)
	code, out, _ := keel(t, "runs", "tokens", id)
	if code != 0 || !strings.Contains(out, "fixed prefix:") || strings.Count(out, "compacted steps") != len(cs) {
		t.Errorf("runs tokens = %d:\n%s", code, out)
	}
	code, out, _ = keel(t, "runs", "tokens", "--json", id)
	var rep struct {
		Prefix         int     `json:"prefix_tokens"`
		Window         int     `json:"window"`
		GrowthKeel     float64 `json:"growth_per_step_keel"`
		GrowthRecorded float64 `json:"growth_per_step_recorded"`
		Rows           []struct {
			Step     int   `json:"step"`
			Estimate int   `json:"estimate"`
			Recorded int64 `json:"recorded"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("runs tokens --json = %d, %v", code, err)
	}
	if rep.Window != 12000 || rep.Prefix < 1000 || len(rep.Rows) != 74+len(cs) {
		t.Errorf("report: window %d, prefix %d, %d rows", rep.Window, rep.Prefix, len(rep.Rows))
	}
	// The prompts differ (Keel's tools against mini-swe-agent's one), but
	// each step adds the same turns: Keel's growth per step may not pass
	// the recorded one by much (a tight window trims older results, so it
	// may be smaller; on the full window it is +342 against +327).
	if rep.GrowthRecorded <= 0 || rep.GrowthKeel <= 0 || rep.GrowthKeel > 1.3*rep.GrowthRecorded {
		t.Errorf("growth per step: Keel %.0f, recorded %.0f", rep.GrowthKeel, rep.GrowthRecorded)
	}
	for _, r := range rep.Rows {
		if r.Step > 0 && r.Estimate > rep.Window {
			t.Errorf("step %d sent an estimated %d tokens, window %d", r.Step, r.Estimate, rep.Window)
		}
	}
	code, out, _ = keel(t, "runs", "show", id)
	if code != 0 || !strings.Contains(out, "context.compacted") || !strings.Contains(out, "compactions (window 12,000 tokens)") {
		t.Errorf("runs show = %d:\n%s", code, out)
	}
}

// Memory files from the user's Keel directory and the workspace go into
// the system prompt, capped.
func TestMemoryFiles(t *testing.T) {
	db := setup(t)
	home := os.Getenv("KEEL_HOME")
	ws := t.TempDir()
	os.WriteFile(filepath.Join(home, "KEEL.md"), []byte("Always answer in English.\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "AGENTS.md"), []byte("Run the tests with `make check`.\n"), 0o644)
	code, _, errOut := keel(t, "run", "--model", "replay:"+trajectory, "--workspace", ws, "--max-steps", "1", "-q")
	if code != 1 {
		t.Fatalf("keel run = %d, want 1 (step limit)\n%s", code, errOut)
	}
	_, st := lastRun(t, db)
	m := st.Created.Memory
	if !strings.Contains(m, "## ~/.keel/KEEL.md\n\nAlways answer in English.") || !strings.Contains(m, "## AGENTS.md\n\nRun the tests with `make check`.") ||
		strings.Index(m, "KEEL.md") > strings.Index(m, "AGENTS.md") {
		t.Errorf("memory:\n%s", m)
	}
	if req := agent.BuildRequest(st, 0); !strings.HasSuffix(req.System, m) {
		t.Errorf("the system prompt does not end with the memory files")
	}

	// A cap cuts them with a note; --no-memory leaves them out.
	os.WriteFile(filepath.Join(home, "config.toml"), []byte("memory_max_bytes = 120\n"), 0o644)
	if code, _, errOut := keel(t, "run", "--model", "replay:"+trajectory, "--workspace", ws, "--max-steps", "1", "-q"); code != 1 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	_, st = lastRun(t, db)
	if !strings.Contains(st.Created.Memory, "memory files cut at 120 bytes") || len(st.Created.Memory) > 220 {
		t.Errorf("capped memory (%d bytes):\n%s", len(st.Created.Memory), st.Created.Memory)
	}
	if code, _, errOut := keel(t, "run", "--model", "replay:"+trajectory, "--workspace", ws, "--max-steps", "1", "--no-memory", "-q"); code != 1 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	if _, st = lastRun(t, db); st.Created.Memory != "" {
		t.Errorf("--no-memory kept %q", st.Created.Memory)
	}
}

// keel runs handoff continues a failed run in a fresh context, and a
// resume can shrink the window of a run whose view is already larger.
func TestHandoffAndWindowOnResume(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	// A copy of the recording cut after 40 turns fails the run there.
	data, err := os.ReadFile(trajectory)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		Format     string            `json:"trajectory_format"`
		InstanceID string            `json:"instance_id"`
		Info       json.RawMessage   `json:"info"`
		Messages   []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(data, &tr); err != nil {
		t.Fatal(err)
	}
	full := tr.Messages
	n := 0
	for i, m := range full {
		var role struct{ Role string }
		json.Unmarshal(m, &role)
		if role.Role == "assistant" {
			if n++; n > 40 {
				tr.Messages = full[:i]
				break
			}
		}
	}
	cut := filepath.Join(t.TempDir(), "traj.json")
	b, _ := json.Marshal(tr)
	os.WriteFile(cut, b, 0o644)
	if code, _, _ := keel(t, "run", "--model", "replay:"+cut, "--workspace", ws, "--mount-path", "/testbed", "-q"); code != 1 {
		t.Fatalf("cut replay exit %d, want 1", code)
	}
	id, st := lastRun(t, db)
	if st.Steps != 40 || st.Ended.Reason != "model_error" {
		t.Fatalf("steps %d, end %+v", st.Steps, st.Ended)
	}
	// The whole recording under the same path, a handoff and a window
	// smaller than the view already is.
	os.WriteFile(cut, data, 0o644)
	code, _, errOut := keel(t, "runs", "handoff", id, "--context-window", "8000", "-q")
	if code != 0 {
		t.Fatalf("runs handoff = %d\n%s", code, errOut)
	}
	_, st = lastRun(t, db)
	cs := st.Compactions()
	if st.Steps != 74 || len(cs) < 2 || !cs[0].Handoff || cs[0].Reason != "requested" || cs[0].LastStep != 40 {
		t.Fatalf("steps %d, compactions %d, first %+v", st.Steps, len(cs), cs[0])
	}
	t.Logf("handoff at %d tokens (view %d), %d compactions", cs[0].TokensBefore, cs[0].ViewTokensBefore, len(cs))
	if cs[0].ViewTokensBefore <= 8000 {
		t.Errorf("the handoff started at a view of %d tokens: the view should already exceed the 8,000-token window", cs[0].ViewTokensBefore)
	}
	if st.ContextWindow() != 8000 {
		t.Errorf("window %d, want 8000", st.ContextWindow())
	}
	checkOneResultPerCall(t, st)
}

// Bad context flags are usage errors (exit 2) that name the flag.
func TestContextFlagErrors(t *testing.T) {
	setup(t)
	ws := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--action-mode", "json"}, "--action-mode"},
		{[]string{"--compact-threshold", "1.5"}, "--compact-threshold"},
		{[]string{"--context-window", "100"}, "--context-window"},
		{[]string{"--handoff-after", "-1"}, "--handoff-after"},
	} {
		args := append([]string{"run", "--model", "replay:" + trajectory, "--workspace", ws}, tt.args...)
		code, _, errOut := keel(t, args...)
		if code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("keel %v = %d, %q; want 2 naming %s", tt.args, code, errOut, tt.want)
		}
	}
	if code, _, errOut := keel(t, "runs", "resume", "nosuchrun", "--context-window", "10"); code != 2 || !strings.Contains(errOut, "--context-window 10") {
		t.Errorf("resume with a bad window = %d, %q", code, errOut)
	}
}
