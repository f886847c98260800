package cli_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
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
	// A policy that denies every ordinary call, or has a rule that cannot
	// be evaluated, is refused before the run: no model call, no run.
	for _, tt := range []struct{ name, src, want string }{
		{"nothing.cedar", `@id("no") forbid (principal, action, resource);` + "\n" + `@id("all") permit (principal, action, resource);`, "it denies every one of 13 ordinary calls"},
		{"typo.cedar", `@id("all") permit (principal, action, resource);` + "\n" + `@id("typo") forbid (principal, action, resource) when { context.sandbx == "none" };`, "rule typo cannot be evaluated"},
	} {
		pol := filepath.Join(t.TempDir(), tt.name)
		os.WriteFile(pol, []byte(tt.src), 0o644)
		traj = writeTrajectory(t, "list "+tt.name, []fcall{sh("ls")}, nil)
		code, _, errOut = keel(t, "run", "--model", "replay:"+traj, "--workspace", t.TempDir(), "--policy", pol)
		if code != 2 || !strings.Contains(errOut, "policy "+pol+": "+tt.want) || !strings.Contains(errOut, "nothing ran") {
			t.Errorf("keel run --policy %s = %d, want 2 saying %q\n%s", tt.name, code, tt.want, errOut)
		}
		if _, st := lastRun(t, db); st.Created.Task != "read the secrets" {
			t.Errorf("a run was created with %s: %q", tt.name, st.Created.Task)
		}
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

// A run in a workspace that is not a git repository says what it changed
// at its end and in keel runs diff, from its checkpoints, instead of
// "nothing to compare with".
func TestNonGitWorkspaceChangeSummary(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	db := setup(t)
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "old.txt"), []byte("one\n"), 0o644)
	traj := writeTrajectory(t, "take notes", []fcall{{"write_file", map[string]any{"path": "notes.txt", "content": "hi\n"}}}, nil)
	code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", ws)
	if code != 0 || !strings.Contains(errOut, "1 file(s) changed since the run's first checkpoint") || !strings.Contains(errOut, "A notes.txt") {
		t.Fatalf("keel run in a non-git workspace = %d, want the files it changed\n%s", code, errOut)
	}
	id, _ := lastRun(t, db)
	code, out, errOut := keel(t, "runs", "diff", id)
	if code != 0 || !strings.Contains(out, "A notes.txt") || !strings.Contains(out, "+hi") {
		t.Errorf("keel runs diff = %d, want the new file and its diff\n%s%s", code, out, errOut)
	}
}

// git commit in the sandbox works with no identity in the sandbox's
// empty HOME: the commit gets the identity git on the host gives a
// commit in the workspace (the user's ~/.gitconfig, the repository's own
// user.name and user.email first), else the run's agent at an address
// that reaches nobody.
func TestSandboxGitCommitIdentity(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	setup(t)
	for _, k := range []string{"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	grace := "[user]\n\tname = Grace Hopper\n\temail = grace@example.com\n"
	for _, tt := range []struct {
		name, global string
		local        [][]string
		want         string
	}{
		{"the user's", grace, nil, "Grace Hopper <grace@example.com>"},
		{"the repository's", grace, [][]string{{"user.name", "Ada Lovelace"}, {"user.email", "ada@example.com"}}, "Ada Lovelace <ada@example.com>"},
		{"none: the agent's", "", nil, "keel-cli <keel-cli@keel.invalid>"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			global := filepath.Join(t.TempDir(), "gitconfig")
			os.WriteFile(global, []byte(tt.global), 0o644)
			t.Setenv("GIT_CONFIG_GLOBAL", global) // the user's ~/.gitconfig on this machine
			ws := t.TempDir()
			os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a\n"), 0o644)
			gitRepo(t, ws)
			for _, kv := range tt.local {
				if out, err := exec.Command("git", "-C", ws, "config", kv[0], kv[1]).CombinedOutput(); err != nil {
					t.Fatalf("git config: %v\n%s", err, out)
				}
			}
			traj := writeTrajectory(t, "commit "+tt.name, []fcall{sh("echo b > b.txt && git add b.txt && git commit -q -m agent")}, nil)
			if code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", ws); code != 0 {
				t.Fatalf("keel run = %d\n%s", code, errOut)
			}
			want := "agent|" + tt.want + " / " + tt.want
			out, err := exec.Command("git", "-C", ws, "log", "-1", "--format=%s|%an <%ae> / %cn <%ce>").CombinedOutput()
			if got := strings.TrimSpace(string(out)); err != nil || got != want {
				t.Errorf("the commit made in the sandbox: %q (%v), want %q", got, err, want)
			}
			if b, _ := os.ReadFile(global); string(b) != tt.global {
				t.Errorf("the user's git configuration changed: %q", b)
			}
		})
	}
}

// A run that starts in a workspace another run is executing in says so
// at its start (the other's pid); one alone in its workspace does not.
func TestSecondRunInWorkspaceWarns(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock (util-linux) is not installed")
	}
	setup(t)
	ws := t.TempDir()
	traj := writeTrajectory(t, "list", []fcall{sh("ls")}, nil)
	const warn = "WARNING: another run is executing in this workspace"
	if code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", ws); code != 0 || strings.Contains(errOut, warn) {
		t.Fatalf("keel run alone = %d\n%s", code, errOut)
	}
	// Another execution: a process holding the lock every execution holds
	// on its workspace while it runs.
	other := exec.Command("flock", "-s", ws, "-c", "echo held; exec cat")
	stdin, _ := other.StdinPipe()
	stdout, _ := other.StdoutPipe()
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Wait()
	defer stdin.Close()
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", ws)
	if want := fmt.Sprintf("%s (pid %d)", warn, other.Process.Pid); code != 0 || !strings.Contains(errOut, want) {
		t.Errorf("keel run beside another = %d, want a warning %q\n%s", code, want, errOut)
	}
}
