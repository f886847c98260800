package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// askShell writes a policy that asks a person about every bash command
// and allows the rest in the workspace.
func askShell(t *testing.T) string {
	t.Helper()
	pol := filepath.Join(t.TempDir(), "ask-shell.cedar")
	if err := os.WriteFile(pol, []byte(`@id("all") permit(principal, action, resource);
@id("shell") @ask @reason("commands need a person")
forbid(principal, action == Keel::Action::"bash", resource);
@id("outside") forbid(principal, action, resource) when { context.outside };
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return pol
}

// askingTeam makes a team whose child a asks (its one bash command)
// and whose child b does not (it writes a file): a lead that starts
// both in parallel, waits for them and answers.
func askingTeam(t *testing.T) (lead, ws string) {
	t.Helper()
	lead = writeTrajectory(t, "lead a team",
		[]fcall{{agent.SpawnTool, map[string]any{"agent": "a", "task": "append a", "wait": false}}, {agent.SpawnTool, map[string]any{"agent": "b", "task": "write b", "wait": false}}},
		[]fcall{{agent.WaitTool, map[string]any{}}},
		nil,
	)
	ws = teamWorkspace(t, map[string]string{
		"a": writeTrajectory(t, "append a", []fcall{sh("echo a >> team.log")}, nil),
		"b": writeTrajectory(t, "write b", []fcall{{"write_file", map[string]any{"path": "b.txt", "content": "b\n"}}}, nil),
	})
	return lead, ws
}

// pausedTeam runs askingTeam's lead with `keel run --team` without a
// terminal, in a process of its own, and checks what it does when child
// a stops at its approval: the lead pauses and keel run exits 3, naming
// the child, its call and how to decide and go on (fresh-user report 3,
// F3: it hung). It returns the journal, the workspace, the runs (the
// lead first) and child a's id.
func pausedTeam(t *testing.T) (db, ws string, ids []string, a string) {
	t.Helper()
	db = setup(t)
	lead, ws := askingTeam(t)
	args, _ := json.Marshal([]string{"run", "--db", db, "--team", "--model", "replay:" + lead, "--workspace", ws, "--policy", askShell(t),
		"--max-steps", "12", "--max-children", "2", "lead a team"})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args))
	var errOut bytes.Buffer
	cmd.Stderr = &errOut // stdin: /dev/null
	err := cmd.Run()
	var ee *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("keel run --team with a child at an approval = %v (want exit 3)\n%s", err, errOut.String())
	}
	ids = teamRuns(t, db)
	if len(ids) != 3 {
		t.Fatalf("runs %v, want the lead and two children", ids)
	}
	leadID := ids[0]
	a = leadID + ".call_0_0"
	for _, want := range []string{
		"child agent keel-cli/a (run " + a + ") waits for a person to approve call call_0_0 (bash)",
		"echo a >> team.log",
		"approve " + a + " call_0_0",
		"deny " + a + " call_0_0",
		"runs resume " + leadID,
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("keel run's stderr lacks %q\n%s", want, errOut.String())
		}
	}
	st, _ := loadRun(t, db, leadID)
	if st.Status != journal.StatusPaused || st.Ended == nil || st.Ended.Reason != agent.ReasonChildren || !strings.Contains(st.Ended.Message, a+" waits for a person: approval of call_0_0 (bash)") {
		t.Errorf("lead %s %+v, want paused for its children naming %s's approval", st.Status, st.Ended, a)
	}
	for _, c := range st.Children {
		if want := c.ID != a; (c.Delivered != nil) != want {
			t.Errorf("before the decision, child %s delivered %+v, want %v (a waits, b is delivered)", c.ID, c.Delivered, want)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "team.log")); err == nil {
		t.Errorf("a's command ran before it was approved")
	}
	return db, ws, ids, a
}

// keel approve continues the waiting child, and keel runs resume the
// lead, which gets each child's result once and completes.
func TestTeamChildApprovalWithoutTerminal(t *testing.T) {
	db, ws, ids, a := pausedTeam(t)
	leadID := ids[0]
	code, _, out := keel(t, "approve", "--db", db, a, "call_0_0")
	if code != 0 || !strings.Contains(out, "continue the team with: keel --db "+db+" runs resume "+leadID) {
		t.Fatalf("keel approve = %d, want 0 with the lead's resume\n%s", code, out)
	}
	if code, _, out := keel(t, "runs", "resume", "--db", db, leadID, "-q"); code != 0 {
		t.Fatalf("keel runs resume LEAD = %d\n%s", code, out)
	}
	st, _ := loadRun(t, db, leadID)
	if st.Status != journal.StatusCompleted {
		t.Errorf("lead %s, want completed", st.Status)
	}
	given := map[string]int{}
	for _, c := range st.Children {
		if c.Delivered == nil || c.Delivered.Status != agent.ChildCompleted || c.Delivered.CallID != "call_1_0" {
			t.Errorf("child %s delivered %+v, want completed to wait_agents", c.ID, c.Delivered)
		}
	}
	for _, tr := range st.Turns {
		for _, c := range tr.Calls {
			for _, id := range ids[1:] {
				if c.Finished != nil && strings.Contains(c.Finished.Content, "## child "+id+": completed") {
					given[id]++
				}
			}
		}
	}
	for _, id := range ids[1:] {
		if given[id] != 1 {
			t.Errorf("child %s's result given %d times, want once", id, given[id])
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "team.log")); string(b) != "a\n" {
		t.Errorf("team.log %q, want a's one append", b)
	}
}

// keel runs cancel of the paused lead cancels its waiting child too
// (fresh-user report 3, F7: it stayed paused), and the tree then counts
// the children's real spend, not the waiting child's whole slice.
func TestTeamCancelPausedLead(t *testing.T) {
	db, _, ids, a := pausedTeam(t)
	leadID := ids[0]
	if code, _, out := keel(t, "runs", "cancel", "--db", db, leadID); code != 0 {
		t.Fatalf("keel runs cancel LEAD = %d\n%s", code, out)
	}
	st, _ := loadRun(t, db, leadID)
	cs, _ := loadRun(t, db, a)
	if st.Status != journal.StatusCanceled || cs.Status != journal.StatusCanceled {
		t.Fatalf("lead %s, child a %s; want both canceled", st.Status, cs.Status)
	}
	used, own := st.Used(), st.Own()
	for _, id := range ids[1:] {
		c, _ := loadRun(t, db, id)
		o := c.Used()
		own.Steps += o.Steps
		own.Tokens += o.Tokens
		own.ToolCalls += o.ToolCalls
	}
	if used.Steps != own.Steps || used.Tokens != own.Tokens || used.ToolCalls != own.ToolCalls {
		t.Errorf("the lead counts %s, want the tree's real spend %s", used, own)
	}
	code, out, errOut := keel(t, "runs", "show", "--db", db, leadID)
	if code != 0 || !strings.Contains(out+errOut, a) {
		t.Errorf("runs show = %d\n%s%s", code, out, errOut)
	}
	t.Logf("after the cancel: lead counts %s (reserved for a before: its slice)", used)
}

// At a terminal, a child's question is asked right there, naming the
// child, and the team goes on with the answer.
func TestTeamChildAsksAtTerminal(t *testing.T) {
	db := setup(t)
	lead, ws := askingTeam(t)
	args, _ := json.Marshal([]string{"run", "--db", db, "--team", "--model", "replay:" + lead, "--workspace", ws, "--policy", askShell(t),
		"--max-steps", "12", "--max-children", "2", "lead a team"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args), "TERM=xterm")
	term := startTerminal(t, cmd)
	ask := term.expect("always for this agent: ")
	for _, want := range []string{"child agent keel-cli/a (run ", "call call_0_0 (bash) needs your approval", "echo a >> team.log"} {
		if !strings.Contains(ask, want) {
			t.Errorf("the question lacks %q:\n%s", want, ask)
		}
	}
	term.send("y")
	term.expect("completed")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("keel run --team at a terminal: %v\n%s", err, term.text())
	}
	ids := teamRuns(t, db)
	if st, _ := loadRun(t, db, ids[0]); st.Status != journal.StatusCompleted {
		t.Errorf("lead %s, want completed", st.Status)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "team.log")); string(b) != "a\n" {
		t.Errorf("team.log %q, want a's one append", b)
	}
}
