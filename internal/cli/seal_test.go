package cli_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/redact"
)

// keelProcess runs this test binary as the keel command with args, in a
// process of its own, and returns its exit code and output.
func keelProcess(t *testing.T, args ...string) (int, string) {
	t.Helper()
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(b))
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("keel %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return code, string(out)
}

// sealCommand is the model's command: it writes the secret, given
// literally, into the workspace (a file's content and a file's name) and
// its digest, which shows that the command received the value.
func sealCommand(secret string) string {
	return `printf %s '` + secret + `' | sha256sum > digest.txt && printf 'TOKEN=%s\n' '` + secret + `' > deploy.env && touch 'note-` + secret + `.txt'`
}

// sealWorkspace is a git repository with one committed file.
func sealWorkspace(t *testing.T) string {
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "README.md"), []byte("deploy notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRepo(t, ws)
	return ws
}

// canaryIn returns where (of the named texts) the secret is, in any
// spelling redact knows, or the journal's bytes hold it.
func canaryIn(secret string, texts map[string]string, files ...string) []string {
	s := redact.NewSecrets(secret)
	var where []string
	for name, text := range texts {
		if len(s.Scan(text)) > 0 {
			where = append(where, name)
		}
	}
	for name, text := range texts {
		// The model wrote no placeholder of its own: an escaped one is
		// a placeholder sealed twice.
		if strings.Contains(text, "«\u200bsecret") || strings.Contains(text, "«"+redact.TypedMark+"secret") {
			where = append(where, name+" (a placeholder sealed twice)")

		}
	}
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && (bytes.Contains(b, []byte(secret)) || len(s.Scan(string(b))) > 0) {
			where = append(where, f)
		}
	}
	return where
}

// The model writes the run's secret literally into a bash call: the call
// asks (it writes a secret into the workspace); the approval, the
// timeline, the events and the journal's file show a placeholder naming
// the secret, never its value; approved in another process (the run
// executed and paused in one process, the approval and the resume in a
// second), the command receives the value. The files it wrote the secret
// into (and named after it) are shown by keel runs diff and the closing
// summary with the placeholder too; where this process does not hold the
// secret, runs diff says it cannot hide it.
func TestSecretWrittenByModelSealed(t *testing.T) {
	db := setup(t)
	secret := canary(t, "kcS")
	t.Setenv(exfilSecretName, secret)
	ws := sealWorkspace(t)
	traj := writeTrajectory(t, "store the token for the deploy script", []fcall{sh(sealCommand(secret))}, nil)
	code, runOut := keelProcess(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--secret-env", exfilSecretName, "--no-wait")
	if code != 3 {
		t.Fatalf("keel run = %d, want 3 (waiting for an approval)\n%s", code, runOut)
	}
	id, st := lastRun(t, db)
	pending := st.Pending()
	if len(pending) != 1 {
		t.Fatalf("pending approvals %+v", pending)
	}
	if want := "«secret:" + exfilSecretName + ":as-is»"; !strings.Contains(pending[0].Action, want) {
		t.Errorf("the approval's action %q does not name the secret as %s", pending[0].Action, want)
	}
	outs := map[string]string{"keel run": runOut}
	for name, args := range map[string][]string{
		"approvals list":   {"approvals", "list", "--db", db},
		"runs show":        {"runs", "show", id, "--db", db, "--full"},
		"runs show --json": {"runs", "show", id, "--db", db, "--json"},
		"runs export":      {"runs", "export", id, "--db", db},
	} {
		c, out, errOut := keel(t, args...)
		if c != 0 {
			t.Errorf("keel %s = %d\n%s", name, c, errOut)
		}
		outs[name+" (waiting)"] = out + errOut
	}
	if !strings.Contains(outs["approvals list (waiting)"], "«secret:"+exfilSecretName) {
		t.Errorf("approvals list does not name the secret:\n%s", outs["approvals list (waiting)"])
	}
	code, approveOut := keelProcess(t, "approve", "--db", db, id, pending[0].CallID, "--by", "ops")
	if code != 0 {
		t.Fatalf("keel approve = %d\n%s", code, approveOut)
	}
	outs["keel approve"] = approveOut
	st, evs := loadRun(t, db, id)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("status %s %+v", st.Status, st.Ended)
	}
	// The command received the value: its digest is the value's.
	got, err := os.ReadFile(filepath.Join(ws, "digest.txt"))
	sum, _ := exec.Command("sh", "-c", `printf %s "$0" | sha256sum`, secret).Output()
	if err != nil || string(got) != string(sum) {
		t.Errorf("digest.txt = %q (%v), want the secret's %q", got, err, sum)
	}
	for name, args := range map[string][]string{
		"runs show":        {"runs", "show", id, "--db", db, "--full"},
		"runs show --json": {"runs", "show", id, "--db", db, "--json"},
		"runs list":        {"runs", "list", "--db", db},
		"audit export":     {"audit", "export", id, "--db", db},
		"runs diff":        {"runs", "diff", id, "--db", db},
		"runs diff --stat": {"runs", "diff", id, "--db", db, "--stat"},
		"runs diff --at":   {"runs", "diff", id, "--db", db, "--at", "100000"},
	} {
		if name == "runs diff --at" {
			args[len(args)-1] = strconv.FormatInt(evs[len(evs)-1].Seq, 10)
		}
		c, out, errOut := keel(t, args...)
		if c != 0 {
			t.Errorf("keel %s = %d\n%s", name, c, errOut)
		}
		outs[name] = out + errOut
	}
	var started *agent.ToolStarted
	for i := range evs {
		if evs[i].Type == journal.ToolStarted {
			v, _ := agent.Decode(&evs[i])
			started = v.(*agent.ToolStarted)
		}
	}
	if started == nil || !strings.Contains(string(started.Arguments), "«secret:"+exfilSecretName) {
		t.Errorf("tool.started = %+v, want the placeholder", started)
	}
	// A second run in the workspace closes with the files changed since
	// its start commit: the first run's, named with the placeholder.
	traj2 := writeTrajectory(t, "list the files", []fcall{sh("ls")}, nil)
	c, out, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj2, "--workspace", ws, "--secret-env", exfilSecretName)
	if c != 0 {
		t.Errorf("keel run (second) = %d\n%s", c, errOut)
	}
	outs["keel run (closing summary)"] = out + errOut
	for _, name := range []string{"runs diff", "runs diff --stat", "runs diff --at", "keel run (closing summary)"} {
		if !strings.Contains(outs[name], "note-«secret:"+exfilSecretName+":as-is».txt") {
			t.Errorf("%s does not show the file named after the secret, sealed:\n%s", name, outs[name])
		}
	}
	if !strings.Contains(outs["runs diff"], "+TOKEN=«secret:"+exfilSecretName+":as-is»") {
		t.Errorf("runs diff does not show the line with the secret, sealed:\n%s", outs["runs diff"])
	}
	if where := canaryIn(secret, outs, db, db+"-wal"); len(where) > 0 {
		t.Errorf("the secret is in %v", where)
	}
	t.Setenv(exfilSecretName, "")
	if _, out, errOut := keel(t, "runs", "diff", id, "--db", db); !strings.Contains(errOut, "secret "+exfilSecretName+" is not set in this environment: this diff cannot hide its value") {
		t.Errorf("runs diff without the secret in the environment:\n%s%s", out, errOut)
	}
}

