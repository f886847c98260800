package cli_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
)

// An agent definition a run cannot use (not trusted, unparsable) is a
// configuration error: exit 2, nothing ran.
func TestTeamDefinitionErrorsExit2(t *testing.T) {
	db := setup(t)
	traj := writeTrajectory(t, "say hi", nil)
	for _, tt := range []struct{ name, def, want string }{
		{"untrusted", "---\ndescription: helps\n---\nYou help.\n", "is not trusted"},
		{"unparsable", "no front matter\n", "agent definition"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ws := t.TempDir()
			dir := filepath.Join(ws, ".keel", "agents")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "helper.md"), []byte(tt.def), 0o644); err != nil {
				t.Fatal(err)
			}
			if tt.name == "unparsable" {
				if code, _, errOut := keel(t, "config", "trust", "--workspace", ws); code != 0 {
					t.Fatalf("config trust = %d\n%s", code, errOut)
				}
			}
			code, _, errOut := keel(t, "run", "--db", db, "--team", "--model", "replay:"+traj, "--workspace", ws, "-q")
			if code != 2 || !strings.Contains(errOut, tt.want) {
				t.Errorf("keel run --team = %d, want 2 with %q\n%s", code, tt.want, errOut)
			}
		})
	}
}

// A child agent's run is its lead's part: "last" names the lead, not the
// child that started after it, and a child that ended (delivered to its
// lead, its spend counted there) is not resumed on its own.
func TestTeamChildrenBelongToTheirLead(t *testing.T) {
	db := setup(t)
	lead := writeTrajectory(t, "lead a team",
		[]fcall{{agent.SpawnTool, map[string]any{"agent": "a", "task": "append a"}}},
		nil,
	)
	ws := teamWorkspace(t, map[string]string{"a": writeTrajectory(t, "append a", []fcall{sh("echo a >> team.log")}, nil)})
	if code, _, errOut := keel(t, "run", "--model", "replay:"+lead, "--workspace", ws, "-q", "--no-wait", "--team", "--max-steps", "8", "lead a team"); code != 0 {
		t.Fatalf("team run = %d\n%s", code, errOut)
	}
	ids := teamRuns(t, db)
	if len(ids) != 2 {
		t.Fatalf("runs %v, want the lead and its child", ids)
	}
	t.Chdir(ws)
	if code, out, errOut := keel(t, "runs", "show", "--json", "last"); code != 0 || !strings.Contains(out, ids[0]) || strings.Contains(out, `"run_id":"`+ids[1]+`"`) {
		t.Errorf("runs show last = %d, want the lead %s\n%.600s%s", code, ids[0], out, errOut)
	}
	_, before := loadRun(t, db, ids[1])
	for _, args := range [][]string{
		{"runs", "resume", ids[1], "--message", "go on", "-q", "--no-wait"},
		{"runs", "resume", ids[1], "-q", "--no-wait"},
	} {
		code, _, errOut := keel(t, args...)
		if code == 0 || !strings.Contains(errOut, "is a child agent of run "+ids[0]) || !strings.Contains(errOut, "resume or follow up "+ids[0]) {
			t.Errorf("keel %s = %d, want refused\n%s", strings.Join(args, " "), code, errOut)
		}
	}
	if _, after := loadRun(t, db, ids[1]); len(after) != len(before) {
		t.Errorf("the child's journal grew from %d to %d events", len(before), len(after))
	}
	// A fork of the child would be a run of no team (its parent link
	// names a lead it is not part of): refused, naming the lead to fork.
	code, _, errOut := keel(t, "runs", "fork", ids[1], "--at", "1")
	if code == 0 || !strings.Contains(errOut, "is a child agent of run "+ids[0]) || !strings.Contains(errOut, "fork the team's lead, run "+ids[0]) {
		t.Errorf("runs fork of a child = %d, want refused naming the lead\n%s", code, errOut)
	}
	if n := len(teamRuns(t, db)); n != 2 {
		t.Errorf("a refused fork left %d runs, want 2", n)
	}
}

// A child agent is offered no memory (its run.created has no recall), so
// it is offered none of the tools that exist only with memory: its lead
// keeps them, and the child never meets "unknown tool" for a tool it was
// offered.
func TestTeamChildOfferedOnlyToolsItCanCall(t *testing.T) {
	db := setup(t)
	lead := writeTrajectory(t, "lead a team",
		[]fcall{{agent.SpawnTool, map[string]any{"agent": "a", "task": "keep a note"}}},
		nil,
	)
	child := writeTrajectory(t, "keep a note", []fcall{{"memory_write", map[string]any{"text": "the tests run with go test"}}}, nil)
	ws := teamWorkspace(t, map[string]string{"a": child})
	if code, _, errOut := keel(t, "run", "--model", "replay:"+lead, "--workspace", ws, "-q", "--team", "--propose-skills", "--max-steps", "8", "lead a team"); code != 0 {
		t.Fatalf("team run = %d\n%s", code, errOut)
	}
	ids := teamRuns(t, db)
	if len(ids) != 2 {
		t.Fatalf("runs %v, want the lead and its child", ids)
	}
	offered := func(id string) []string {
		st, _ := loadRun(t, db, id)
		var names []string
		for _, tl := range st.Created.Tools {
			names = append(names, tl.Name)
		}
		return names
	}
	memoryTools := []string{"memory_write", "propose_skill", "promote_skill"}
	for _, n := range memoryTools {
		if l := offered(ids[0]); !slices.Contains(l, n) {
			t.Errorf("the lead is not offered %s: %v", n, l)
		}
		if c := offered(ids[1]); slices.Contains(c, n) {
			t.Errorf("the child is offered %s, which it cannot call: %v", n, c)
		}
	}
}

// A team's runs are not frozen into an evaluation case: a case replays
// one run's recording without a team, so the lead's spawn_agent would
// not be offered and the children's work not done; a child's run is
// its lead's part (Q23). Both are refused, saying why, and nothing is
// written.
func TestTeamRunsAreNotFrozen(t *testing.T) {
	db := setup(t)
	lead := writeTrajectory(t, "lead a team",
		[]fcall{{agent.SpawnTool, map[string]any{"agent": "a", "task": "append a"}}},
		nil,
	)
	ws := teamWorkspace(t, map[string]string{"a": writeTrajectory(t, "append a", []fcall{sh("echo a >> team.log")}, nil)})
	if code, _, errOut := keel(t, "run", "--model", "replay:"+lead, "--workspace", ws, "-q", "--team", "--max-steps", "8", "lead a team"); code != 0 {
		t.Fatalf("team run = %d\n%s", code, errOut)
	}
	ids := teamRuns(t, db)
	if len(ids) != 2 {
		t.Fatalf("runs %v, want the lead and its child", ids)
	}
	for i, want := range []string{
		"run " + ids[0] + " led a team of child agents (1 child)",
		"run " + ids[1] + " is a child agent of run " + ids[0],
	} {
		out := filepath.Join(t.TempDir(), "case")
		code, stdout, errOut := keel(t, "eval", "freeze", ids[i], "-o", out, "--check", "grep -q a team.log", "--sandbox", "none")
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("eval freeze %s = %d, want 2 with %q\n%s%s", ids[i], code, want, stdout, errOut)
		}
		if _, err := os.Stat(filepath.Join(out, "case.toml")); err == nil {
			t.Errorf("a refused freeze of %s wrote a case", ids[i])
		}
	}
}
