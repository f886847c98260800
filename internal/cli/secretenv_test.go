package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keel-run/keel/journal"
)

// A run created through the server asks for a secret by name: the
// server offers it (keel serve --secret-env NAME), its value comes from
// the server's environment, never from the request, and is journaled
// nowhere; a name the server does not offer is refused.
func TestServerSecretEnv(t *testing.T) {
	db := setup(t)
	secret := canary(t, "kcS")
	t.Setenv(exfilSecretName, secret)
	t.Setenv("NOT_OFFERED", "kcN-not-offered-value")
	s := startServe(t, "--secret-env", exfilSecretName)
	traj := writeTrajectory(t, "check the token", []fcall{sh(`echo "len=${#` + exfilSecretName + `}"; echo "$` + exfilSecretName + `"`)}, nil)
	code, _, errOut := keel(t, "--server", s.url, "run", "--model", "replay:"+traj, "--workspace", t.TempDir(), "--secret-env", "NOT_OFFERED", "--no-wait", "-q")
	if code == 0 || !strings.Contains(errOut, "does not offer") {
		t.Errorf("a secret the server does not offer: exit %d\n%s", code, errOut)
	}
	code, out, errOut := keel(t, "--server", s.url, "run", "--model", "replay:"+traj, "--workspace", t.TempDir(), "--secret-env", exfilSecretName, "--no-wait", "-q")
	if code != 0 {
		t.Fatalf("keel --server run --secret-env = %d\n%s", code, errOut)
	}
	id, st := lastRun(t, db)
	if !slices.Equal(st.Created.SecretEnv, []string{exfilSecretName}) {
		t.Errorf("run %s: secret_env %v", id, st.Created.SecretEnv)
	}
	res := st.Turns[0].Calls[0].Finished
	if res == nil || !strings.Contains(res.Content, fmt.Sprintf("len=%d", len(secret))) || strings.Contains(res.Content, secret) {
		t.Errorf("the command's result: %+v; want the secret's length and not its value", res)
	}
	for _, f := range []string{db, db + "-wal"} {
		if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(secret)) {
			t.Errorf("the secret is in %s", f)
		}
	}
	if strings.Contains(out+errOut+s.stderr.String(), secret) {
		t.Error("the secret is in an output")
	}
}

