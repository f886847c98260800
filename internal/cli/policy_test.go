package cli_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/audit"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
)

func TestPolicyCommands(t *testing.T) {
	setup(t)
	dir := t.TempDir()
	code, def, _ := keel(t, "policy", "default")
	if code != 0 || !strings.Contains(def, "[[test]]") {
		t.Fatalf("policy default = %d", code)
	}
	defFile := filepath.Join(dir, "mine.toml")
	os.WriteFile(defFile, []byte(def), 0o644)
	code, out, _ := keel(t, "policy", "test", defFile)
	if code != 0 || !strings.Contains(out, "test cases passed") || strings.Contains(out, "FAIL") {
		t.Errorf("policy test default = %d\n%s", code, out)
	}
	broken := filepath.Join(dir, "broken.toml")
	os.WriteFile(broken, []byte(`version = 1
cedar = '@id("p") permit(principal, action, resource);'
[[test]]
name = "rm must be denied"
command = "ls && rm -rf /"
expect = "deny"
`), 0o644)
	code, out, _ = keel(t, "policy", "test", broken)
	if code != 1 || !strings.Contains(out, "FAIL") || !strings.Contains(out, "rm must be denied") || !strings.Contains(out, "0 of 1") {
		t.Errorf("policy test broken = %d\n%s", code, out)
	}
	for _, tt := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"compound denied", []string{"--command", "ls && rm -rf /"}, 1, []string{"DENY", "workspace               ls", "outside,writes-outside  rm -rf /"}},
		{"allowed", []string{"--command", "go test ./... 2>&1 | tail -5"}, 0, []string{"ALLOW"}},
		{"network without a sandbox asks", []string{"--command", "curl https://example.com", "--sandbox", "none"}, 4, []string{"ASK", "uses the network"}},
		{"file tool", []string{"--tool", "write_file", "--args", `{"path":"src/x.go","content":""}`}, 0, []string{"ALLOW"}},
		{"other policy", []string{"--policy", broken, "--command", "rm -rf /"}, 0, []string{"ALLOW", "broken.toml"}},
		{"bad args", []string{"--args", "[1]"}, 2, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := keel(t, append([]string{"policy", "check"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("policy check %v = %d, want %d\n%s%s", tt.args, code, tt.code, out, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("policy check %v lacks %q:\n%s", tt.args, w, out)
				}
			}
		})
	}
	code, out, _ = keel(t, "policy", "check", "--json", "--command", "cat /etc/passwd | wc -l")
	var d policy.Decision
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.Effect != policy.Deny || len(d.Parts) != 2 {
		t.Errorf("policy check --json = %d %s (%v)", code, out, err)
	}
}

