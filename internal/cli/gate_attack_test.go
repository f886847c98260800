package cli_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/testrun"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
)

// Arguments that could be read two ways never run: the approval, the
// progress line and runs show would have shown "touch notes.txt" while
// Go's case-insensitive decoding ran "rm -rf src".
func TestAmbiguousArgumentsNeverRun(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "src"), 0o755)
	os.WriteFile(filepath.Join(ws, "src", "a.py"), []byte("x"), 0o644)
	traj := writeTrajectory(t, "tidy",
		[]fcall{{"bash", map[string]any{"command": "touch notes.txt", "COMMAND": "rm -rf src"}}},
		[]fcall{{"python", map[string]any{"code": "print(1)", "Code": "import shutil; shutil.rmtree('src')"}}},
		nil)
	code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", ws, "--no-wait", "-q")
	if code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(ws, "src", "a.py")); err != nil {
		t.Errorf("src was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "notes.txt")); err == nil {
		t.Error("notes.txt was created: an ambiguous call ran")
	}
	_, st := lastRun(t, db)
	for _, turn := range st.Turns {
		for _, c := range turn.Calls {
			if c.Finished == nil || !c.Finished.IsError || !strings.Contains(c.Finished.Content, "only in case") {
				t.Errorf("call %s: %+v", c.ID, c.Finished)
			}
		}
	}
}

// Text from the model reaches people escaped: approvals list, agents
// list and show, the waiting prompt, audit verify.
func TestListsEscapeModelText(t *testing.T) {
	ws, db, _, pol := approvalSetup(t)
	payload := "rm -rf src #" + strings.Repeat("\b", 12) + "ls -la \x1b[2K\x1b[1A\r\u202e"
	traj := writeTrajectory(t, "x", []fcall{sh(payload)}, nil)
	if code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "--no-wait", "-q"); code != 3 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	if code, _, errOut := keel(t, "agents", "create", "--db", db, "bot", "--description", "evil \x1b]0;owned\x07 \r"); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := keel(t, "agents", "revoke", "--db", db, "bot", "--reason", "bye\x1b[2J"); code != 0 {
		t.Fatal(errOut)
	}
	for _, args := range [][]string{{"approvals", "list"}, {"agents", "list"}, {"agents", "show", "bot"}, {"policy", "check", "--command", payload}} {
		code, out, errOut := keel(t, append(args, "--db", db)...)
		if code != 0 && args[0] != "policy" {
			t.Fatalf("keel %v = %d\n%s", args, code, errOut)
		}
		if strings.ContainsAny(out+errOut, "\x1b\b\r\a\u202e") {
			t.Errorf("keel %v printed raw control characters:\n%q", args, out)
		}
		if args[0] != "policy" && !strings.Contains(out, `\x1b`) && !strings.Contains(out, `\x08`) {
			t.Errorf("keel %v does not show the escapes visibly:\n%s", args, out)
		}
	}
}

