package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/audit"
	"github.com/keel-run/keel/journal"
)

// teamWorkspace makes a workspace with three trusted agent definitions
// (a, b, c), each replaying its own recording: one shell command that
// appends the child's name to team.log (not idempotent: a second run of
// it shows), then an answer.
func teamWorkspace(t *testing.T, children map[string]string) string {
	t.Helper()
	ws := t.TempDir()
	dir := filepath.Join(ws, ".keel", "agents")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, traj := range children {
		def := fmt.Sprintf("---\ndescription: appends %s to team.log\nmodel: replay:%s\nmax_steps: 4\nmax_tool_calls: 3\n---\nYou append your name.\n", name, traj)
		if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(def), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errOut := keel(t, "config", "trust", "--workspace", ws); code != 0 {
		t.Fatalf("config trust = %d\n%s", code, errOut)
	}
	return ws
}

// TestTeamKilledAtEveryAppend: a keel run --team process (a lead that
// starts two children in parallel, waits for them, then starts a third
// and waits for it; the children run in the same process) is killed with
// SIGKILL right after each of its appends to any run of the tree
// (KEEL_DEBUG=crash_after_append=N), then `keel runs resume` finishes
// the lead. Each time: the lead completes; each child was created once,
// completed, and was delivered exactly once into exactly one call's
// result; each child's non-idempotent command ran at most once (exactly
// once unless the kill left its outcome unknown, which the child is
// told); the tree's spend is within the root's limits; every journal
// verifies.
func TestTeamKilledAtEveryAppend(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and resumes a keel process at every append of a team run")
	}
	setup(t)
	lead := writeTrajectory(t, "lead a team",
		[]fcall{{agent.SpawnTool, map[string]any{"agent": "a", "task": "append a", "wait": false}}, {agent.SpawnTool, map[string]any{"agent": "b", "task": "append b", "wait": false}}},
		[]fcall{{agent.WaitTool, map[string]any{}}},
		[]fcall{{agent.SpawnTool, map[string]any{"agent": "c", "task": "append c"}}},
		nil,
	)
	children := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		children[name] = writeTrajectory(t, "append "+name, []fcall{sh("echo " + name + " >> team.log")}, nil)
	}
	limits := agent.Limits{MaxSteps: 16, MaxToolCalls: 12, MaxChildren: 3}
	args := func(db, ws string) []string {
		return []string{"run", "--db", db, "--model", "replay:" + lead, "--workspace", ws, "-q", "--no-wait", "--team",
			"--max-steps", fmt.Sprint(limits.MaxSteps), "--max-tool-calls", fmt.Sprint(limits.MaxToolCalls),
			"--max-children", fmt.Sprint(limits.MaxChildren), "--max-depth", "1", "lead a team"}
	}
	// A clean run: how many appends to kill after.
	ws, db := teamWorkspace(t, children), filepath.Join(t.TempDir(), "clean.db")
	if code, _, errOut := keel(t, args(db, ws)...); code != 0 {
		t.Fatalf("clean run = %d\n%s", code, errOut)
	}
	n := 0
	for _, id := range teamRuns(t, db) {
		_, evs := loadRun(t, db, id)
		n += len(evs) // at most: an append may hold several events
	}
	checkTeam(t, db, ws, limits)
	// Each kill point has its own journal and workspace: they run a few
	// at a time (runEach), the summary once all have ended.
	var mu sync.Mutex
	outcomes := map[string]int{}
	boundaries := map[string]bool{}
	kills := 0
	outcome := func(o string) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[o]++
	}
	t.Cleanup(func() {
		var keys []string
		for k, v := range outcomes {
			keys = append(keys, fmt.Sprintf("%3d × %s", v, k))
		}
		sort.Strings(keys)
		t.Logf("clean team run: at most %d appends; %d processes killed, at %d distinct states of the tree; outcomes:\n%s", n, kills, len(boundaries), strings.Join(keys, "\n"))
	})
	runEach(t, n, func(i int) string { return fmt.Sprint("after_append_", i+1) }, func(t *testing.T, i int) {
		k := i + 1
		ws, db := teamWorkspace(t, children), filepath.Join(t.TempDir(), "crash.db")
		cmd := child(t, []string{fmt.Sprintf("KEEL_DEBUG=crash_after_append=%d", k)}, args(db, ws)...)
		err := cmd.Wait()
		if err == nil {
			// Fewer appends than events: the run ended first.
			outcome("ended before the kill")
			checkTeam(t, db, ws, limits)
			return
		}
		if !killedBySignal(err) {
			t.Fatalf("the keel process was not killed after append %d: %v", k, err)
		}
		var at []string
		for _, id := range teamRuns(t, db) {
			st, _ := loadRun(t, db, id)
			at = append(at, fmt.Sprintf("%s@%d", strings.TrimPrefix(id, teamRuns(t, db)[0]), st.LastSeq))
		}
		mu.Lock()
		kills++
		boundaries[strings.Join(at, " ")] = true
		mu.Unlock()
		root := teamRuns(t, db)[0]
		if st, _ := loadRun(t, db, root); st.Status == journal.StatusCompleted {
			outcome("killed after the lead's end; " + checkTeam(t, db, ws, limits))
			return
		}
		if code, _, errOut := keel(t, "runs", "resume", "--db", db, root, "-q", "--no-wait"); code != 0 {
			t.Fatalf("resume after append %d = %d\n%s", k, code, errOut)
		}
		outcome(checkTeam(t, db, ws, limits))
	})
}