func TestRunRefusals(t *testing.T) {
	setup(t)
	ws := t.TempDir()
	outside := t.TempDir()
	// A journal reached through links into the workspace: a dangling link
	// (SQLite would create the file inside), a link beside the database,
	// and a hard link.
	dangling := filepath.Join(outside, "dangling.db")
	os.Symlink(filepath.Join(ws, "j.db"), dangling)
	walLinked := filepath.Join(outside, "wal.db")
	os.Symlink(filepath.Join(ws, "j.db-wal"), walLinked+"-wal")
	hard := filepath.Join(outside, "hard.db")
	os.WriteFile(hard, nil, 0o644)
	if err := os.Link(hard, filepath.Join(ws, "hard.db")); err != nil {
		t.Fatal(err)
	}
	failing := filepath.Join(t.TempDir(), "failing.toml")
	os.WriteFile(failing, []byte(`version = 1
cedar = '@id("p") permit(principal, action, resource);'
[[test]]
name = "must deny"
command = "rm -rf /"
expect = "deny"
`), 0o644)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"journal inside the workspace", []string{"--db", filepath.Join(ws, "sub", "keel.db")}, "inside the workspace"},
		{"journal is a dangling link into the workspace", []string{"--db", dangling}, "inside the workspace"},
		{"journal's -wal leads into the workspace", []string{"--db", walLinked}, "wal.db-wal leads into the workspace"},
		{"journal with a hard link", []string{"--db", hard}, "2 hard links"},
		{"policy whose tests fail", []string{"--policy", failing}, "test cases fail"},
		{"missing policy", []string{"--policy", "/nonexistent.toml"}, "--policy: read /nonexistent.toml: no such file or directory"},
		{"missing relative policy", []string{"--policy", "no-such-policy.toml"}, "--policy: read no-such-policy.toml: no such file or directory"},
		{"unknown agent", []string{"--agent", "ghost"}, "cannot run"},
		{"bad approval timeout", []string{"--approval-timeout", "soon"}, "--approval-timeout"},
		{"bad approval default", []string{"--approval-default", "maybe"}, "--approval-default"},
		{"missing trajectory", []string{"--model", "replay:" + filepath.Join(outside, "missing.json")}, "replay:" + filepath.Join(outside, "missing.json") + ": no such trajectory file"},
		{"trajectory that is not JSON", []string{"--model", "replay:" + failing}, "load " + failing + ": bad JSON"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"run", "--model", "replay:" + trajectory, "--workspace", ws}, tt.args...)
			code, _, errOut := keel(t, args...)
			if code != 2 || !strings.Contains(errOut, tt.want) {
				t.Errorf("keel %v = %d %q, want 2 and %q", tt.args, code, errOut, tt.want)
			}
		})
	}
	for _, name := range []string{"sub/keel.db", "j.db", "j.db-wal"} {
		if _, err := os.Stat(filepath.Join(ws, name)); err == nil {
			t.Errorf("a journal file %s was created inside the workspace", name)
		}
	}
}

// Nothing inside the sandbox can change the policy, the approvals or the
// journal. The run's policy file lies in the workspace and permits
// everything, so that only the sandbox and the gate's protections stand
// in the way; the recorded model then tries, with real commands in the
// Linux sandbox and with the file tools, to rewrite, replace or delete the
// policy, to write Keel's state directory, and to reach the journal.
func TestNothingInsideCanChangePolicyOrJournal(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	pol := filepath.Join(ws, "policy.cedar")
	src := []byte("@id(\"everything\") permit(principal, action, resource);\n")
	if err := os.WriteFile(pol, src, 0o644); err != nil {
		t.Fatal(err)
	}
	dbDir := filepath.Dir(db)
	traj := writeTrajectory(t, "try to escape the gate",
		[]fcall{sh("echo 'forbid(principal, action, resource);' >> policy.cedar")},
		[]fcall{sh("rm -f policy.cedar || mv policy.cedar gone.cedar || ln -sf /dev/null policy.cedar")},
		[]fcall{sh("cp /dev/null policy.cedar; truncate -s 0 policy.cedar; chmod 000 policy.cedar")},
		[]fcall{{"write_file", map[string]any{"path": "policy.cedar", "content": "forbid(principal, action, resource);"}}},
		[]fcall{{"edit_file", map[string]any{"path": "policy.cedar", "old_text": "permit", "new_text": "forbid"}}},
		[]fcall{sh("mkdir -p .keel/approvals && echo approve-all > .keel/approvals/all")},
		[]fcall{sh("ls -la " + dbDir + "; echo junk >> " + db + "; sqlite3 " + db + " 'DELETE FROM events'")},
		// Keel's state directory is bound at its host path, so the
		// journal's directory exists inside too (empty, on the sandbox's
		// own /tmp, where the echo above may create a file): look for
		// the journal's content, not its name.
		[]fcall{sh("find / -name 'keel.db*' 2>/dev/null | head | xargs -r grep -l 'SQLite format 3'; echo done")},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")},
	)
	code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "--sandbox", "linux", "-q", "--no-wait")
	if code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	got, err := os.ReadFile(pol)
	if err != nil || string(got) != string(src) {
		t.Fatalf("the policy file changed: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(ws, ".keel", "approvals", "all")); err == nil {
		t.Error("the sandbox wrote into .keel")
	}
	id, st := lastRun(t, db)
	sum := sha256.Sum256(src)
	if st.Created.Policy == nil || st.Created.Policy.SHA256 != hex.EncodeToString(sum[:]) || st.Created.Policy.Source != string(src) {
		t.Errorf("run.created policy = %+v", st.Created.Policy)
	}
	// Every attempt failed: a command error or a refusal by the gate.
	for i, turn := range st.Turns[:7] {
		c := turn.Calls[0]
		res := c.Finished
		failed := res.IsError || (res.ExitCode != nil && *res.ExitCode != 0)
		if !failed {
			t.Errorf("attempt %d (%s %s) succeeded: %s", i+1, c.Name, c.Arguments, res.Content)
		}
	}
	if d := st.Turns[3].Calls[0].Decision; d.Effect != policy.Deny || d.Policies[0] != "keel.workspace" {
		t.Errorf("write_file of the policy: %+v", d.Decision)
	}
	if out := st.Turns[7].Calls[0].Finished.Content; strings.Contains(out, "keel.db") {
		t.Errorf("the sandbox can see the journal:\n%s", out)
	}
	reports, err := audit.VerifyAll(t.Context(), openDB(t, db))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reports {
		if !r.OK {
			t.Errorf("audit %+v", r)
		}
	}
	if code, out, _ := keel(t, "audit", "verify", id); code != 0 || !strings.Contains(out, "1 of 1 streams verified") {
		t.Errorf("keel audit verify = %d\n%s", code, out)
	}

}