// Standing approvals can be listed and removed; the removal takes effect
// at the agent's next run. A revoked built-in agent can be restored.
func TestGrantsUngrantRestore(t *testing.T) {
	ws, db, traj, pol := approvalSetup(t)
	run := func() int {
		code, _, _ := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "--no-wait", "-q")
		return code
	}
	if code := run(); code != 3 {
		t.Fatalf("first run = %d", code)
	}
	list, err := agent.NewRuntime(openDB(t, db), nil).Approvals(t.Context(), nil)
	if err != nil || len(list) != 1 {
		t.Fatalf("approvals %+v %v", list, err)
	}
	if code, _, errOut := keel(t, "approve", "--db", db, list[0].RunID, list[0].CallID, "--remember", "agent", "-q"); code != 0 {
		t.Fatalf("approve: %s", errOut)
	}
	code, out, _ := keel(t, "agents", "grants", "--db", db, identity.LocalAgent)
	grant := list[0].RunID + "/" + list[0].CallID + "#0"
	if code != 0 || !strings.Contains(out, grant) || !strings.Contains(out, "exactly: rm old.log") {
		t.Fatalf("agents grants = %d\n%s", code, out)
	}
	os.WriteFile(filepath.Join(ws, "old.log"), []byte("x"), 0o644)
	if code := run(); code != 0 {
		t.Fatalf("with the grant: %d", code)
	}
	if code, out, errOut := keel(t, "agents", "ungrant", "--db", db, identity.LocalAgent, grant, "--reason", "too broad"); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("ungrant = %d %s %s", code, out, errOut)
	}
	// A second ungrant is a change made already: a conflict saying when
	// (report 15, R9).
	if code, _, errOut := keel(t, "agents", "ungrant", "--db", db, identity.LocalAgent, grant); code != 1 || !strings.Contains(errOut, "was revoked already") {
		t.Errorf("second ungrant = %d %s", code, errOut)
	}
	os.WriteFile(filepath.Join(ws, "old.log"), []byte("x"), 0o644)
	if code := run(); code != 3 {
		t.Fatalf("after ungrant: %d, want 3 (asks again)", code)
	}
	// Revoke the built-in agent: no default run can start; restore it.
	if code, _, _ := keel(t, "agents", "revoke", "--db", db, identity.LocalAgent); code != 0 {
		t.Fatal("revoke")
	}
	if code := run(); code != 2 {
		t.Fatalf("run as revoked keel-cli = %d, want 2", code)
	}
	if code, _, errOut := keel(t, "agents", "create", "--db", db, identity.LocalAgent); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Errorf("create keel-cli = %d %s", code, errOut)
	}
	if code, out, errOut := keel(t, "agents", "restore", "--db", db, identity.LocalAgent, "--by", "ann"); code != 0 || !strings.Contains(out, "restored agent keel-cli") {
		t.Fatalf("restore = %d %s %s", code, out, errOut)
	}
	if code, out, _ := keel(t, "agents", "show", "--db", db, identity.LocalAgent); code != 0 || !strings.Contains(out, "restored") || !strings.Contains(out, "by ann") {
		t.Errorf("agents show after restore:\n%s", out)
	}
	if code := run(); code != 3 {
		t.Errorf("run after restore = %d, want 3", code)
	}
	if code, _, _ := keel(t, "agents", "create", "--db", db, "bot"); code != 0 {
		t.Fatal("create bot")
	}
	keel(t, "agents", "revoke", "--db", db, "bot")
	if code, _, errOut := keel(t, "agents", "restore", "--db", db, "bot"); code != 2 || !strings.Contains(errOut, "create a new agent") {
		t.Errorf("restore of a created agent = %d %s", code, errOut)
	}
}

// A decision after the deadline is refused and the default applies; the
// listing says the approval expired.
func TestLateApprovalRefused(t *testing.T) {
	db := setup(t)
	past := time.Now().Add(-time.Hour)
	id := testrun.Paused(t, openDB(t, db), func() time.Time { return past }, "rm x", 2*time.Second)
	code, list, _ := keel(t, "approvals", "list", "--db", db)
	if code != 0 || !strings.Contains(list, "EXPIRED") {
		t.Errorf("approvals list:\n%s", list)
	}
	code, _, errOut := keel(t, "approve", "--db", db, id, "c1", "--no-resume")
	if code != 1 || !strings.Contains(errOut, "too late") || !strings.Contains(errOut, "deny") ||
		strings.Count(errOut, "agent:") > 1 || !strings.Contains(errOut, "continue the run with keel runs resume "+id) {
		t.Fatalf("late approve = %d %q, want the default named once, no doubled prefix, and how to go on", code, errOut)
	}
	st, _ := loadRun(t, db, id)
	if r := st.Turns[0].Calls[0].Resolved; r == nil || r.By != agent.ByTimeout || r.Decision != policy.Deny {
		t.Errorf("resolution %+v", r)
	}
}

// keel runs cancel closes a paused run: every open call gets a result.
func TestRunsCancel(t *testing.T) {
	ws, db, traj, pol := approvalSetup(t)
	if code, _, _ := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "--no-wait", "-q"); code != 3 {
		t.Fatal("run did not pause")
	}
	id := onlyRun(t, db)
	code, _, errOut := keel(t, "runs", "cancel", "--db", db, id, "--by", "ann")
	if code != 0 || !strings.Contains(errOut, "canceled run") || !strings.Contains(errOut, "1 waiting approval") {
		t.Fatalf("runs cancel = %d %q", code, errOut)
	}
	st, _ := loadRun(t, db, id)
	if st.Status != journal.StatusCanceled || !strings.Contains(st.Ended.Message, "ann") {
		t.Errorf("status %s %+v", st.Status, st.Ended)
	}
	checkOneResultPerCall(t, st)
	if code, _, errOut := keel(t, "runs", "cancel", "--db", db, id); code != 0 || !strings.Contains(errOut, "already canceled") {
		t.Errorf("second cancel = %d %q", code, errOut)
	}
	if code, out, _ := keel(t, "approvals", "list", "--db", db); code != 0 || !strings.Contains(out, "no pending approvals") {
		t.Errorf("approvals after cancel:\n%s", out)
	}
}

