package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run paused on an approval says how to approve or deny the call, not
// to `keel runs resume` it (which would only pause again).
func TestPausedHintSaysApproveOrDeny(t *testing.T) {
	ws, db, traj, pol := approvalSetup(t)
	code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "--no-wait")
	if code != 3 {
		t.Fatalf("keel run --no-wait = %d, want 3\n%s", code, errOut)
	}
	id, st := lastRun(t, db)
	pending := st.Pending()
	if len(pending) != 1 {
		t.Fatalf("pending = %+v", pending)
	}
	k := "keel --db " + db // the hint names the journal it was given
	want := "keel: decide with: " + k + " approve " + id + " " + pending[0].CallID + "   or   " + k + " deny " + id + " " + pending[0].CallID + " --reason TEXT"
	if !strings.Contains(errOut, want) || strings.Contains(errOut, "runs resume") {
		t.Errorf("stderr lacks %q or names runs resume:\n%s", want, errOut)
	}
}

// `keel policy test` never passes a policy whose rule reads an attribute
// that does not exist, or that denies every call, with "0 of 0".
func TestPolicyTestBrokenPolicies(t *testing.T) {
	setup(t)
	dir := t.TempDir()
	for _, tt := range []struct {
		name, file, src, want string
	}{
		{"a nonexistent attribute", "typo.cedar", `@id("all") permit (principal, action, resource) when { !context.outsdie };`,
			"rule all cannot be evaluated"},
		{"denies everything", "nothing.cedar", `@id("no") forbid (principal, action, resource);
@id("all") permit (principal, action, resource);`, "it denies every one of 13 ordinary calls"},
		{"a nonexistent attribute, with a passing case", "typo.toml", `version = 1
cedar = '''
@id("all") permit (principal, action, resource);
@id("etc") forbid (principal, action, resource) when { context.outside_pathz.contains("/etc/passwd") };
'''
[[test]]
name = "no /etc/passwd"
command = "cat /etc/passwd"
expect = "deny"
`, "the decision is right only because"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.file)
			if err := os.WriteFile(p, []byte(tt.src), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := keel(t, "policy", "test", p)
			if code != 1 || !strings.Contains(out, tt.want) || strings.Contains(out, "0 of 0") {
				t.Errorf("keel policy test = %d, want 1 saying %q\n%s%s", code, tt.want, out, errOut)
			}
		})
	}
	code, out, _ := keel(t, "policy", "default")
	if code != 0 {
		t.Fatal(code)
	}
	p := filepath.Join(dir, "default.toml")
	os.WriteFile(p, []byte(out), 0o644)
	if code, out, _ := keel(t, "policy", "test", p); code != 0 || !strings.Contains(out, "test cases passed") {
		t.Errorf("keel policy test of the default = %d\n%s", code, out)
	}
}

// A run whose every call is denied ends failed (exit 1) and says so,
// not completed with exit 0.
func TestAllCallsDeniedIsNoCompletion(t *testing.T) {
	db := setup(t)
	traj := writeTrajectory(t, "read the secrets", []fcall{sh("cat /etc/shadow")}, []fcall{sh("cat ../../etc/passwd")}, nil)
	code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", t.TempDir())
	if code != 1 || !strings.Contains(errOut, "all_denied: every one of the run's 2 tool calls was denied") {
		t.Errorf("keel run = %d, want 1 saying every call was denied\n%s", code, errOut)
	}
	if _, st := lastRun(t, db); st.Ended == nil || st.Ended.Reason != "all_denied" {
		t.Errorf("ended %+v", st.Ended)
	}
	// A policy that denies every ordinary call is named before the run.
	pol := filepath.Join(t.TempDir(), "nothing.cedar")
	os.WriteFile(pol, []byte(`@id("no") forbid (principal, action, resource);`+"\n"+`@id("all") permit (principal, action, resource);`), 0o644)
	traj = writeTrajectory(t, "list", []fcall{sh("ls")}, nil)
	code, _, errOut = keel(t, "run", "--model", "replay:"+traj, "--workspace", t.TempDir(), "--policy", pol)
	if code != 1 || !strings.Contains(errOut, "WARNING: policy "+pol+": it denies every one of 13 ordinary calls") || !strings.Contains(errOut, "all_denied") {
		t.Errorf("keel run --policy (denies everything) = %d\n%s", code, errOut)
	}
}

// A missing API key is a configuration error: exit 2, and no run.
func TestMissingAPIKeyExits2(t *testing.T) {
	for _, m := range []string{"openai:gpt-4o", "anthropic:claude-sonnet-4-5"} {
		db := setup(t)
		code, _, errOut := keel(t, "run", "--model", m, "--workspace", t.TempDir(), "hello")
		if code != 2 || !strings.Contains(errOut, "no API key for "+m) {
			t.Errorf("keel run --model %s without a key = %d, want 2\n%s", m, code, errOut)
		}
		if _, err := os.Stat(db); err == nil {
			if code, out, _ := keel(t, "runs", "list", "--db", db); code != 0 || strings.Contains(out, "hello") {
				t.Errorf("a run was created:\n%s", out)
			}
		}
	}
}