// keel --server URL policy check asks the team server's policy (fresh-user
// report 12, N20): it answered with this machine's default policy, exit 0.
func TestPolicyCheckWithServer(t *testing.T) {
	setup(t)
	pol := filepath.Join(t.TempDir(), "team.toml")
	os.WriteFile(pol, []byte("version = 1\ncedar = '@id(\"everything\") permit(principal, action, resource);'\n"), 0o644)
	s := startServe(t, "--policy", pol)
	// Keel's default denies it; the server's policy allows it.
	if code, out, errOut := keel(t, "policy", "check", "--command", "rm -rf /"); code != 1 || !strings.Contains(out, "DENY") {
		t.Fatalf("local policy check = %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := keel(t, "--server", s.url, "policy", "check", "--command", "rm -rf /")
	if code != 0 || !strings.Contains(out, "ALLOW") || !strings.Contains(out, "team.toml") || !strings.Contains(out, "everything") {
		t.Errorf("policy check --server = %d, want the server's ALLOW by team.toml\n%s%s", code, out, errOut)
	}
	code, out, _ = keel(t, "--server", s.url, "policy", "check", "--json", "--tool", "write_file", "--args", `{"path":"x","content":""}`)
	var d struct {
		Policy   string        `json:"policy"`
		Decision policy.Effect `json:"decision"`
		Parts    []policy.Part `json:"parts"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil || code != 0 || d.Decision != policy.Allow || !strings.HasSuffix(d.Policy, "team.toml") {
		t.Errorf("policy check --server --json = %d %s (%v)", code, out, err)
	}
	// Bad arguments and a local policy file are refused, exit 2.
	for _, args := range [][]string{{"--args", "[1]"}, {"--policy", pol, "--command", "ls"}} {
		if code, _, errOut := keel(t, append([]string{"--server", s.url, "policy", "check"}, args...)...); code != 2 {
			t.Errorf("policy check --server %v = %d, want 2: %s", args, code, errOut)
		}
	}
}

// keel policy check (local, --server, POST /v1/policy/check) refuses a
// call no run could make, with the words a run's creation uses, rather
// than deciding it (report 15, R6); an API request without arguments
// says what to give.
func TestPolicyCheckRefusesWhatNoRunCouldMake(t *testing.T) {
	setup(t)
	pol := filepath.Join(t.TempDir(), "team.toml")
	os.WriteFile(pol, []byte("version = 1\ncedar = '@id(\"everything\") permit(principal, action, resource);'\n"), 0o644)
	s := startServe(t, "--policy", pol)
	for _, tt := range []struct {
		args []string
		says string
	}{
		{[]string{"--tool", "bogus", "--args", "{}"}, `tool "bogus": Keel has no such tool`},
		{[]string{"--command", "ls", "--sandbox", "bogus"}, `sandbox "bogus": want linux or none`},
		{[]string{"--command", "ls", "--mount-path", "rel"}, `mount_path "rel" must be absolute`},
		{[]string{"--command", "ls", "--principal", "nosuchagent"}, `agent nosuchagent cannot run`},
		{[]string{"--command", "ls", "--on-behalf-of", "bob"}, `acts as itself, not on behalf of "bob"`},
		// Arguments a run's tool registry refuses (report R2).
		{[]string{"--tool", "read_file", "--args", `{"pth":"x"}`}, `the arguments of read_file do not match its schema: unknown argument "pth"`},
		{[]string{"--tool", "read_file", "--args", `{"path":"a","path":"b"}`}, `the arguments of read_file are ambiguous: the key "path" appears twice`},
	} {
		for _, form := range [][]string{{"--policy", pol}, {"--server", s.url}} {
			code, out, errOut := keel(t, append(append(form, "policy", "check"), tt.args...)...)
			if code != 2 || !strings.Contains(errOut, tt.says) {
				t.Errorf("policy check %v %v = %d, want 2 saying %q\n%s%s", form[0], tt.args, code, tt.says, out, errOut)
			}
		}
	}
	// A path a run's workspace refuses is denied as the run denies it,
	// by keel.workspace (report R2: ALLOW).
	for _, tt := range []struct {
		args []string
		says string
	}{
		{[]string{"--tool", "read_file", "--args", `{"path":"/etc/passwd"}`}, "/etc/passwd: path is outside the workspace (the workspace is /workspace)"},
		{[]string{"--tool", "read_file", "--args", `{"path":"/workspace/../etc/passwd"}`}, "/workspace/../etc/passwd: path is outside the workspace"},
		{[]string{"--tool", "write_file", "--args", `{"path":".git/hooks/pre-commit","content":"x"}`}, ".git/hooks/pre-commit: path is protected"},
		{[]string{"--tool", "write_file", "--args", `{"path":".keel/config.toml","content":"x"}`}, ".keel/config.toml: path is protected"},
	} {
		for _, form := range [][]string{{"--policy", pol}, {"--server", s.url}} {
			code, out, errOut := keel(t, append(append(form, "policy", "check", "--json"), tt.args...)...)
			var d policy.Decision
			if err := json.Unmarshal([]byte(out), &d); err != nil || code != 1 || d.Effect != policy.Deny || strings.Join(d.Policies, ",") != "keel.workspace" || !strings.Contains(d.Reason, tt.says) {
				t.Errorf("policy check %v %v = %d, want 1, DENY by keel.workspace saying %q\n%s%s", form[0], tt.args, code, tt.says, out, errOut)
			}
		}
	}
	// What a run could call is decided: a connector's tool, a file tool.
	for _, args := range [][]string{{"--tool", "shop__sql_query", "--args", `{"sql":"select 1"}`}, {"--tool", "read_file", "--args", `{"path":"x"}`}} {
		if code, out, errOut := keel(t, append([]string{"--server", s.url, "policy", "check"}, args...)...); code != 0 {
			t.Errorf("policy check --server %v = %d, want 0\n%s%s", args, code, out, errOut)
		}
	}
	c := s.apiClient(t)
	_, err := c.CheckPolicy(t.Context(), &api.PolicyCheck{Tool: "bash", Arguments: json.RawMessage(`{"command":"ls"}`), Agent: "nosuchagent"})
	if !client.IsCode(err, api.CodeInvalidRequest) || !strings.Contains(err.Error(), "agent nosuchagent cannot run") {
		t.Errorf("POST /v1/policy/check with an unknown agent: %v", err)
	}
	_, err = c.CheckPolicy(t.Context(), &api.PolicyCheck{})
	if !client.IsCode(err, api.CodeInvalidRequest) || !strings.Contains(err.Error(), `arguments: missing: give the call's arguments, a JSON object (for bash {"command": "ls"})`) {
		t.Errorf("POST /v1/policy/check with no arguments: %v", err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+"/v1/policy/check", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+s.savedToken(t))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "arguments: missing: give the call's arguments") {
		t.Errorf("POST /v1/policy/check {} = %d %s", resp.StatusCode, body)
	}
}
