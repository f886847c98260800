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
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/keel-run/keel/internal/cli"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
)

// authConnect runs keel auth connect ARGS in this process and answers
// its authorization URL with a login at op, as a browser would.
func authConnect(t *testing.T, op *oauthtest.OP, outputs *bytes.Buffer, args ...string) string {
	t.Helper()
	ctx := t.Context()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		done <- cli.Main(ctx, append([]string{"auth", "connect"}, args...), pw, &errOut)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var all strings.Builder
	authURL := ""
	for sc.Scan() {
		line := sc.Text()
		all.WriteString(line + "\n")
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
			all.Write(page)
			if resp.StatusCode != 200 {
				t.Fatalf("callback answered %s: %s", resp.Status, page)
			}
		}
	}
	if code := <-done; code != 0 {
		t.Fatalf("auth connect %v = %d: %s", args, code, errOut.String())
	}
	outputs.WriteString(all.String() + errOut.String())
	if authURL == "" {
		t.Fatal("auth connect printed no URL")
	}
	return authURL
}

// A run's streamable-HTTP MCP server that answers 401 is authorized
// through the vault, end to end on a real MCP server (the Go SDK's)
// behind the real zitadel OP: the first run finds no grant and no pinned
// tools and says what to authorize (its provider registered from the
// server's metadata); after keel auth connect the next run calls the tool
// with the vault's token; after a revocation a third run's call waits
// (auth.required) with the tools the previous run pinned, keel auth waits
// lists it, keel auth connect --run ends it, and keel runs resume
// completes the run. Canary: no token the OP issued is in the journal,
// any output, KEEL_HOME or the workspace.
func TestMCPServerAuthorizedThroughVault(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	op := oauthtest.Start(t)
	srv := oauthtest.StartMCP(t, op)
	home := os.Getenv("KEEL_HOME")
	os.WriteFile(filepath.Join(home, "config.toml"), []byte(`
[[mcp.servers]]
name = "tickets"
url = "`+srv.URL+`"
client_id = "`+oauthtest.NativeClient+`"
scopes = ["openid", "offline_access"]
`), 0o600)
	var outputs bytes.Buffer
	run := func(want int, args ...string) (string, string) {
		t.Helper()
		code, out, errOut := keel(t, args...)
		outputs.WriteString(out + errOut)
		if code != want {
			t.Fatalf("keel %s = %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out, errOut
	}
	run(0, "auth", "key", "generate")
	traj := writeTrajectory(t, "who am I at the ticket system?",
		[]fcall{{"tickets__whoami", map[string]any{}}},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo ok")},
	)
	runArgs := []string{"run", "--model", "replay:" + traj, "--workspace", ws, "--allow-host", srv.Host, "-q"}

	// 1. First contact: no grant, no pins.
	_, errOut := run(1, runArgs...)
	if !strings.Contains(errOut, "keel auth connect mcp-tickets --agent keel-cli") {
		t.Fatalf("first run without a grant:\n%s", errOut)
	}
	if out, _ := run(0, "auth", "providers", "list"); !strings.Contains(out, "mcp-tickets") || !strings.Contains(out, srv.URL) {
		t.Errorf("providers list:\n%s", out)
	}

	// 2. Authorized: the run calls the tool with the vault's token.
	authConnect(t, op, &outputs, "mcp-tickets")
	run(0, runArgs...)
	id, st := lastRun(t, db)
	c := st.Turns[0].Calls[0]
	if st.Status != journal.StatusCompleted || c.Finished == nil || c.Finished.IsError || !strings.Contains(c.Finished.Content, "you are ") {
		t.Fatalf("run %s: %s, call %+v", id, st.Status, c.Finished)
	}
	if out, _ := run(0, "audit", "calls"); !strings.Contains(out, "mcp-tickets") || !strings.Contains(out, c.ID) {
		t.Errorf("audit calls lacks the MCP call:\n%s", out)
	}

	// 3. Revoked: the next run's call waits with the pinned tools.
	run(0, "auth", "revoke", "--agent", "keel-cli")
	run(3, runArgs...)
	id, st = lastRun(t, db)
	if st.Status != journal.StatusPaused || len(st.PendingAuths()) != 1 {
		t.Fatalf("run %s: %s, waits %+v", id, st.Status, st.PendingAuths())
	}
	w := st.PendingAuths()[0]
	if w.Provider != "mcp-tickets" || w.Tool != "tickets__whoami" || w.Resource != srv.URL || w.Reason != "revoked" {
		t.Fatalf("auth.required = %+v", w)
	}
	if out, _ := run(0, "auth", "waits"); !strings.Contains(out, "keel auth connect --run "+id) {
		t.Errorf("auth waits:\n%s", out)
	}
	requests := srv.Requests()
	authConnect(t, op, &outputs, "--run", id)
	run(0, "runs", "resume", id, "-q")
	st, _ = loadRun(t, db, id)
	c = st.Turns[0].Calls[0]
	if st.Status != journal.StatusCompleted || c.Finished == nil || c.Finished.IsError || c.Attempts != 1 {
		t.Fatalf("after connect and resume: %s, call %+v (attempts %d)", st.Status, c.Finished, c.Attempts)
	}
	if srv.Requests() == requests {
		t.Error("the resumed call did not reach the server")
	}
	checkOneResultPerCall(t, st)

	// Canary.
	issued := op.Issued()
	if len(issued) < 4 {
		t.Fatalf("the OP issued %d tokens", len(issued))
	}
	hay := map[string][]byte{"outputs": outputs.Bytes()}
	for _, root := range []string{home, ws} {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				b, _ := os.ReadFile(p)
				hay[p] = b
			}
			return nil
		})
	}
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

