package cli_test

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
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
// name the server offers: the sandbox holds a placeholder, and the
// server's egress proxy puts the server's value in for that host only.
// A name the server does not offer, and a host the run does not allow,
// are refused.
func TestServerSecretForHost(t *testing.T) {
	db := setup(t)
	api := newHostSecretAPI(t)
	t.Setenv("KEEL_DEBUG", "egress_roots="+api.roots)
	secret := canary(t, "kcH")
	t.Setenv(exfilSecretName, secret)
	t.Setenv("NOT_OFFERED", "kcN-not-offered-value")
	s := startServe(t, "--secret-env", exfilSecretName)
	traj := writeTrajectory(t, "call the API", []fcall{sh(`curl -q -s -H "Authorization: Bearer $` + exfilSecretName + `" https://` + api.host + `/v1/me; echo; echo "$` + exfilSecretName + `"`)}, nil)
	run := func(extra ...string) (int, string, string) {
		return keel(t, append([]string{"--server", s.url, "run", "--model", "replay:" + traj, "--workspace", t.TempDir(), "--no-wait", "-q"}, extra...)...)
	}
	if code, _, errOut := run("--allow-host", api.host, "--secret-for-host", "NOT_OFFERED="+api.host); code == 0 || !strings.Contains(errOut, "does not offer") {
		t.Errorf("a secret the server does not offer: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := run("--secret-for-host", exfilSecretName+"="+api.host); code == 0 || !strings.Contains(errOut, "not in the run's network allowlist") {
		t.Errorf("a host the run does not allow: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := run("--allow-host", api.host, "--secret-for-host", exfilSecretName+"="+api.host, "--secret-in-body", "OTHER"); code != 2 || !strings.Contains(errOut, "want the NAME of a --secret-for-host") {
		t.Errorf("--secret-in-body of no --secret-for-host: exit %d\n%s", code, errOut)
	}
	code, out, errOut := run("--allow-host", api.host, "--secret-for-host", exfilSecretName+"="+api.host, "--secret-in-body", exfilSecretName)
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
