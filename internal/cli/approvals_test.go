package cli_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/audit"
	"github.com/keel-run/keel/internal/testrun"
	"github.com/keel-run/keel/journal"
)

// approvalSetup writes the policy (outside the workspace) and a recording
// that asks once, and returns the workspace, database, trajectory and
// policy paths.
func approvalSetup(t *testing.T) (ws, db, traj, pol string) {
	setup(t)
	ws = t.TempDir()
	db = filepath.Join(t.TempDir(), "keel.db")
	pol = filepath.Join(t.TempDir(), "ask.cedar")
	if err := os.WriteFile(pol, []byte(testrun.AskRm), 0o644); err != nil {
		t.Fatal(err)
	}
	traj = writeTrajectory(t, "clean up",
		[]fcall{sh("echo data > old.log && echo kept > keep.txt")},
		[]fcall{sh("ls && rm old.log")},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && ls")},
	)
	return ws, db, traj, pol
}

func startsOf(evs []journal.Event, call string) int {
	n := 0
	for _, e := range evs {
		if e.Type == journal.ToolStarted {
			var p agent.ToolStarted
			json.Unmarshal(e.Payload, &p)
			if p.CallID == call {
				n++
			}
		}
	}
	return n
}

// The acceptance scenario: an approval is requested, the process that ran
// the run is killed, and a second process approves later (naming no
// call: the run waits for one): the run resumes in the approving process
// and completes, the approved command having run exactly once.
func TestApprovalSurvivesKill(t *testing.T) {
	ws, db, traj, pol := approvalSetup(t)
	cmd := child(t, nil, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "--wait", "-q")
	id, ev := waitForType(t, db, journal.ApprovalRequested)
	var req agent.ApprovalRequested
	json.Unmarshal(ev.Payload, &req)
	if req.Action != "ls && rm old.log" || len(req.Parts) != 1 || req.Parts[0].Text != "rm old.log" {
		t.Fatalf("approval.requested = %+v", req)
	}
	cmd.Process.Kill()
	cmd.Wait()
	code, out, errOut := keel(t, "approvals", "list", "--db", db)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, req.CallID) || !strings.Contains(out, "ls && rm old.log") {
		t.Fatalf("approvals list = %d\n%s%s", code, out, errOut)
	}
	// A call the run does not wait for is named with those it waits for,
	// in one sentence; without CALL, the one call it waits for.
	code, _, errOut = keel(t, "approve", "--db", db, id, "nosuchcall", "--by", "ops", "-q")
	if want := "does not wait for call nosuchcall (decided already, or never asked); it waits for:\n  " + req.CallID + " (bash)"; code != 2 || !strings.Contains(errOut, want) || strings.Contains(errOut, "agent:") {
		t.Errorf("approve of a call not waiting = %d\n%s\nwant %q", code, errOut, want)
	}
	code, _, errOut = keel(t, "approve", "--db", db, id, "--by", "ops", "-q")
	if code != 0 {
		t.Fatalf("approve = %d\n%s", code, errOut)
	}
	st, evs := loadRun(t, db, id)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("status %s %+v", st.Status, st.Ended)
	}
	if _, err := os.Stat(filepath.Join(ws, "old.log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old.log still exists: %v", err)
	}
	if n := startsOf(evs, req.CallID); n != 1 {
		t.Errorf("the approved call started %d times", n)
	}
	if code, out, _ := keel(t, "approvals", "list", "--db", db); code != 0 || !strings.Contains(out, "no pending approvals") {
		t.Errorf("approvals list after = %q", out)
	}
	if r, err := audit.Verify(t.Context(), openDB(t, db), id); err != nil || !r.OK {
		t.Errorf("audit: %+v %v", r, err)
	}
}

