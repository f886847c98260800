package cli_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/server/api"
)

// A team run started through the server, from keel --server run --team
// and from POST /v1/runs with "team": the server offers it the team
// tools and the workspace's trusted definitions, and its pool runs the
// child (newuser report 14, Q1). Without team, a run gets no team tools.
// A prefix of the lead names it though its child's id starts with it
// too (Q2).
func TestTeamThroughTheServer(t *testing.T) {
	db := setup(t)
	lead := writeTrajectory(t, "lead a team",
		[]fcall{{agent.SpawnTool, map[string]any{"agent": "a", "task": "append a"}}},
		nil,
	)
	child := writeTrajectory(t, "append a", []fcall{sh("echo a >> team.log")}, nil)
	ws := teamWorkspace(t, map[string]string{"a": child})
	s := startServe(t, "--replay-dir", filepath.Dir(lead), "--replay-dir", filepath.Dir(child))
	if code, _, errOut := keel(t, "--server", s.url, "run", "--team", "--model", "replay:"+lead, "--workspace", ws, "-q", "--max-steps", "8", "--max-children", "2"); code != 0 {
		t.Fatalf("keel --server run --team = %d\n%s\n%s", code, errOut, s.stderr)
	}
	ids := teamRuns(t, db)
	if len(ids) != 2 || !strings.HasPrefix(ids[1], ids[0]+".") {
		t.Fatalf("runs %v, want the lead and its child", ids)
	}
	for _, id := range ids {
		if st, _ := loadRun(t, db, id); st.Status != "completed" {
			t.Errorf("run %s is %s", id, st.Status)
		}
	}
	cl := s.apiClient(t)
	ctx := t.Context()
	// A prefix of the lead's id, which its child's id (LEAD.CALL) also
	// starts with, names the lead on every front end (Q2).
	prefix := ids[0][:len(ids[0])-1]
	for _, args := range [][]string{{"runs", "show", "--json", prefix}, {"--server", s.url, "runs", "show", "--json", prefix}} {
		if code, out, errOut := keel(t, args...); code != 0 || !strings.Contains(out, ids[0]) {
			t.Errorf("keel %s = %d, want the lead %s\n%.300s%s", strings.Join(args, " "), code, ids[0], out, errOut)
		}
	}
	// A child is forked through its lead, on every front end (Q9).
	refusal := "is a child agent of run " + ids[0] + ": a fork of it would belong to no team and deliver to no lead; fork the team's lead, run " + ids[0] + ", instead"
	if code, _, errOut := keel(t, "--server", s.url, "runs", "fork", ids[1], "--at", "1"); code == 0 || !strings.Contains(errOut, refusal) {
		t.Errorf("keel --server runs fork CHILD = %d, want refused naming the lead\n%s", code, errOut)
	}
	if _, err := cl.Fork(ctx, ids[1], &api.ForkRun{Seq: 1}); err == nil || !strings.Contains(err.Error(), refusal) {
		t.Errorf("POST /v1/runs/CHILD/fork: %v, want refused naming the lead", err)
	}
	if n := len(teamRuns(t, db)); n != 2 {
		t.Errorf("refused forks left %d runs, want 2", n)
	}
	if tree, err := cl.RunTree(ctx, prefix); err != nil || tree.ID != ids[0] {
		t.Errorf("GET /v1/runs/PREFIX/tree: %+v %v, want the lead %s", tree, err, ids[0])
	}
	for _, team := range []bool{true, false} {
		steps := 8
		run, err := cl.CreateRun(ctx, &api.CreateRun{Task: "lead a team", Model: "replay:" + lead, Workspace: ws, Agent: "keel-cli", Team: team, Limits: api.Limits{MaxSteps: &steps}})
		if err != nil {
			t.Fatal(err)
		}
		untilStopped(t, cl, run.ID, 1)
		st, evs := loadRun(t, db, run.ID)
		created, err := agent.Created(evs)
		if err != nil {
			t.Fatal(err)
		}
		offered := slices.ContainsFunc(created.Tools, func(ti agent.ToolInfo) bool { return ti.Name == agent.SpawnTool })
		if offered != team || team && (len(created.Agents) != 1 || st.Status != "completed") {
			t.Errorf("POST /v1/runs team=%v: spawn_agent offered %v, definitions %d, status %s", team, offered, len(created.Agents), st.Status)
		}
	}
	// The demo takes no team, as it takes no other field.
	if _, err := cl.CreateRun(ctx, &api.CreateRun{Demo: true, Team: true}); err == nil || !strings.Contains(err.Error(), "team") {
		t.Errorf("demo with team: %v, want refused naming team", err)
	}
}

// keel --server URL run --team (stdin not a terminal) of a team whose
// child stops at an approval exits 3 as the local form does (pausedTeam),
// naming the child, its call and how to decide, every command with
// --server URL; the lead waits on the server, which goes on once the
// child is decided (report 15, item 6: the server form waited without
// a word, forever).
func TestTeamChildApprovalThroughTheServer(t *testing.T) {
	db := setup(t)
	lead := writeTrajectory(t, "lead a team",
		[]fcall{{agent.SpawnTool, map[string]any{"agent": "a", "task": "append a", "wait": false}}, {agent.SpawnTool, map[string]any{"agent": "b", "task": "write b", "wait": false}}},
		[]fcall{{agent.WaitTool, map[string]any{}}},
		nil,
	)
	a := writeTrajectory(t, "append a", []fcall{sh("echo a >> team.log")}, nil)
	b := writeTrajectory(t, "write b", []fcall{{"write_file", map[string]any{"path": "b.txt", "content": "b\n"}}}, nil)
	ws := teamWorkspace(t, map[string]string{"a": a, "b": b})
	s := startServe(t, "--replay-dir", filepath.Dir(lead), "--replay-dir", filepath.Dir(a), "--replay-dir", filepath.Dir(b))
	code, _, errOut := keel(t, "--server", s.url, "run", "--team", "--model", "replay:"+lead, "--workspace", ws, "--policy", askShell(t),
		"--max-steps", "12", "--max-children", "2", "lead a team")
	ids := teamRuns(t, db)
	if code != 3 || len(ids) != 3 {
		t.Fatalf("keel --server run --team with a child at an approval = %d, runs %v (want 3, the lead and two children)\n%s", code, ids, errOut)
	}
	leadID, child := ids[0], ids[0]+".call_0_0"
	k := "keel --server " + s.url
	for _, want := range []string{
		"child agent keel-cli/a (run " + child + ") waits for a person to approve call call_0_0 (bash)",
		"echo a >> team.log",
		k + " approve " + child + " call_0_0",
		k + " deny " + child + " call_0_0",
		"the team waits for that on the server, which goes on with it once decided; follow it with: " + k + " runs show " + leadID + " --follow",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q\n%s", want, errOut)
		}
	}
}
