package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/cli"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
)

// headerLog is a fake server that records the Authorization headers it
// receives.
type headerLog struct {
	mu   sync.Mutex
	auth []string
}

func (h *headerLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.auth = append(h.auth, r.Header.Get("Authorization"))
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"runs":[]}`))
}

// The token keel serve saves is bound to that server's URLs: the command
// line never sends it to another server (nor does it send a token saved
// in the old, unbound form); a restart binds it to the new address.
func TestSavedTokenGoesOnlyToItsServer(t *testing.T) {
	setup(t)
	s := startServe(t)
	file := filepath.Join(os.Getenv("KEEL_HOME"), "server-token")
	var saved struct {
		Servers []string `json:"servers"`
		Token   string   `json:"token"`
	}
	b, err := os.ReadFile(file)
	if err != nil || json.Unmarshal(b, &saved) != nil || len(saved.Servers) == 0 || saved.Servers[0] != s.url {
		t.Fatalf("server-token = %s (%v), want the token bound to %s", b, err, s.url)
	}
	fake := &headerLog{}
	other := httptest.NewServer(fake)
	defer other.Close()
	code, _, errOut := keel(t, "--server", other.URL, "runs", "list")
	if code != 2 || !strings.Contains(errOut, "is for "+s.url) {
		t.Errorf("another server: exit %d, %q", code, errOut)
	}
	if code, _, errOut := keel(t, "--server", s.url, "runs", "list"); code != 0 {
		t.Errorf("its own server: exit %d, %q", code, errOut)
	}
	port := s.url[strings.LastIndex(s.url, ":")+1:]
	if code, _, errOut := keel(t, "--server", "http://localhost:"+port+"/", "runs", "list"); code != 0 {
		t.Errorf("its own server as localhost: exit %d, %q", code, errOut)
	}
	// The old form (the token alone) goes nowhere.
	if err := os.WriteFile(file, []byte(saved.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = keel(t, "--server", other.URL, "runs", "list")
	if code != 2 || !strings.Contains(errOut, "bound to no server") {
		t.Errorf("an unbound saved token: exit %d, %q", code, errOut)
	}
	// An explicit token is the person's choice.
	if code, _, _ := keel(t, "--server", other.URL, "--token", "keel_mine_x", "runs", "list"); code != 0 {
		t.Errorf("--token to another server: exit %d", code)
	}
	fake.mu.Lock()
	for _, a := range fake.auth {
		if strings.Contains(a, saved.Token) {
			t.Errorf("the saved admin token reached another server: %q", a)
		}
	}
	fake.mu.Unlock()
	// A restart (on another port) binds the saved token to it.
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := startServe(t)
	if code, _, errOut := keel(t, "--server", s2.url, "runs", "list"); code != 0 {
		t.Errorf("after a restart on %s: exit %d, %q", s2.url, code, errOut)
	}
}

// Commands without a server form say so with --server instead of quietly
// working on (and creating) a local journal.
func TestUnsupportedCommandsWithServer(t *testing.T) {
	db := setup(t)
	fake := httptest.NewServer(&headerLog{})
	defer fake.Close()
	for _, args := range [][]string{
		{"audit", "export", "01run"},
		{"runs", "tokens", "01run"},
		{"runs", "handoff", "01run"},
		{"runs", "compare", "01run", trajectory},
		{"sandbox", "info"},
		{"eval", "report", "e1"},
		{"eval", "compare", "e1", "e2"},
		{"eval", "freeze", "01run", "-o", "case"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, _, errOut := keel(t, append([]string{"--server", fake.URL, "--token", "keel_x_y"}, args...)...)
			if code != 2 || !strings.Contains(errOut, "not supported with --server") {
				t.Errorf("exit %d, %q", code, errOut)
			}
			t.Setenv("KEEL_SERVER", fake.URL)
			if code, _, errOut := keel(t, args...); code != 2 || !strings.Contains(errOut, "not supported with --server") {
				t.Errorf("with KEEL_SERVER: exit %d, %q", code, errOut)
			}
		})
	}
	if _, err := os.Stat(db); err == nil {
		t.Errorf("a local journal %s was created", db)
	}
	// --db names a local journal: with --server it is refused, not
	// silently ignored (fresh-user report 13, P16).
	if code, _, errOut := keel(t, "--server", fake.URL, "--token", "keel_x_y", "runs", "list", "--db", filepath.Join(t.TempDir(), "nope.db")); code != 2 || !strings.Contains(errOut, "--db cannot be used") {
		t.Errorf("runs list --db with --server: exit %d, %q", code, errOut)
	}
	// Commands that touch no journal still work.
	if code, out, _ := keel(t, "--server", fake.URL, "policy", "default"); code != 0 || !strings.Contains(out, "[[tests]]") && !strings.Contains(out, "permit") {
		t.Errorf("policy default with --server: exit %d", code)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A client-mode run prints what a local one prints: the history is known
// (tool names, step numbers go on after an approval), and the hints name
// the server (keel --server URL approve ...), which anyone with an
// approvals:write token may use.
func TestClientOutputLikeLocal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	s := startServe(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() { done <- cli.Main(ctx, []string{"--server", s.url, "demo", "--wait"}, &out, &errOut) }()
	hint := "approve: keel --server " + s.url + " approve "
	for !strings.Contains(errOut.String(), hint) {
		select {
		case code := <-done:
			t.Fatalf("keel --server demo exited %d before waiting:\n%s", code, errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, bad := range []string{"any process sharing the journal", "approve: keel approve"} {
		if strings.Contains(errOut.String(), bad) {
			t.Errorf("the wait hint says %q:\n%s", bad, errOut.String())
		}
	}
	c := s.apiClient(t)
	list, err := c.Approvals(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("Approvals() = %v, %v", list, err)
	}
	if _, err := c.Approve(ctx, list[0].RunID, list[0].CallID, nil); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("keel --server demo = %d\n%s", code, errOut.String())
	}
	// A second demo, approved with the command line: its output goes on
	// from the history.
	run, err := c.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	untilStopped(t, c, run.ID, 1)
	code, _, stderr := keel(t, "--server", s.url, "approve", run.ID, "demo_4")
	if code != 0 {
		t.Fatalf("keel --server approve = %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "  edit_file textstats.py") || !strings.Contains(stderr, "step 4") || strings.Contains(stderr, "step 1 ") {
		t.Errorf("approve's output does not go on from the history:\n%s", stderr)
	}
}

// With --server, a create that the server cannot set up fails at once
// with the reason (never a run that hangs "running"), and the server's
// errors name no flag of the server process and none of its files.
func TestClientRunRefusedAtCreate(t *testing.T) {
	setup(t)
	s := startServe(t)
	ws := t.TempDir()
	home := os.Getenv("KEEL_HOME")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"mount path /", []string{"--mount-path", "/"}, "mount path"},
		{"mount path /etc", []string{"--mount-path", "/etc"}, "/etc"},
		{"an address in an unusual notation to reach", []string{"--allow-host", "0x7f.1:8437"}, "0x7f.1"},
		{"a workspace holding the journal", []string{"--workspace", filepath.Dir(home)}, "the server's own files"},
		{"the server's home", []string{"--workspace", home}, "the server's own files"},
		{"no model", []string{"--model", ""}, "no model"},
		{"no API key", []string{"--model", "openai:gpt-4o"}, "no API key for openai"},
		{"an unreadable recording", []string{"--model", "replay:/etc/shadow"}, "not available on this server"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--server", s.url, "run", "--model", "scripted:demo", "--workspace", ws, "--no-wait"}, tt.args...)
			start := time.Now()
			code, _, errOut := keel(t, append(args, "task")...)
			// 2 for a request the server refuses as invalid (as keel
			// run says it locally), 1 for one it cannot set up.
			if code != 1 && code != 2 || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, %q; want 1 or 2 saying %q", code, errOut, tt.want)
			}
			for _, leak := range []string{"--api-key", "--model", "config.toml", "--db", "invalid character", "bad JSON"} {
				if strings.Contains(errOut, leak) {
					t.Errorf("the error names %q: %s", leak, errOut)
				}
			}
			if time.Since(start) > 30*time.Second {
				t.Errorf("took %s", time.Since(start))
			}
		})
	}
	runs, err := s.apiClient(t).Runs(t.Context(), nil)
	if err != nil || len(runs) != 0 {
		t.Errorf("refused creates left runs: %v, %v", runs, err)
	}
}

// keel --server run works for a token with only runs:write (bound to an
// agent): it can follow the run it made.
func TestClientRunWithWriteOnlyToken(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	s := startServe(t)
	code, tok, errOut := keel(t, "--server", s.url, "tokens", "create", "--name", "wendy", "--scope", "runs:write", "--agent", "keel-cli")
	if code != 0 {
		t.Fatalf("tokens create = %d %s", code, errOut)
	}
	code, _, errOut = keel(t, "--server", s.url, "--token", strings.TrimSpace(tok), "run", "--model", "scripted:demo", "--workspace", demoProject(t), "fix it")
	if code != 0 || !strings.Contains(errOut, "completed (answer)") {
		t.Errorf("a runs:write token's run = %d\n%s", code, errOut)
	}
	code, _, errOut = keel(t, "tokens", "create", "--name", "eve\x1b[2K\rroot", "--scope", "runs:read")
	if code != 2 || !strings.Contains(errOut, "control or invisible") {
		t.Errorf("a token name with control characters: %d %q", code, errOut)
	}
	code, out, _ := keel(t, "--server", s.url, "tokens", "list")
	if code != 0 || !strings.Contains(out, "AGENTS") || !strings.Contains(out, "keel-cli") {
		t.Errorf("tokens list:\n%s", out)
	}
}

// Listening on every interface prints a URL a browser can open and warns
// that the traffic is plain HTTP; without workspace roots serve says how
// to name one; [serve] workspace_roots in config.toml names them too.
func TestServeAddressAndRoots(t *testing.T) {
	setup(t)
	s := startServeArgs(t, "serve", "--addr", "0.0.0.0:0", "--workers", "1")
	if !strings.HasPrefix(s.url, "http://127.0.0.1:") {
		t.Errorf("listening URL %s, want http://127.0.0.1:PORT", s.url)
	}
	for _, want := range []string{"WARNING", "plain HTTP", "no workspace roots", "--workspace-root DIR"} {
		if !strings.Contains(s.stderr.String(), want) {
			t.Errorf("serve's output lacks %q:\n%s", want, s.stderr)
		}
	}
	if strings.Contains(s.stderr.String(), "[::]") || strings.Contains(s.stderr.String(), "?token=") {
		t.Errorf("serve printed an unusable URL or a token in a link:\n%s", s.stderr)
	}
	// One server per SQLite journal (TestSecondServeOnSQLiteRefused).
	s.cmd.Process.Kill()
	<-s.done
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(os.Getenv("KEEL_HOME"), "config.toml"), []byte("[serve]\nworkspace_roots = [\""+root+"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := startServeArgs(t, "serve", "--addr", "127.0.0.1:0", "--workers", "1")
	if !strings.Contains(s2.stderr.String(), "workspace roots: "+root) || strings.Contains(s2.stderr.String(), "WARNING") {
		t.Errorf("serve with [serve] workspace_roots:\n%s", s2.stderr)
	}
}

// Approvals whose action reorders or hides text are listed with those
// characters escaped, locally and through the server alike.
func TestApprovalsListShowsHiddenCharacters(t *testing.T) {
	db := setup(t)
	s := startServe(t)
	store, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rt := agent.NewRuntime(store, nil)
	cmd := "rm -rf ./data \u202e# pmt eht naelc\u202c"
	id, err := rt.Create(t.Context(), &agent.RunCreated{Task: "t", Model: "scripted:demo", Workspace: t.TempDir(), MountPath: "/workspace", Principal: "keel-cli"})
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]string{"command": cmd})
	part := policy.Part{Text: cmd, Effect: policy.Ask, Reason: "asks"}
	var drafts []journal.Draft
	for _, v := range []struct {
		typ journal.Type
		p   any
	}{
		{journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "c1", Name: "bash", Arguments: string(args)}}}}},
		{journal.GateDecided, &agent.GateDecided{CallID: "c1", Tool: "bash", Decision: policy.Decision{Effect: policy.Ask, Parts: []policy.Part{part}}}},
		{journal.ApprovalRequested, &agent.ApprovalRequested{CallID: "c1", Tool: "bash", Arguments: args, Action: cmd, Parts: []policy.Part{part}}},
	} {
		b, _ := json.Marshal(v.p)
		drafts = append(drafts, journal.Draft{Type: v.typ, Time: time.Now(), Payload: b})
	}
	if _, err := store.Append(t.Context(), id, 1, drafts...); err != nil {
		t.Fatal(err)
	}
	_, local, _ := keel(t, "approvals", "list")
	_, remote, _ := keel(t, "--server", s.url, "approvals", "list")
	if local != remote {
		t.Errorf("local:\n%s\nremote:\n%s", local, remote)
	}
	if strings.ContainsAny(remote, "\u202e\u202c") || !strings.Contains(remote, `\u202e# pmt eht naelc\u202c`) {
		t.Errorf("approvals list shows the action raw:\n%s", remote)
	}
}