// A run that another process executes is refused with exit status 1 and
// one sentence naming the holder (3 means "waiting for approval"); an
// approval of it lets the waiting process continue.
func TestBusyRunIsNotPaused(t *testing.T) {
	ws, db, traj, pol := approvalSetup(t)
	cmd := child(t, nil, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "--wait", "-q")
	id, ev := waitForType(t, db, journal.ApprovalRequested)
	var req agent.ApprovalRequested
	json.Unmarshal(ev.Payload, &req)
	for _, args := range [][]string{{"runs", "resume", id}, {"runs", "cancel", id}} {
		code, _, errOut := keel(t, append(args, "--db", db)...)
		if code != 1 || !strings.Contains(errOut, "is being executed by another process (pid") || strings.Count(errOut, "agent:") > 0 ||
			strings.Contains(errOut, "· model ") { // no run header before the refusal
			t.Errorf("keel %v = %d %q", args, code, errOut)
		}
	}
	code, _, errOut := keel(t, "approve", "--db", db, id, req.CallID, "-q")
	if code != 0 || !strings.Contains(errOut, "continues in another process") {
		t.Errorf("approve = %d %q", code, errOut)
	}
	if err := waitExit(t, cmd); err != nil {
		t.Errorf("the waiting keel run: %v", err)
	}
}

// waitExit waits for a child keel, failing the test instead of hanging if
// it never exits.
func waitExit(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatal("the child keel did not exit within two minutes")
		return nil
	}
}

// With stdin at /dev/null (cron, systemd, nohup) a run does not wait for
// an approval nobody sees: /dev/null is a character device, not a
// terminal.
func TestNoWaitWithoutTerminal(t *testing.T) {
	ws, db, traj, pol := approvalSetup(t)
	cmd := child(t, nil, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "-q")
	err := waitExit(t, cmd)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("keel run with stdin /dev/null: %v, want exit status 3", err)
	}
}

// NaN and infinite values of floating-point flags and prices are usage
// errors, not panics.
func TestFloatFlagsFinite(t *testing.T) {
	setup(t)
	ws := t.TempDir()
	for _, args := range [][]string{
		{"--max-cost", "NaN"}, {"--max-cost", "Inf"}, {"--max-cost", "-Inf"}, {"--cpus", "NaN"}, {"--compact-threshold", "NaN"},
	} {
		code, _, errOut := keel(t, append([]string{"run", "--model", "replay:" + trajectory, "--workspace", ws, "-q"}, args...)...)
		if code != 2 || !strings.Contains(errOut, "want a finite number") || strings.Contains(errOut, "panic") {
			t.Errorf("keel run %v = %d %q", args, code, errOut)
		}
	}
	if code, _, errOut := keel(t, "runs", "resume", "x", "--max-cost", "NaN"); code != 2 || !strings.Contains(errOut, "finite") {
		t.Errorf("runs resume --max-cost NaN = %d %q", code, errOut)
	}
	home := t.TempDir()
	t.Setenv("KEEL_HOME", home)
	os.WriteFile(filepath.Join(home, "config.toml"), []byte("[prices.m]\ninput = nan\noutput = 1.0\n"), 0o600)
	if code, _, errOut := keel(t, "runs", "list"); code != 2 || !strings.Contains(errOut, "finite") {
		t.Errorf("a NaN price = %d %q", code, errOut)
	}
}

