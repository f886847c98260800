package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// afterResult reports whether the conversation of st holds a user
// message msg right after the result of call id.
func afterResult(st *agent.State, id, msg string) bool {
	conv := st.Conversation()
	for i, m := range conv {
		if m.Role == model.RoleTool && m.ToolCallID == id {
			for j := i + 1; j < len(conv); j++ {
				if conv[j].Role != model.RoleTool {
					return conv[j].Role == model.RoleUser && conv[j].Content == msg
				}
			}
		}
	}
	return false
}

// messageEvents returns the person's user.message contents of evs.
func messageEvents(t *testing.T, evs []journal.Event) []string {
	var out []string
	for i := range evs {
		if evs[i].Type == journal.UserMessage {
			v, err := agent.Decode(&evs[i])
			if err != nil {
				t.Fatal(err)
			}
			if u := v.(*agent.UserMessage); u.Source == "" {
				out = append(out, u.Content)
			}
		}
	}
	return out
}

func allowAllPolicy(t *testing.T) string {
	pol := filepath.Join(t.TempDir(), "all.cedar")
	if err := os.WriteFile(pol, []byte(`@id("all") permit(principal, action, resource);`), 0o644); err != nil {
		t.Fatal(err)
	}
	return pol
}

// keel runs resume --message on a run killed (kill -9) while a command
// ran: the message is journaled with the resume and the model reads it
// right after the interrupted call's (repaired) result.
func TestMessageAfterKill(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	traj := writeTrajectory(t, "slow",
		[]fcall{sh("echo start")},
		[]fcall{sh("sleep 60")},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")},
	)
	cmd := child(t, nil, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", allowAllPolicy(t), "-q")
	// Kill once the sleep's tool.started is journaled: nothing follows it
	// until the sleep ends, so the kill lands while the sleep runs however
	// slowly the child gets there (a count of events to wait for went
	// stale when workspace.checkpoint joined the first events, and then
	// raced the kill against the append of tool.started).
	id := waitFor(t, db, func(e *journal.Event) bool {
		if e.Type != journal.ToolStarted {
			return false
		}
		v, err := agent.Decode(e)
		return err == nil && v.(*agent.ToolStarted).CallID == "call_1_0"
	})
	cmd.Process.Kill()
	cmd.Wait()
	if st, evs := loadRun(t, db, id); startsOf(evs, "call_1_0") != 1 || st.LastType != journal.ToolStarted {
		t.Fatalf("killed at %s, not while the sleep ran", st.LastType)
	}
	const msg = "the sleep was a mistake; finish now"
	if code, _, errOut := keel(t, "runs", "resume", "--db", db, id, "--message", msg, "-q"); code != 0 {
		t.Fatalf("resume = %d\n%s", code, errOut)
	}
	st, evs := loadRun(t, db, id)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("status %s %+v", st.Status, st.Ended)
	}
	if got := messageEvents(t, evs); len(got) != 1 || got[0] != msg {
		t.Errorf("person's messages = %q", got)
	}
	if !afterResult(st, "call_1_0", msg) {
		t.Errorf("the message does not follow the interrupted call's result: %+v", st.Conversation())
	}
}

// keel runs resume --message on a run paused for an approval journals the
// message, says when the model reads it, and the model reads it after the
// approved call's result.
func TestMessageWhilePausedForApproval(t *testing.T) {
	ws, db, traj, pol := approvalSetup(t)
	if code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "-q"); code != 3 {
		t.Fatalf("run = %d, want 3\n%s", code, errOut)
	}
	id, _ := lastRun(t, db)
	const msg = "keep keep.txt whatever happens"
	code, _, errOut := keel(t, "runs", "resume", "--db", db, id, "--message", msg)
	if code != 3 || !strings.Contains(errOut, "your message is journaled; the model reads it once call_1_0 is decided") {
		t.Fatalf("resume --message = %d, want 3 and a note\n%s", code, errOut)
	}
	if code, _, errOut := keel(t, "approve", "--db", db, id, "call_1_0", "-q"); code != 0 {
		t.Fatalf("approve = %d\n%s", code, errOut)
	}
	st, evs := loadRun(t, db, id)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("status %s %+v", st.Status, st.Ended)
	}
	if got := messageEvents(t, evs); len(got) != 1 || got[0] != msg {
		t.Errorf("person's messages = %q", got)
	}
	if !afterResult(st, "call_1_0", msg) {
		t.Errorf("the message does not follow the approved call's result: %+v", st.Conversation())
	}
}

// keel runs resume on a completed run refuses without --message and
// continues it as a follow-up with one.
func TestFollowUpMessage(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	traj := writeTrajectory(t, "answer, then more", nil, []fcall{sh("echo more > more.txt")}, nil)
	if code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", allowAllPolicy(t), "--completion-marker", "NONE", "-q"); code != 0 {
		t.Fatalf("run = %d\n%s", code, errOut)
	}
	id, st := lastRun(t, db)
	if st.Status != journal.StatusCompleted || st.Ended.Reason != "answer" {
		t.Fatalf("first run: %s %+v", st.Status, st.Ended)
	}
	code, _, errOut := keel(t, "runs", "resume", "--db", db, id)
	if code != 1 || !strings.Contains(errOut, "runs resume "+id+" --message TEXT") {
		t.Errorf("resume of a completed run without a message = %d\n%s", code, errOut)
	}
	const msg = "also write more.txt"
	code, out, errOut := keel(t, "runs", "resume", "--db", db, id, "--message", msg, "-q")
	if code != 0 || !strings.Contains(errOut, "continues with your message as a follow-up") {
		t.Fatalf("follow-up = %d\n%s%s", code, out, errOut)
	}
	st, evs := loadRun(t, db, id)
	if st.Status != journal.StatusCompleted || st.FollowUps != 1 || st.Steps != 3 {
		t.Fatalf("after the follow-up: %s, %d follow-ups, %d steps", st.Status, st.FollowUps, st.Steps)
	}
	if got := messageEvents(t, evs); len(got) != 1 || got[0] != msg {
		t.Errorf("person's messages = %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "more.txt")); err != nil || string(b) != "more\n" {
		t.Errorf("more.txt = %q, %v", b, err)
	}
}

// A message for a run that another process executes is refused loudly,
// and nothing is journaled; the refusal comes alone, without a warning
// that "another run" executes in the workspace: it is this run (fresh-user
// report 13, P17).
func TestMessageToBusyRunRefused(t *testing.T) {
	ws, db, traj, pol := approvalSetup(t)
	child(t, nil, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "--wait", "-q")
	id, _ := waitForType(t, db, journal.ApprovalRequested)
	code, _, errOut := keel(t, "runs", "resume", "--db", db, id, "--message", "hello")
	if code != 1 || !strings.Contains(errOut, "your message was NOT delivered") || strings.Contains(errOut, "WARNING") ||
		!strings.Contains(errOut, "Ctrl-C or SIGTERM there cancels the run") {
		t.Errorf("resume --message of a busy run = %d\n%s", code, errOut)
	}
	if code, _, errOut := keel(t, "runs", "resume", "--db", db, id); code != 1 || strings.Contains(errOut, "WARNING") || strings.Contains(errOut, "NOT delivered") {
		t.Errorf("resume of a busy run = %d\n%s", code, errOut)
	}
	_, evs := loadRun(t, db, id)
	if got := messageEvents(t, evs); len(got) != 0 {
		t.Errorf("a refused message was journaled: %q", got)
	}
}