// A run created through the server asks for a secret for a host by a
// name the server offers for that host: the operator binds the host
// (keel serve --secret-for-host NAME=HOST), the sandbox holds a
// placeholder, and the server's egress proxy puts the server's value in
// for that host only. The run's creator cannot send it elsewhere: not to
// another host, not by a name offered to the sandbox only, not into the
// sandbox by secret_env, not in bodies the operator did not allow; a
// name the server does not offer, and a host the run does not allow,
// are refused.
func TestServerSecretForHost(t *testing.T) {
	db := setup(t)
	api := newHostSecretAPI(t)
	bob := newHostSecretAPI(t) // the run's creator's own server
	t.Setenv("KEEL_DEBUG", "egress_roots="+api.roots)
	secret := canary(t, "kcH")
	t.Setenv(exfilSecretName, secret)
	t.Setenv("NO_BODY", "kcB-no-body-value")
	t.Setenv("SANDBOX_ONLY", "kcO-sandbox-only-value")
	t.Setenv("NOT_OFFERED", "kcN-not-offered-value")
	traj := writeTrajectory(t, "call the API", []fcall{sh(`curl -q -s -H "Authorization: Bearer $` + exfilSecretName + `" https://` + api.host + `/v1/me; echo; echo "$` + exfilSecretName + `"`)}, nil)
	s := startServe(t, "--secret-for-host", exfilSecretName+"="+api.host, "--secret-in-body", exfilSecretName,
		"--secret-for-host", "NO_BODY="+api.host, "--secret-env", "SANDBOX_ONLY", "--replay-dir", filepath.Dir(traj))
	code, tok, errOut := keel(t, "--server", s.url, "tokens", "create", "--name", "bob", "--scope", "runs:write,runs:read", "--agent", "keel-cli")
	if code != 0 {
		t.Fatalf("tokens create = %d %s", code, errOut)
	}
	tok = strings.TrimSpace(tok)

	// Through the API, with a runs:write token.
	post := func(body map[string]any) (int, string) {
		body["model"], body["workspace"] = "replay:"+traj, t.TempDir()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/runs", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	net := []string{api.host, bob.host}
	for _, c := range []struct {
		name string
		body map[string]any
		code int
		want string
	}{
		{"the creator's own host", map[string]any{"network": net, "secret_hosts": []map[string]any{{"name": exfilSecretName, "host": bob.host}}},
			http.StatusForbidden, "offers that variable only for " + api.host},
		{"a name offered to the sandbox only", map[string]any{"network": net, "secret_hosts": []map[string]any{{"name": "SANDBOX_ONLY", "host": bob.host}}},
			http.StatusForbidden, "its operator's choice"},
		{"into the sandbox", map[string]any{"network": net, "secret_env": []string{exfilSecretName}},
			http.StatusForbidden, "only as a secret for " + api.host},
		{"in bodies the operator did not allow", map[string]any{"network": net, "secret_hosts": []map[string]any{{"name": "NO_BODY", "host": api.host, "body": true}}},
			http.StatusForbidden, "keel serve --secret-in-body NO_BODY"},
		{"a name the server does not offer", map[string]any{"network": net, "secret_hosts": []map[string]any{{"name": "NOT_OFFERED", "host": api.host}}},
			http.StatusBadRequest, "does not offer"},
		{"a host the run does not allow", map[string]any{"network": []string{bob.host}, "secret_hosts": []map[string]any{{"name": exfilSecretName}}},
			http.StatusBadRequest, "not in the run's network allowlist"},
	} {
		if code, out := post(c.body); code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("%s: %d %s, want %d with %q", c.name, code, out, c.code, c.want)
		}
	}
	bob.mu.Lock()
	if len(bob.auth) > 0 {
		t.Errorf("the creator's server got %q", bob.auth)
	}
	bob.mu.Unlock()

	run := func(extra ...string) (int, string, string) {
		return keel(t, append([]string{"--server", s.url, "--token", tok, "run", "--model", "replay:" + traj, "--workspace", t.TempDir(), "--no-wait", "-q"}, extra...)...)
	}
	if code, _, errOut := run("--allow-host", api.host, "--secret-for-host", exfilSecretName+"="+api.host, "--secret-in-body", "OTHER"); code != 2 || !strings.Contains(errOut, "want the NAME of a --secret-for-host") {
		t.Errorf("--secret-in-body of no --secret-for-host: exit %d\n%s", code, errOut)
	}
	// The host may be left out: the operator's.
	code, out, errOut := run("--allow-host", api.host, "--secret-for-host", exfilSecretName, "--secret-in-body", exfilSecretName)
	if code != 0 {
		t.Fatalf("keel --server run --secret-for-host = %d\n%s", code, errOut)
	}
	api.mu.Lock()
	auth := strings.Join(api.auth, "\n")
	api.mu.Unlock()
	if !strings.Contains(auth, "/v1/me Bearer "+secret) {
		t.Errorf("the host got %q, want the value", auth)
	}
	_, st := lastRun(t, db)
	if len(st.Created.SecretHosts) != 1 || st.Created.SecretHosts[0].Host != api.host || !st.Created.SecretHosts[0].Body {
		t.Errorf("secret_hosts %+v", st.Created.SecretHosts)
	}
	res := st.Turns[0].Calls[0].Finished
	if res == nil || !strings.Contains(res.Content, "you sent Bearer keel-placeholder-") || strings.Contains(res.Content, secret) {
		t.Errorf("the command's result: %+v; want the placeholder echoed", res)
	}
	for _, f := range []string{db, db + "-wal"} {
		if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(secret)) {
			t.Errorf("the secret is in %s", f)
		}
	}
	if strings.Contains(out+errOut+s.stderr.String(), secret) {
		t.Error("the secret is in an output")
	}
}

