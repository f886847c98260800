package cli_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/cli"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/journal"
)

// The just-in-time authorization scenario end to end, on the real
// zitadel OP: an assistant agent's run calls http_request for a
// provider's resource nobody authorized yet, and pauses in an
// auth.required wait; keel auth waits lists it; keel auth connect --run
// runs authorization code + PKCE through a loopback redirect (the login
// done as a browser would); keel runs resume runs the same call, whose
// request the resource server accepts after introspecting the token at
// the OP; the run completes. Canary: no token the OP issued appears in
// the database files, any output or the workspace.
func TestAuthConnectResumesWaitingRun(t *testing.T) {
	db := setup(t)
	ctx := t.Context()
	ws := t.TempDir()
	op := oauthtest.Start(t)
	var mu sync.Mutex
	var presented []string
	rs := httptest.NewServer(op.ResourceServer(func(w http.ResponseWriter, r *http.Request, in *oauthtest.Introspection) {
		mu.Lock()
		presented = append(presented, r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprintf(w, `{"profile":"ann","scope":%q,"echo":%q}`, in.Scope, r.Header.Get("Authorization"))
	}))
	defer rs.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(rs.URL, "http://"))
	base := "http://localhost:" + port
	var outputs bytes.Buffer
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := keel(t, args...) // the journal is $KEEL_HOME/keel.db
		outputs.WriteString(out + errOut)
		if code != want {
			t.Fatalf("keel %s = %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out
	}
	run(0, "auth", "key", "generate")
	run(0, "auth", "providers", "add", "op", "--issuer", op.Issuer, "--client-id", oauthtest.NativeClient,
		"--scope", "openid", "--scope", "offline_access", "--resource", base+"/api")
	run(0, "agents", "create", "helper", "--kind", "assistant")
	traj := writeTrajectory(t, "read my profile",
		[]fcall{{"http_request", map[string]any{"url": base + "/api/me"}}},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo ok")},
	)
	run(3, "run", "--model", "replay:"+traj, "--workspace", ws, "--allow-host", "localhost:"+port,
		"--agent", "helper", "--on-behalf-of", "ann", "-q")
	id, st := lastRun(t, db)
	if st.Status != journal.StatusPaused || len(st.PendingAuths()) != 1 {
		t.Fatalf("run %s: status %s, waits %+v", id, st.Status, st.PendingAuths())
	}
	w := st.PendingAuths()[0]
	if w.Provider != "op" || w.Agent != "helper" || w.User != "ann" || w.Reason != "missing" {
		t.Fatalf("auth.required = %+v", w)
	}
	if out := run(0, "auth", "waits"); !strings.Contains(out, "keel auth connect --run "+id) {
		t.Errorf("auth waits = %q", out)
	}

	// keel auth connect --run ID, in this process, answered by a login.
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	var connErr bytes.Buffer
	go func() {
		done <- cli.Main(ctx, []string{"auth", "connect", "--run", id}, pw, &connErr)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var authURL string
	for sc.Scan() {
		line := sc.Text()
		outputs.WriteString(line + "\n")
		if u, ok := strings.CutPrefix(strings.TrimSpace(line), "http://"); ok && authURL == "" {
			authURL = "http://" + u
			cb, err := oauthtest.Login(ctx, authURL, op.User(), oauthtest.Password)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.Get(cb.String())
			if err != nil {
				t.Fatal(err)
			}
			page, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			outputs.Write(page)
			if resp.StatusCode != 200 {
				t.Fatalf("callback answered %s: %s", resp.Status, page)
			}
		}
	}
	if code := <-done; code != 0 {
		t.Fatalf("auth connect = %d: %s", code, connErr.String())
	}
	outputs.WriteString(connErr.String())
	if authURL == "" {
		t.Fatal("auth connect printed no URL")
	}
	if out := run(0, "auth", "list"); !strings.Contains(out, "helper") || !strings.Contains(out, "ann") || !strings.Contains(out, "active") {
		t.Errorf("auth list = %q", out)
	}
	run(0, "runs", "resume", id, "-q")
	st, evs := loadRun(t, db, id)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("after connect and resume: %s %+v", st.Status, st.Ended)
	}
	c := st.Turns[0].Calls[0]
	if c.Finished == nil || c.Finished.IsError || !strings.Contains(c.Finished.Content, `"scope":"offline_access openid"`) || c.Attempts != 1 {
		t.Fatalf("the http_request call: %+v (attempts %d)", c.Finished, c.Attempts)
	}
	if !strings.Contains(c.Finished.Content, "[REDACTED]") {
		t.Errorf("the echoed token was not redacted: %s", c.Finished.Content)
	}
	var resolved int
	for _, e := range evs {
		if e.Type == journal.AuthResolved {
			resolved++
		}
	}
	if resolved != 1 || len(presented) != 1 {
		t.Errorf("auth.resolved events %d, requests with a token %d; want 1 and 1", resolved, len(presented))
	}
	checkOneResultPerCall(t, st)
	_ = agent.AuthResolved{}
	// keel audit calls: who made the external call, for whom, with which
	// scopes, under which decision.
	out := run(0, "audit", "calls", "--user", "ann")
	for _, want := range []string{id, c.ID, "helper", "ann", "op", "GET " + base + "/api/me", "offline_access openid", "allow", "ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit calls lacks %q:\n%s", want, out)
		}
	}

	// Canary: every token the OP issued, searched everywhere Keel writes.
	issued := op.Issued()
	if len(issued) < 2 {
		t.Fatalf("the OP issued %d tokens", len(issued))
	}
	hay := map[string][]byte{"outputs": outputs.Bytes()}
	for _, f := range []string{db, db + "-wal", db + "-shm"} {
		if b, err := os.ReadFile(f); err == nil {
			hay[f] = b
		}
	}
	filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			hay[p] = b
		}
		return nil
	})
	filepath.WalkDir(os.Getenv("KEEL_HOME"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.HasPrefix(p, db) {
			b, _ := os.ReadFile(p)
			hay[p] = b
		}
		return nil
	})
	hits := 0
	for _, tok := range issued {
		for where, b := range hay {
			if bytes.Contains(b, []byte(tok)) {
				hits++
				t.Errorf("a token the OP issued (%d bytes) is in %s", len(tok), where)
			}
		}
	}
	t.Logf("canary: %d tokens searched in %d files and the outputs: %d hits", len(issued), len(hay)-1, hits)
}

