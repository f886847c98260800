package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// settingsTrajectory asks for approval (rm) at step 2, then prints 8,000
// characters in 800 lines (step 3: cut or not by --max-result-chars) and sleeps 3 s
// (step 4: timed out or not by --command-timeout).
func settingsTrajectory(t *testing.T) string {
	return writeTrajectory(t, "settings",
		[]fcall{sh("echo data > old.log")},
		[]fcall{sh("rm old.log")},
		[]fcall{sh("yes xxxxxxxxx | head -n 800")},
		[]fcall{sh("sleep 3; echo slept")},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")},
	)
}

// nonDefault are run flags that differ from every default setting.
var nonDefault = []string{"--command-timeout", "1s", "--command-idle-timeout", "50s", "--concurrency", "2", "--max-result-chars", "5000",
	"--max-output-tokens", "900", "--model-idle-timeout", "45s", "--model-stall-retries", "1", "--model-retries", "1",
	"--env", "KEEL_T=1", "--allow-host", "example.com", "--memory", "1GiB", "--max-steps", "50"}

var nonDefaultSettings = agent.Settings{CommandTimeout: agent.Duration(time.Second), CommandIdleTimeout: agent.Duration(50 * time.Second), Concurrency: 2,
	MaxResultChars: 5000, MaxOutputTokens: 900, ModelIdleTimeout: agent.Duration(45 * time.Second), ModelStallRetries: 1, ModelRetries: 1}

// resultOf returns the content of call id's result.
func resultOf(t *testing.T, st *agent.State, id string) string {
	t.Helper()
	for _, turn := range st.Turns {
		for _, c := range turn.Calls {
			if c.ID == id && c.Finished != nil {
				return c.Finished.Content
			}
		}
	}
	t.Fatalf("call %s has no result", id)
	return ""
}

func resumedSettings(t *testing.T, evs []journal.Event) []*agent.Settings {
	var out []*agent.Settings
	for i := range evs {
		if evs[i].Type == journal.RunResumed {
			v, err := agent.Decode(&evs[i])
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, v.(*agent.RunResumed).Settings)
		}
	}
	return out
}

// A run created with non-default settings, paused on an approval, and
// continued by keel approve (no flags) executes with its own settings:
// its results are cut at 5,000 characters and its commands time out
// after 1 s, and nothing about settings is journaled again.
func TestApproveKeepsRunSettings(t *testing.T) {
	_, db, _, pol := approvalSetup(t)
	ws := t.TempDir()
	traj := settingsTrajectory(t)
	args := append([]string{"run", "--db", db, "--model", "replay:" + traj, "--workspace", ws, "--policy", pol, "-q"}, nonDefault...)
	if code, _, errOut := keel(t, args...); code != 3 {
		t.Fatalf("run = %d, want 3 (paused)\n%s", code, errOut)
	}
	id, st := lastRun(t, db)
	if st.Settings != nonDefaultSettings || *st.Created.Settings != nonDefaultSettings {
		t.Fatalf("settings of the created run = %+v", st.Settings)
	}
	if code, _, errOut := keel(t, "approve", "--db", db, id, "call_1_0", "-q"); code != 0 {
		t.Fatalf("approve = %d\n%s", code, errOut)
	}
	st, evs := loadRun(t, db, id)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("status %s %+v", st.Status, st.Ended)
	}
	if st.Settings != nonDefaultSettings {
		t.Errorf("settings after approve = %+v", st.Settings)
	}
	for _, s := range resumedSettings(t, evs) {
		if s != nil {
			t.Errorf("run.resumed journaled settings %+v with no flag given", s)
		}
	}
	if out := resultOf(t, st, "call_2_0"); len(out) > 6000 || strings.Count(out, "xxxxxxxxx\n") > 500 {
		t.Errorf("the 8,000-character result was not cut at --max-result-chars 5000: %d characters", len(out))
	}
	if out := resultOf(t, st, "call_3_0"); strings.Contains(out, "slept") || !strings.Contains(strings.ToLower(out), "timed out") {
		t.Errorf("sleep 3 under --command-timeout 1s: %q", out)
	}
	// The run kept its environment, allowlist, sandbox limits and limits.
	c := st.Created
	if len(c.Env) != 1 || c.Env[0] != "KEEL_T=1" || len(c.Network) != 1 || c.Network[0] != "example.com" || c.SandboxLimits.Memory != 1<<30 || st.Limits.MaxSteps != 50 {
		t.Errorf("created: env %v network %v memory %d steps %d", c.Env, c.Network, c.SandboxLimits.Memory, st.Limits.MaxSteps)
	}
}