// teamRuns returns the runs of db, the root first.
func teamRuns(t *testing.T, db string) []string {
	t.Helper()
	runs, err := openDB(t, db).Runs(t.Context(), &journal.ListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range runs {
		if r.RunID[0] != '_' {
			ids = append(ids, r.RunID)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return len(ids[i]) < len(ids[j]) || len(ids[i]) == len(ids[j]) && ids[i] < ids[j] })
	return ids
}

// checkTeam checks a finished team run and says how its children's
// commands were repaired.
func checkTeam(t *testing.T, db, ws string, l agent.Limits) string {
	t.Helper()
	ids := teamRuns(t, db)
	if len(ids) != 4 {
		t.Fatalf("runs %v, want the lead and 3 children", ids)
	}
	lead, _ := loadRun(t, db, ids[0])
	if lead.Status != journal.StatusCompleted {
		t.Fatalf("lead %s %+v", lead.Status, lead.Ended)
	}
	results := 0
	for _, tr := range lead.Turns {
		for _, c := range tr.Calls {
			if c.Finished != nil {
				results += strings.Count(c.Finished.Content, ": completed\n")
			}
		}
	}
	if results != 3 || len(lead.Children) != 3 {
		t.Errorf("%d children, their results in the lead's call results %d times, want 3 and 3", len(lead.Children), results)
	}
	log, err := os.ReadFile(filepath.Join(ws, "team.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var unknown []string
	sum := lead.Own()
	for _, ch := range lead.Children {
		st, evs := loadRun(t, db, ch.ID)
		if ch.Delivered == nil || ch.Delivered.Status != agent.ChildCompleted || ch.Delivered.Unwaited {
			t.Errorf("child %s delivered %+v", ch.ID, ch.Delivered)
		}
		if st.Status != journal.StatusCompleted {
			t.Errorf("child %s %s %+v", ch.ID, st.Status, st.Ended)
		}
		started := 0
		for _, e := range evs {
			if e.Type == journal.ToolStarted {
				started++
			}
		}
		name := ch.Spawned.Agent
		ran := strings.Count(string(log), name+"\n")
		synthetic := len(st.Turns) > 0 && len(st.Turns[0].Calls) == 1 && st.Turns[0].Calls[0].Finished != nil && st.Turns[0].Calls[0].Finished.Synthetic
		switch {
		case started != 1 || ran > 1:
			t.Errorf("child %s: its command started %d times, ran %d times", ch.ID, started, ran)
		case ran == 0 && !synthetic:
			t.Errorf("child %s: its command did not run, and its result does not say so", ch.ID)
		case synthetic:
			unknown = append(unknown, name)
		}
		o := st.Own()
		sum.Steps += o.Steps
		sum.ToolCalls += o.ToolCalls
		for _, axis := range []struct {
			name        string
			used, slice int
		}{{"model calls", o.Steps, ch.Spawned.Slice.MaxSteps}, {"tool calls", o.ToolCalls, ch.Spawned.Slice.MaxToolCalls}} {
			if axis.used > axis.slice {
				t.Errorf("child %s used %d %s, past its slice of %d", ch.ID, axis.used, axis.name, axis.slice)
			}
		}
	}
	if sum.Steps > l.MaxSteps || sum.ToolCalls > l.MaxToolCalls || sum.Children > l.MaxChildren {
		t.Errorf("the tree spent %+v, past the root's limits %+v", sum, l)
	}
	s := openDB(t, db)
	for _, id := range ids {
		if r, err := audit.Verify(t.Context(), s, id); err != nil || !r.OK {
			t.Fatalf("audit %s: %+v %v", id, r, err)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return "completed; outcome unknown of the command of " + strings.Join(unknown, ", ")
	}
	return "completed"
}