// A missing or wrong vault key is a clear error that decrypts and loses
// nothing; listings work without a key.
func TestAuthVaultKeyErrors(t *testing.T) {
	setup(t)
	op := oauthtest.Start(t)
	code, _, errOut := keel(t, "auth", "providers", "add", "svc", "--issuer", op.Issuer, "--client-id", oauthtest.ServiceClient,
		"--client-secret-file", writeFile(t, oauthtest.ServiceSecret), "--resource", "http://svc.test/")
	if code == 0 || !strings.Contains(errOut, "keel auth key generate") {
		t.Fatalf("providers add with a secret and no key = %d: %s", code, errOut)
	}
	if code, _, errOut := keel(t, "auth", "key", "generate"); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := keel(t, "auth", "providers", "add", "svc", "--issuer", op.Issuer, "--client-id", oauthtest.ServiceClient,
		"--client-secret-file", writeFile(t, oauthtest.ServiceSecret), "--resource", "http://svc.test/"); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := keel(t, "auth", "token", "--agent", "keel-cli", "--audience", "http://svc.test/"); code != 0 {
		t.Fatalf("auth token = %d: %s", code, errOut)
	}
	// Another key: issuing fails clearly, listing still works, and with
	// the right key back everything is there.
	other := writeFile(t, string(credential.GenerateKey()))
	t.Setenv("KEEL_VAULT_KEY_FILE", other)
	code, _, errOut = keel(t, "auth", "token", "--agent", "keel-cli", "--audience", "http://svc.test/")
	if code == 0 || !strings.Contains(errOut, "does not open") || !strings.Contains(errOut, "nothing was decrypted") {
		t.Errorf("auth token with a wrong key = %d: %s", code, errOut)
	}
	if code, out, errOut := keel(t, "auth", "providers", "list"); code != 0 || !strings.Contains(out, "svc") {
		t.Errorf("providers list with a wrong key = %d: %s%s", code, out, errOut)
	}
	t.Setenv("KEEL_VAULT_KEY_FILE", "")
	if code, _, errOut := keel(t, "auth", "token", "--agent", "keel-cli", "--audience", "http://svc.test/"); code != 0 {
		t.Errorf("auth token with the right key again = %d: %s", code, errOut)
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