// Replay recordings come from the server's recording directories, by
// name, and a recording that changed on disk is read again (not served
// from a cache until the next restart).
func TestServeReplayRecordings(t *testing.T) {
	setup(t)
	first := writeTrajectory(t, "the first task", nil)
	dir := filepath.Dir(first)
	s := startServe(t, "--replay-dir", dir)
	code, tok, errOut := keel(t, "--server", s.url, "tokens", "create", "--name", "wendy", "--scope", "runs:write", "--agent", "keel-cli")
	if code != 0 {
		t.Fatalf("tokens create = %d %s", code, errOut)
	}
	c := s.clientWith(t, strings.TrimSpace(tok))
	ctx := t.Context()
	run, err := c.CreateRun(ctx, &api.CreateRun{Model: "replay:" + filepath.Base(first), Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if run.Task != "the first task" || run.Model != "replay:"+first {
		t.Errorf("run of the recording: task %q, model %q", run.Task, run.Model)
	}
	b, err := os.ReadFile(writeTrajectory(t, "the second, longer task", nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(first, b, 0o644); err != nil {
		t.Fatal(err)
	}
	run, err = c.CreateRun(ctx, &api.CreateRun{Model: "replay:" + filepath.Base(first), Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if run.Task != "the second, longer task" {
		t.Errorf("after the recording changed: task %q", run.Task)
	}
	outside := writeTrajectory(t, "elsewhere", nil)
	_, err = c.CreateRun(ctx, &api.CreateRun{Model: "replay:" + outside, Workspace: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "not one of this server's recordings") {
		t.Errorf("a recording outside the directories: %v", err)
	}
	// The operator's admin token finds recordings by name too, and may
	// name any path.
	admin := s.apiClient(t)
	run, err = admin.CreateRun(ctx, &api.CreateRun{Model: "replay:" + filepath.Base(first), Workspace: t.TempDir()})
	if err != nil || run.Model != "replay:"+first {
		t.Errorf("an admin's recording by name: %+v, %v", run, err)
	}
	if _, err := admin.CreateRun(ctx, &api.CreateRun{Model: "replay:" + outside, Workspace: t.TempDir()}); err != nil {
		t.Errorf("an admin's recording by path: %v", err)
	}
}

// After one of a run's two approvals is decided, the other is still
// listed, locally and through the server.
func TestApprovalsListAfterOneOfTwo(t *testing.T) {
	db := setup(t)
	store, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt := agent.NewRuntime(store, nil)
	id, err := rt.Create(t.Context(), &agent.RunCreated{Task: "t", Model: "scripted:demo", Workspace: t.TempDir(), MountPath: "/workspace", Principal: "keel-cli"})
	if err != nil {
		t.Fatal(err)
	}
	var calls []model.ToolCall
	for _, c := range []string{"c1", "c2"} {
		calls = append(calls, model.ToolCall{ID: c, Name: "bash", Arguments: `{"command":"echo ` + c + `"}`})
	}
	events := []struct {
		typ journal.Type
		p   any
	}{{journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: calls}}}}
	for _, c := range calls {
		part := policy.Part{Text: "echo " + c.ID, Command: "echo", Words: []string{"echo", c.ID}, Effect: policy.Ask, Reason: "asks"}
		events = append(events,
			struct {
				typ journal.Type
				p   any
			}{journal.GateDecided, &agent.GateDecided{CallID: c.ID, Tool: "bash", Decision: policy.Decision{Effect: policy.Ask, Parts: []policy.Part{part}}}},
			struct {
				typ journal.Type
				p   any
			}{journal.ApprovalRequested, &agent.ApprovalRequested{CallID: c.ID, Tool: "bash", Arguments: json.RawMessage(c.Arguments), Action: part.Text, Parts: []policy.Part{part}}})
	}
	var drafts []journal.Draft
	for _, v := range events {
		b, _ := json.Marshal(v.p)
		drafts = append(drafts, journal.Draft{Type: v.typ, Time: time.Now(), Payload: b})
	}
	if _, err := store.Append(t.Context(), id, 1, drafts...); err != nil {
		t.Fatal(err)
	}
	store.Close()
	if code, _, errOut := keel(t, "approve", id, "c1", "--no-resume"); code != 0 || !strings.Contains(errOut, "still waits for 1 more") {
		t.Fatalf("approve c1 = %d %s", code, errOut)
	}
	_, local, _ := keel(t, "approvals", "list")
	if !strings.Contains(local, "c2") || strings.Contains(local, "c1 ") {
		t.Errorf("local approvals list after deciding c1:\n%s", local)
	}
	s := startServe(t)
	_, remote, _ := keel(t, "--server", s.url, "approvals", "list")
	if remote != local {
		t.Errorf("with --server:\n%s\nlocally:\n%s", remote, local)
	}
}

// A run on a team server stopped by a limit says how to go on, and the
// command it prints works: the raised limit goes through the API, is
// journaled in run.resumed, and the run completes.
func TestClientLimitHintWorks(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	t.Run("server", func(t *testing.T) {
		setup(t)
		clientLimitHintWorks(t, startServe(t), false)
	})
	// keel serve --temporal: the server journals the resume with its
	// limits, and the worker's execution takes them from the journal.
	t.Run("temporal", func(t *testing.T) {
		setup(t)
		pg, tp := testenv.Postgres(t), testenv.Temporal(t)
		s := startServe(t, "--db", pg, "--temporal", tp)
		startWorker(t, "--db", pg, "--temporal", tp, "--workspace-root", os.TempDir(), "--workers", "2")
		clientLimitHintWorks(t, s, true)
	})
}

func clientLimitHintWorks(t *testing.T, s *serveProc, temporal bool) {
	code, _, errOut := keel(t, "--server", s.url, "run", "--model", "scripted:demo", "--workspace", demoProject(t), "--max-steps", "1", "fix it")
	var runID string
	limits := []string{}
	// Each hint doubles the limit; the demo needs a few steps more than
	// one, so follow the hints until it completes.
	for range 5 {
		if code == 0 {
			break
		}
		_, hint, ok := strings.Cut(errOut, "to go on, raise the limit: ")
		hint, _, _ = strings.Cut(hint, "\n")
		args := strings.Fields(hint)
		if code != 1 || !ok || len(args) != 8 || args[0] != "keel" || args[1] != "--server" || args[3] != "runs" || args[4] != "resume" || args[6] != "--max-steps" {
			t.Fatalf("exit %d, want 1 with a resume hint raising --max-steps:\n%s", code, errOut)
		}
		runID = args[5]
		limits = append(limits, args[7])
		code, _, errOut = keel(t, args[1:]...)
	}
	if code != 0 || !strings.Contains(errOut, "completed (answer)") || len(limits) == 0 {
		t.Fatalf("following the hints (limits %v) = %d, want the run completed\n%s", limits, code, errOut)
	}
	// Each change is journaled, naming the person, as a local resume's.
	var got []string
	for e, err := range s.apiClient(t).Events(t.Context(), runID, &client.EventsParams{NoFollow: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Type != journal.RunResumed {
			continue
		}
		p, err := agent.Decode(&e)
		if err != nil {
			t.Fatal(err)
		}
		r := p.(*agent.RunResumed)
		if temporal && r.Limits == nil && r.By == "" {
			continue // the worker's execution continuing the server's resume
		}
		if r.Limits == nil || r.By == "" {
			t.Errorf("run.resumed = %+v, want the new limits and the person", r)
			continue
		}
		got = append(got, strconv.Itoa(r.Limits.MaxSteps))
	}
	if strings.Join(got, " ") != strings.Join(limits, " ") {
		t.Errorf("journaled step limits %v, want %v", got, limits)
	}
}

// keel --server URL demo with stdin not a terminal (a script, </dev/null)
// stops at the demo's approval and exits 3 saying how to decide, as keel
// run does, instead of waiting for an answer nobody can give.
func TestClientDemoStdinNotTerminal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	s := startServe(t)
	code, out, errOut := keel(t, "--server", s.url, "demo")
	if code != 3 || !strings.Contains(errOut, "decide with: keel --server "+s.url+" approve ") {
		t.Fatalf("keel --server demo, stdin not a terminal = %d, want 3 with the approve hint\n%s", code, errOut)
	}
	// Its stdout is the local demo's: the timeline (fresh-user trial 8,
	// F4).
	for _, want := range []string{"== timeline (keel --server " + s.url + " runs show ", "approval.requested", "hash chain verified", "The model in this demo was scripted"} {
		if !strings.Contains(out, want) {
			t.Errorf("keel --server demo's stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "M textstats.py") {
		t.Errorf("a paused demo shows textstats.py changed:\n%s\nstderr:\n%s", out, errOut)
	}
}

// A journal beside the workspace root (/srv/keel.db and /srv/work) does
// not make the server refuse every workspace: only a workspace that holds
// the journal's files is refused. A workspace root inside Keel's home,
// where no run may work, is refused when the server starts, not at each
// run with a message about the journal.
func TestServeWorkspaceRootBesideJournal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	srv := t.TempDir()
	db, root := filepath.Join(srv, "keel.db"), filepath.Join(srv, "work")
	ws := filepath.Join(root, "proj")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := demo.WriteProject(ws); err != nil {
		t.Fatal(err)
	}
	s := startServeArgs(t, "serve", "--db", db, "--addr", "127.0.0.1:0", "--workers", "1", "--workspace-root", root, "--workspace-root", srv)
	code, _, errOut := keel(t, "--server", s.url, "run", "--model", "scripted:demo", "--workspace", ws, "fix it")
	if code != 0 || !strings.Contains(errOut, "completed (answer)") {
		t.Errorf("a run in %s with the journal at %s = %d\n%s", ws, db, code, errOut)
	}
	code, _, errOut = keel(t, "--server", s.url, "run", "--model", "scripted:demo", "--workspace", srv, "--no-wait", "fix it")
	if code != 2 || !strings.Contains(errOut, "holds the server's own files") {
		t.Errorf("a workspace holding the journal = %d %q, want 2, refused", code, errOut)
	}
	inHome := filepath.Join(os.Getenv("KEEL_HOME"), "work")
	if err := os.Mkdir(inHome, 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = keel(t, "serve", "--addr", "127.0.0.1:0", "--workspace-root", inHome)
	if code != 2 || !strings.Contains(errOut, "--workspace-root "+inHome+" is inside "+os.Getenv("KEEL_HOME")) {
		t.Errorf("serve with a workspace root inside KEEL_HOME = %d %q, want 2 saying why", code, errOut)
	}
}