// Small things the user saw: backquoted commands in flag help, the reason
// of a pause for approval, far deadlines and their year, an export of a
// corrupt run leaving an empty file.
func TestMinorGateFindings(t *testing.T) {
	ws, db, traj, pol := approvalSetup(t)
	_, out, _ := keel(t, "run", "--help")
	for _, want := range []string{"see 'keel agents'", "see 'keel policy default'", "'keel approve' or 'keel deny'"} {
		if !strings.Contains(out, want) {
			t.Errorf("keel run --help lacks %q", want)
		}
	}
	if code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "--approval-timeout", "99999999d", "--no-wait"); code != 2 || !strings.Contains(errOut, "at most 36500d") {
		t.Errorf("--approval-timeout 99999999d = %d %q", code, errOut)
	}
	code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "--approval-timeout", "36500d", "--no-wait")
	if code != 3 || !strings.Contains(errOut, "paused (approval: waiting for approval of call_1_0)") {
		t.Errorf("paused run = %d\n%s", code, errOut)
	}
	_, list, _ := keel(t, "approvals", "list", "--db", db)
	if year := time.Now().AddDate(100, 0, 0).Format("2006"); !strings.Contains(list, year+"-") {
		t.Errorf("a deadline 100 years away does not show its year %s:\n%s", year, list)
	}
	id := onlyRun(t, db)
	raw, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`UPDATE events SET hash = ? WHERE run_id = ? AND seq = 2`, strings.Repeat("0", 64), id); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	outFile := filepath.Join(t.TempDir(), "run.jsonl")
	if code, _, _ := keel(t, "audit", "export", "--db", db, id, "-o", outFile); code != 1 {
		t.Errorf("export of a corrupt run = %d", code)
	}
	if _, err := os.Stat(outFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed export left %s: %v", outFile, err)
	}
}

// An anchor kept elsewhere shows a rewrite that recomputed the hashes,
// which the chain alone does not.
func TestAuditAnchor(t *testing.T) {
	db := setup(t)
	if code, _, errOut := keel(t, "agents", "create", "bot"); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := keel(t, "agents", "revoke", "bot", "--by", "root"); code != 0 {
		t.Fatal(errOut)
	}
	anchor := filepath.Join(t.TempDir(), "anchor.jsonl")
	code, _, errOut := keel(t, "audit", "anchor", "-o", anchor)
	if code != 0 || !strings.Contains(errOut, "anchored 1 streams · digest sha256:") {
		t.Fatalf("audit anchor = %d %q", code, errOut)
	}
	if code, out, _ := keel(t, "audit", "verify", "--all", "--anchor", anchor); code != 0 || !strings.Contains(out, "1 of 1 anchors hold") {
		t.Fatalf("verify --anchor before = %d\n%s", code, out)
	}
	// Un-revoke: delete the revocation and point the index at the event
	// before it, as someone with write access to the file can.
	s := openDB(t, db)
	evs, err := s.Read(t.Context(), identity.StreamID, 1)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	raw, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`DELETE FROM events WHERE run_id = ? AND seq = 2`, identity.StreamID); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`UPDATE runs SET last_seq = 1, last_type = ?, last_hash = ? WHERE run_id = ?`, string(evs[0].Type), evs[0].Hash, identity.StreamID); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if code, out, _ := keel(t, "audit", "verify", "--all"); code != 0 {
		t.Fatalf("the chain alone should still verify (that is the point of anchors): %d\n%s", code, out)
	}
	code, out, _ := keel(t, "audit", "verify", "--all", "--anchor", anchor)
	if code != 1 || !strings.Contains(out, "ANCHOR _keel.identity event 2") || !strings.Contains(out, "0 of 1 anchors hold") {
		t.Errorf("verify --anchor after the rewrite = %d\n%s", code, out)
	}
}

// With --sandbox none nothing is mounted: the run's mount path is the
// workspace itself, and a path under /workspace is the host's, outside.
func TestUnsandboxedMountIsTheWorkspace(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	traj := writeTrajectory(t, "x", []fcall{sh("mkdir -p /workspace/kb-gate-test")}, nil)
	code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", ws, "--sandbox", "none", "--no-wait", "-q")
	if code != 1 { // the only call is denied: no completion
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	_, st := lastRun(t, db)
	if st.Created.MountPath != ws {
		t.Errorf("mount path %q, want the workspace %q", st.Created.MountPath, ws)
	}
	c := st.Turns[0].Calls[0]
	if c.Decision.Effect != policy.Deny {
		t.Errorf("mkdir -p /workspace/...: %s (%s)", c.Decision.Effect, c.Decision.Reason)
	}
	if _, err := os.Stat("/workspace/kb-gate-test"); err == nil {
		os.Remove("/workspace/kb-gate-test")
		t.Error("the command created /workspace/kb-gate-test on the host")
	}
}