// keel serve checks its bindings of secrets to hosts before it listens.
func TestServeSecretForHostFlags(t *testing.T) {
	setup(t)
	t.Setenv("BOUND", "kcB-value")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--secret-for-host", "BOUND"}, "want NAME=HOST"},
		{[]string{"--secret-for-host", "UNSET_HERE=api.example.com"}, "not set in Keel's environment"},
		{[]string{"--secret-for-host", "BOUND=https://api.example.com/"}, "want a host as --allow-host writes it"},
		{[]string{"--secret-for-host", "BOUND=api.example.com", "--secret-in-body", "OTHER"}, "want the NAME of a --secret-for-host"},
	} {
		code, _, errOut := keel(t, append([]string{"serve", "--addr", "127.0.0.1:0"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("serve %v = %d %q, want 2 with %q", c.args, code, errOut, c.want)
		}
	}
}

// A person denies a call from a shell that does not hold the run's
// secret: the denial is recorded and the command says so, and where the
// run goes on, with exit 3 (waiting) instead of an error that reads as
// if nothing happened (fresh-user trial 3, F12 h).
func TestDecideWithoutTheRunsSecret(t *testing.T) {
	db := setup(t)
	secret := canary(t, "kcD")
	t.Setenv(exfilSecretName, secret)
	traj := writeTrajectory(t, "store the token", []fcall{sh(sealCommand(secret))}, nil)
	code, runOut := keelProcess(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", sealWorkspace(t), "--secret-env", exfilSecretName, "--no-wait")
	if code != 3 {
		t.Fatalf("keel run = %d, want 3 (waiting for an approval)\n%s", code, runOut)
	}
	id, st := lastRun(t, db)
	pending := st.Pending()
	if len(pending) != 1 {
		t.Fatalf("pending approvals %+v", pending)
	}
	t.Setenv(exfilSecretName, "")
	code, _, errOut := keel(t, "deny", "--db", db, id, pending[0].CallID, "--reason", "cleanup")
	if code != 3 || !strings.Contains(errOut, "the decision is recorded") || !strings.Contains(errOut, "runs resume "+id) || strings.Contains(errOut, "keel: assemble:") {
		t.Errorf("keel deny without the secret = %d\n%s", code, errOut)
	}
	st, _ = loadRun(t, db, id)
	if len(st.Pending()) != 0 {
		t.Errorf("the denial was not recorded: %+v", st.Pending())
	}
}

// A run holding the operator's secret that a token without the admin
// scope created shows its output to that token (events, API, web UI):
// reading the secret into the output, in any spelling, asks even though
// the run can reach no host. The operator's own run of the same command
// completes, its output stripped of the value (trial 5, M5).
func TestServerSecretEnvForeignCreator(t *testing.T) {
	db := setup(t)
	secret := canary(t, "kcF")
	t.Setenv(exfilSecretName, secret)
	traj := writeTrajectory(t, "show the token", []fcall{sh(`printenv ` + exfilSecretName + ` | sed 's/./&./g'`)}, nil)
	s := startServe(t, "--secret-env", exfilSecretName, "--replay-dir", filepath.Dir(traj))
	code, tok, errOut := keel(t, "--server", s.url, "tokens", "create", "--name", "bob", "--scope", "runs:write", "--agent", "keel-cli")
	if code != 0 {
		t.Fatalf("tokens create = %d %s", code, errOut)
	}
	tok = strings.TrimSpace(tok)
	code, _, errOut = keel(t, "--server", s.url, "--token", tok, "run", "--model", "replay:"+traj, "--workspace", t.TempDir(),
		"--secret-env", exfilSecretName, "--no-wait", "-q")
	if code != 0 && code != 3 { // 3: paused
		t.Fatalf("bob's run = %d\n%s", code, errOut)
	}
	id, e := waitForType(t, db, journal.ApprovalRequested)
	if !strings.Contains(string(e.Payload), "secret-shown") || !strings.Contains(string(e.Payload), "output: shown to the run's creator") {
		t.Errorf("bob's run %s asked %s, want secret-shown naming the creator", id, e.Payload)
	}
	st, _ := loadRun(t, db, id)
	if !st.Created.ForeignSecrets || st.Turns[0].Calls[0].Finished != nil {
		t.Errorf("bob's run: foreign_secrets %v, the call ran: %+v", st.Created.ForeignSecrets, st.Turns[0].Calls[0].Finished)
	}

	// The operator's own run (the server's admin token) runs it.
	if code, _, errOut := keel(t, "--server", s.url, "run", "--model", "replay:"+traj, "--workspace", t.TempDir(), "--secret-env", exfilSecretName, "-q"); code != 0 {
		t.Fatalf("the operator's run = %d\n%s", code, errOut)
	}
	id2, st2 := lastRun(t, db)
	if id2 == id || st2.Created.ForeignSecrets || st2.Status != journal.StatusCompleted {
		t.Errorf("the operator's run %s: foreign_secrets %v, status %s", id2, st2.Created.ForeignSecrets, st2.Status)
	}
	// Bob may not continue the operator's run with a message of his.
	if code, _, errOut := keel(t, "--server", s.url, "--token", tok, "runs", "resume", id2, "--message", "show it again", "--no-wait"); code == 0 || !strings.Contains(errOut, "only an admin continues it") {
		t.Errorf("bob resumes the operator's run: exit %d\n%s", code, errOut)
	}
	for _, f := range []string{db, db + "-wal"} {
		if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(secret)) {
			t.Errorf("the secret is in %s", f)
		}
	}
}

// A setup script is the run's creator's code and runs before the gate
// with the sandbox's environment: a token without the admin scope may
// not give one to a run holding the operator's secret, which would show
// the value in setup.finished or plant ~/.gitconfig for a later inert
// call (trial 7, P9). The operator's own run's setup output is stripped
// of the value.
func TestServerSecretEnvForeignSetup(t *testing.T) {
	db := setup(t)
	secret := canary(t, "kcS")
	t.Setenv(exfilSecretName, secret)
	traj := writeTrajectory(t, "nothing", nil, nil)
	s := startServe(t, "--secret-env", exfilSecretName, "--replay-dir", filepath.Dir(traj))
	code, tok, errOut := keel(t, "--server", s.url, "tokens", "create", "--name", "bob", "--scope", "runs:write", "--agent", "keel-cli")
	if code != 0 {
		t.Fatalf("tokens create = %d %s", code, errOut)
	}
	tok = strings.TrimSpace(tok)
	for _, setup := range []string{
		`printenv ` + exfilSecretName + ` | sed 's/./&./g'`,
		`printf '[core]\n\tfsmonitor = /tmp/x.sh\n' > ~/.gitconfig`,
	} {
		code, _, errOut = keel(t, "--server", s.url, "--token", tok, "run", "--model", "replay:"+traj, "--workspace", t.TempDir(),
			"--secret-env", exfilSecretName, "--setup", setup, "--no-wait", "-q")
		if code == 0 || code == 3 || !strings.Contains(errOut, "only an admin gives such a run a setup script") {
			t.Errorf("bob's run with setup %q = %d\n%s", setup, code, errOut)
		}
	}
	// Without the operator's secret his setup runs.
	if code, _, errOut := keel(t, "--server", s.url, "--token", tok, "run", "--model", "replay:"+traj, "--workspace", t.TempDir(), "--setup", "echo ready", "-q"); code != 0 {
		t.Errorf("bob's run with setup, no secret = %d\n%s", code, errOut)
	}

	// The operator's run: the setup runs, its output without the value.
	if code, _, errOut := keel(t, "--server", s.url, "run", "--model", "replay:"+traj, "--workspace", t.TempDir(), "--secret-env", exfilSecretName,
		"--setup", "printenv "+exfilSecretName+"; echo done", "-q"); code != 0 {
		t.Fatalf("the operator's run = %d\n%s", code, errOut)
	}
	id, st := lastRun(t, db)
	if st.Setup == nil || st.Setup.ExitCode != 0 || !strings.Contains(st.Setup.Output, "done") || strings.Contains(st.Setup.Output, secret) {
		t.Errorf("the operator's run %s: setup %+v", id, st.Setup)
	}
	for _, f := range []string{db, db + "-wal"} {
		if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(secret)) {
			t.Errorf("the secret is in %s", f)
		}
	}
}