// keel runs resume without flags keeps the run's settings; a flag
// changes that one setting from then on, journaled in run.resumed, and
// the others stay.
func TestResumeChangesOnlyGivenSettings(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	pol := filepath.Join(t.TempDir(), "all.cedar")
	if err := os.WriteFile(pol, []byte(`@id("all") permit(principal, action, resource);`), 0o644); err != nil {
		t.Fatal(err)
	}
	traj := settingsTrajectory(t)
	args := append([]string{"run", "--db", db, "--model", "replay:" + traj, "--workspace", ws, "--policy", pol, "-q"}, nonDefault...)
	args = append(args, "--max-steps", "1")
	if code, _, errOut := keel(t, args...); code != 1 {
		t.Fatalf("run = %d, want 1 (step limit)\n%s", code, errOut)
	}
	id, _ := lastRun(t, db)
	// No settings flag: the step limit alone is raised, to stop again
	// after step 2.
	if code, _, errOut := keel(t, "runs", "resume", "--db", db, id, "--max-steps", "2", "-q"); code != 1 {
		t.Fatalf("resume = %d, want 1\n%s", code, errOut)
	}
	st, _ := loadRun(t, db, id)
	if st.Settings != nonDefaultSettings || st.Steps != 2 {
		t.Fatalf("after a resume without settings flags: %+v, %d steps", st.Settings, st.Steps)
	}
	code, _, errOut := keel(t, "runs", "resume", "--db", db, id, "--max-steps", "10", "--max-result-chars", "20000", "-q")
	if code != 0 {
		t.Fatalf("resume = %d\n%s", code, errOut)
	}
	if !strings.Contains(errOut, "max_result_chars 5000 → 20000") {
		t.Errorf("the change was not reported:\n%s", errOut)
	}
	st, evs := loadRun(t, db, id)
	want := nonDefaultSettings
	want.MaxResultChars = 20000
	if st.Status != journal.StatusCompleted || st.Settings != want {
		t.Fatalf("after resume --max-result-chars: %s, %+v", st.Status, st.Settings)
	}
	rs := resumedSettings(t, evs)
	if len(rs) != 2 || rs[0] != nil || rs[1] == nil || *rs[1] != want {
		t.Errorf("run.resumed settings = %v", rs)
	}
	if out := resultOf(t, st, "call_2_0"); strings.Count(out, "xxxxxxxxx\n") != 800 {
		t.Errorf("with --max-result-chars 20000 the result has %d lines of 800: %.300q", strings.Count(out, "xxxxxxxxx\n"), out)
	}
	if out := resultOf(t, st, "call_3_0"); strings.Contains(out, "slept") {
		t.Errorf("the command timeout (1s, not given again) was not kept: %q", out)
	}
	if code, out, _ := keel(t, "runs", "show", "--db", db, id); code != 0 || !strings.Contains(out, "settings max_result_chars 5000 → 20000") {
		t.Errorf("runs show does not name the change:\n%s", out)
	}
	if code, _, errOut := keel(t, "runs", "resume", "--db", db, id, "--concurrency", "0"); code != 2 {
		t.Errorf("resume --concurrency 0 = %d, want 2\n%s", code, errOut)
	}
}
