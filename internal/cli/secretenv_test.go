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