// The same through the team server: the run executes in keel serve (the
// value from the server's environment), the approval is listed and
// decided through the API, and the web UI's pages, the API's events and
// the printed lists show the placeholder, never the value.
func TestSecretWrittenByModelSealedServer(t *testing.T) {
	db := setup(t)
	secret := canary(t, "kcS")
	t.Setenv(exfilSecretName, secret)
	s := startServe(t, "--secret-env", exfilSecretName)
	ws := sealWorkspace(t)
	traj := writeTrajectory(t, "store the token for the deploy script", []fcall{sh(sealCommand(secret))}, nil)
	outs := map[string]string{}
	code, out, errOut := keel(t, "--server", s.url, "run", "--model", "replay:"+traj, "--workspace", ws, "--secret-env", exfilSecretName, "--no-wait")
	if code != 0 && code != 3 {
		t.Fatalf("keel --server run = %d\n%s", code, errOut)
	}
	outs["keel run"] = out + errOut
	id, ev := waitForType(t, db, journal.ApprovalRequested)
	var req agent.ApprovalRequested
	_ = json.Unmarshal(ev.Payload, &req)
	get := func(name, path string) {
		r, _ := http.NewRequest(http.MethodGet, s.url+path, nil)
		r.Header.Set("Authorization", "Bearer "+s.savedToken(t))
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d", path, resp.StatusCode)
		}
		outs[name] = string(b)
	}
	get("ui run page (waiting)", "/ui/runs/"+id)
	get("ui approvals (waiting)", "/ui/approvals")
	for name, args := range map[string][]string{
		"approvals list":   {"--server", s.url, "approvals", "list"},
		"runs show --json": {"--server", s.url, "runs", "show", id, "--json"},
	} {
		c, out, errOut := keel(t, args...)
		if c != 0 {
			t.Errorf("keel %s = %d\n%s", name, c, errOut)
		}
		outs[name+" (waiting)"] = out + errOut
	}
	for _, name := range []string{"ui approvals (waiting)", "approvals list (waiting)"} {
		if !strings.Contains(outs[name], "secret:"+exfilSecretName) {
			t.Errorf("%s does not name the secret:\n%s", name, outs[name])
		}
	}
	if c, out, errOut := keel(t, "--server", s.url, "approve", id, req.CallID); c != 0 {
		t.Fatalf("keel --server approve = %d\n%s%s", c, out, errOut)
	}
	c, out, errOut := keel(t, "--server", s.url, "runs", "show", id, "--follow")
	outs["runs show --follow"] = out + errOut
	if st, _ := loadRun(t, db, id); c != 0 || st.Status != journal.StatusCompleted {
		t.Fatalf("after the approval: runs show = %d, status %s\n%s", c, st.Status, out+errOut)
	}
	gotDigest, err := os.ReadFile(filepath.Join(ws, "digest.txt"))
	sum, _ := exec.Command("sh", "-c", `printf %s "$0" | sha256sum`, secret).Output()
	if err != nil || string(gotDigest) != string(sum) {
		t.Errorf("digest.txt = %q (%v), want the secret's %q", gotDigest, err, sum)
	}
	get("ui run page", "/ui/runs/"+id)
	get("api events", "/v1/runs/"+id+"/events")
	get("api diff", "/v1/runs/"+id+"/diff")
	if c, out, errOut := keel(t, "--server", s.url, "runs", "diff", id); c != 0 {
		t.Errorf("keel --server runs diff = %d\n%s", c, errOut)
	} else {
		outs["runs diff"] = out + errOut
	}
	for _, name := range []string{"runs diff", "ui run page", "api diff"} {
		if !strings.Contains(outs[name], "note-«secret:"+exfilSecretName+":as-is».txt") {
			t.Errorf("%s does not show the file named after the secret, sealed:\n%s", name, outs[name])
		}
	}
	outs["server stderr"] = s.stderr.String()
	if where := canaryIn(secret, outs, db, db+"-wal"); len(where) > 0 {
		t.Errorf("the secret is in %v", where)
	}
}