// SQL as the end user through the CLI, on a real PostgreSQL 15 with
// row-level security: an assistant agent's run acting for ann waits for
// ann's database credential (auth.required, listed by keel auth waits
// with the command that ends it); keel auth secret set stores it sealed
// and ends the wait; the resumed call runs as ann's role and sees only
// her rows. Canary: the password is in no journal file, output, KEEL_HOME
// file or the workspace.
func TestSQLAsEndUserThroughVault(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	dsn := testenv.Postgres(t)
	pg, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	du, _ := url.Parse(dsn)
	role := "ann_" + strings.TrimPrefix(du.Path, "/")
	for _, q := range []string{
		`CREATE TABLE orders (id int PRIMARY KEY, owner text, total int)`,
		`INSERT INTO orders SELECT g, CASE WHEN g % 4 = 0 THEN 'someone' ELSE '` + role + `' END, g FROM generate_series(1, 800) g`,
		`ALTER TABLE orders ENABLE ROW LEVEL SECURITY`,
		`CREATE POLICY own ON orders USING (owner = current_user)`,
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT SELECT ON orders TO ` + role,
	} {
		if _, err := pg.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	pg.Close(t.Context())
	home := os.Getenv("KEEL_HOME")
	os.WriteFile(filepath.Join(home, "config.toml"), []byte(`
[[sql.databases]]
name = "shop"
dsn = "`+dsn+`"
as_user = true
max_rows = 20
`), 0o600)
	var outputs bytes.Buffer
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := keel(t, args...)
		outputs.WriteString(out + errOut)
		if code != want {
			t.Fatalf("keel %s = %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out
	}
	run(0, "auth", "key", "generate")
	run(0, "agents", "create", "helper", "--kind", "assistant")
	traj := writeTrajectory(t, "how many orders do I have?",
		[]fcall{{"shop__sql_query", map[string]any{"sql": "SELECT current_user AS who, count(*) AS n FROM orders"}}},
		[]fcall{{"shop__sql_query", map[string]any{"sql": "SELECT * FROM orders"}}},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo ok")},
	)
	run(3, "run", "--model", "replay:"+traj, "--workspace", ws, "--agent", "helper", "--on-behalf-of", "ann", "-q")
	id, st := lastRun(t, db)
	if len(st.PendingAuths()) != 1 || st.PendingAuths()[0].Provider != "sql:shop" {
		t.Fatalf("run %s: %s, waits %+v", id, st.Status, st.PendingAuths())
	}
	if out := run(0, "auth", "waits"); !strings.Contains(out, "keel auth secret set sql:shop --agent helper --user ann") {
		t.Errorf("auth waits:\n%s", out)
	}
	u := *du
	u.User = url.UserPassword(role, "pw-canary-4711")
	secret := filepath.Join(t.TempDir(), "ann.dsn")
	os.WriteFile(secret, []byte(u.String()+"\n"), 0o600)
	if out := run(0, "auth", "secret", "set", "sql:shop", "--agent", "helper", "--user", "ann", "--file", secret); !strings.Contains(out, "1 waiting call") {
		t.Errorf("secret set:\n%s", out)
	}
	if out := run(0, "auth", "secret", "list"); !strings.Contains(out, "sql:shop") || !strings.Contains(out, "ann") {
		t.Errorf("secret list:\n%s", out)
	}
	run(0, "runs", "resume", id, "-q")
	st, _ = loadRun(t, db, id)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("after the secret: %s", st.Status)
	}
	who, all := st.Turns[0].Calls[0].Finished, st.Turns[1].Calls[0].Finished
	if who == nil || !strings.Contains(who.Content, role+"\t600") {
		t.Errorf("as ann: %+v", who)
	}
	if all == nil || !strings.Contains(all.Content, "more than 20 rows") {
		t.Errorf("row cap: %+v", all)
	}
	hay := map[string][]byte{"outputs": outputs.Bytes()}
	for _, root := range []string{home, ws} {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				b, _ := os.ReadFile(p)
				hay[p] = b
			}
			return nil
		})
	}
	for where, b := range hay {
		if bytes.Contains(b, []byte("pw-canary-4711")) {
			t.Errorf("the password is in %s", where)
		}
	}
	t.Logf("canary: %d files and the outputs searched", len(hay)-1)
}

// An OpenAPI operation's token comes from the vault, end to end: the
// run's call of a provider's API waits (auth.required) until keel auth
// connect --run, then keel runs resume makes the request with the
// grant's token, which the API checks by introspection at the real OP.
func TestOpenAPITokenFromVault(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	op := oauthtest.Start(t)
	presented := 0
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/openapi.json" {
			w.Write([]byte(`{"openapi":"3.0.3","info":{"title":"profiles","version":"1"},"servers":[{"url":"/"}],
"paths":{"/api/me":{"get":{"operationId":"getMe","responses":{"200":{"description":"ok"}}}}}}`))
			return
		}
		op.ResourceServer(func(w http.ResponseWriter, r *http.Request, in *oauthtest.Introspection) {
			presented++
			fmt.Fprintf(w, `{"profile":"ann","scope":%q}`, in.Scope)
		}).ServeHTTP(w, r)
	}))
	defer api.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(api.URL, "http://"))
	base := "http://localhost:" + port
	var outputs bytes.Buffer
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := keel(t, args...)
		outputs.WriteString(out + errOut)
		if code != want {
			t.Fatalf("keel %s = %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out
	}
	run(0, "auth", "key", "generate")
	run(0, "auth", "providers", "add", "profiles", "--issuer", op.Issuer, "--client-id", oauthtest.NativeClient,
		"--scope", "openid", "--resource", base+"/api")
	traj := writeTrajectory(t, "read my profile",
		[]fcall{{"profiles__getMe", map[string]any{}}},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo ok")},
	)
	run(3, "run", "--model", "replay:"+traj, "--workspace", ws, "--allow-host", "localhost:"+port,
		"--openapi", "profiles="+base+"/openapi.json", "-q")
	id, st := lastRun(t, db)
	if len(st.PendingAuths()) != 1 || st.PendingAuths()[0].Provider != "profiles" || presented != 0 {
		t.Fatalf("run %s: %s, waits %+v, requests with a token %d", id, st.Status, st.PendingAuths(), presented)
	}
	authConnect(t, op, &outputs, "--run", id)
	run(0, "runs", "resume", id, "-q")
	st, _ = loadRun(t, db, id)
	c := st.Turns[0].Calls[0]
	if st.Status != journal.StatusCompleted || c.Finished == nil || c.Finished.IsError || !strings.Contains(c.Finished.Content, `"scope":"openid"`) || presented != 1 {
		t.Fatalf("after connect and resume: %s, %+v, requests with a token %d", st.Status, c.Finished, presented)
	}
	if out := run(0, "audit", "calls"); !strings.Contains(out, "profiles") || !strings.Contains(out, c.ID) {
		t.Errorf("audit calls:\n%s", out)
	}
	for _, tok := range op.Issued() {
		b, _ := os.ReadFile(db)
		w, _ := os.ReadFile(db + "-wal")
		if bytes.Contains(b, []byte(tok)) || bytes.Contains(w, []byte(tok)) || bytes.Contains(outputs.Bytes(), []byte(tok)) {
			t.Error("a token is in the journal or an output")
		}
	}
}