// A keel run that waits picks up a decision made by another process: an
// approval (the run completes in the waiting process), a denial (the
// model is told why), and an approval after the agent was revoked (the
// run pauses with reason revoked instead of running anything).
func TestWaitingProcessPicksUpDecision(t *testing.T) {
	for _, tt := range []struct {
		name    string
		agent   string
		decide  []string
		code    int
		removed bool
	}{
		{"approve", "", []string{"approve", "--remember", "run"}, 0, true},
		{"deny", "", []string{"deny", "--reason", "keep the logs"}, 0, false},
		{"revoked meanwhile", "bot", []string{"approve"}, 3, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ws, db, traj, pol := approvalSetup(t)
			args := []string{"run", "--db", db, "--model", "replay:" + traj, "--workspace", ws, "--policy", pol, "--wait", "-q"}
			if tt.agent != "" {
				if code, _, errOut := keel(t, "agents", "create", "--db", db, "--create-db", tt.agent); code != 0 {
					t.Fatal(errOut)
				}
				args = append(args, "--agent", tt.agent)
			}
			cmd := child(t, nil, args...)
			id, ev := waitForType(t, db, journal.ApprovalRequested)
			var req agent.ApprovalRequested
			json.Unmarshal(ev.Payload, &req)
			if tt.agent != "" {
				if code, _, errOut := keel(t, "agents", "revoke", "--db", db, tt.agent, "--reason", "test"); code != 0 {
					t.Fatal(errOut)
				}
			}
			decide := append([]string{tt.decide[0], "--db", db, id, req.CallID, "--no-resume"}, tt.decide[1:]...)
			if code, _, errOut := keel(t, decide...); code != 0 {
				t.Fatalf("%v = %d\n%s", decide, code, errOut)
			}
			err := cmd.Wait()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			if code != tt.code {
				t.Fatalf("the waiting keel run exited %d (%v), want %d", code, err, tt.code)
			}
			st, _ := loadRun(t, db, id)
			_, statErr := os.Stat(filepath.Join(ws, "old.log"))
			if removed := errors.Is(statErr, os.ErrNotExist); removed != tt.removed {
				t.Errorf("old.log removed = %v, want %v", removed, tt.removed)
			}
			switch tt.name {
			case "deny":
				c := st.Turns[1].Calls[0]
				if !c.Finished.IsError || !strings.Contains(c.Finished.Content, "keep the logs") {
					t.Errorf("the model saw %q", c.Finished.Content)
				}
			case "revoked meanwhile":
				if st.Status != journal.StatusPaused || st.Ended.Reason != "revoked" {
					t.Errorf("status %s %+v", st.Status, st.Ended)
				}
			}
		})
	}
}

// Remembered approvals through the command line: --prefix must fit the
// command that asked; --remember agent stores a standing approval the
// agent's next run uses without asking.
func TestRememberAgentAcrossRuns(t *testing.T) {
	ws, db, traj, pol := approvalSetup(t)
	run := func() (int, string) {
		code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "--no-wait", "-q")
		return code, errOut
	}
	if code, errOut := run(); code != 3 {
		t.Fatalf("first run = %d, want 3 (paused)\n%s", code, errOut)
	}
	list, err := agent.NewRuntime(openDB(t, db), nil).Approvals(t.Context(), nil)
	if err != nil || len(list) != 1 {
		t.Fatalf("approvals %+v %v", list, err)
	}
	p := list[0]
	code, _, errOut := keel(t, "approve", "--db", db, p.RunID, p.CallID, "--remember", "agent", "--prefix", "git push")
	if code != 2 || !strings.Contains(errOut, "prefix does not match") {
		t.Fatalf("approve with a prefix that does not fit = %d %q", code, errOut)
	}
	code, _, errOut = keel(t, "approve", "--db", db, p.RunID, p.CallID, "--remember", "agent", "--prefix", "rm", "-q")
	if code != 0 {
		t.Fatalf("approve = %d\n%s", code, errOut)
	}
	code, out, _ := keel(t, "agents", "show", "--db", db, "keel-cli")
	if code != 0 || !strings.Contains(out, "commands starting rm") {
		t.Errorf("agents show = %d\n%s", code, out)
	}
	// The next run of the same agent: rm no longer asks.
	os.WriteFile(filepath.Join(ws, "old.log"), []byte("x"), 0o644)
	if code, errOut := run(); code != 0 {
		t.Fatalf("second run = %d\n%s", code, errOut)
	}
}
