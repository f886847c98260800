package cli_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// bearer adds an API token to each request.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// mcpStatus is the JSON text of start_run, run_status and
// answer_approval.
type mcpStatus struct {
	RunID   string `json:"run_id"`
	Status  string `json:"status"`
	Output  string `json:"output"`
	Waiting []struct {
		CallID string `json:"call_id"`
		Tool   string `json:"tool"`
	} `json:"waiting_for_approval"`
}

// callText calls tool and returns its text and whether it is an error.
func callText(t *testing.T, s *sdk.ClientSession, tool string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := s.CallTool(t.Context(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if len(res.Content) == 0 {
		t.Fatalf("%s: no content", tool)
	}
	return res.Content[0].(*sdk.TextContent).Text, res.IsError
}

// keel serve offers Keel's MCP tools at /mcp (streamable HTTP) behind its
// tokens: the go-sdk client starts the demo run, sees it wait, approves,
// and sees it complete; without a token the endpoint answers 401; a
// read-only token reads but cannot start runs or decide.
func TestMCPServeOnServer(t *testing.T) {
	setup(t)
	serve := startServe(t)
	admin := serve.savedToken(t)
	connect := func(tok string) (*sdk.ClientSession, error) {
		c := sdk.NewClient(&sdk.Implementation{Name: "keel-test", Version: "1"}, nil)
		tr := &sdk.StreamableClientTransport{Endpoint: serve.url + "/mcp", HTTPClient: &http.Client{Transport: bearer(tok)}}
		if tok == "" {
			tr.HTTPClient = nil
		}
		return c.Connect(t.Context(), tr, nil)
	}
	if _, err := connect(""); err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
		t.Fatalf("connect without a token: %v", err)
	}
	resp, err := http.Post(serve.url+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("POST /mcp without a token = %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if _, err := connect("keel_not-a-token"); err == nil {
		t.Fatal("connect with a bad token succeeded")
	}

	s, err := connect(admin)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tools, err := s.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "answer_approval,answer_input,cancel_run,list_approvals,list_inputs,list_runs,resume_run,run_status,run_timeline,start_run" {
		t.Errorf("tools: %v", names)
	}
	text, isErr := callText(t, s, "start_run", map[string]any{"demo": true})
	var st mcpStatus
	if err := json.Unmarshal([]byte(text), &st); err != nil || isErr {
		t.Fatalf("start_run: %v %s", err, text)
	}
	if st.Status != "paused" || len(st.Waiting) != 1 || st.Waiting[0].Tool != "edit_file" {
		t.Fatalf("start_run: %s", text)
	}
	if text, _ := callText(t, s, "list_approvals", nil); !strings.Contains(text, st.Waiting[0].CallID) {
		t.Errorf("list_approvals: %s", text)
	}

	// A read-only token: reads, cannot decide.
	cl := serve.apiClient(t)
	ro, err := cl.CreateToken(t.Context(), &api.CreateToken{Name: "watcher", Scopes: []string{api.ScopeRunsRead}})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := connect(ro.Secret)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if text, isErr := callText(t, rs, "run_status", map[string]any{"run_id": st.RunID}); isErr || !strings.Contains(text, `"paused"`) {
		t.Errorf("run_status with a read-only token: %s", text)
	}
	if text, isErr := callText(t, rs, "answer_approval", map[string]any{"run_id": st.RunID, "call_id": st.Waiting[0].CallID, "decision": "approve"}); !isErr || !strings.Contains(text, "approvals:write") {
		t.Errorf("answer_approval with a read-only token: %v %s", isErr, text)
	}

	// start_run takes a policy as the API does: another than the
	// server's needs an admin token.
	wt, err := cl.CreateToken(t.Context(), &api.CreateToken{Name: "writer", Scopes: []string{api.ScopeRunsWrite}})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := connect(wt.Secret)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	dir := t.TempDir()
	withPolicy := map[string]any{"task": "t", "workspace": dir, "model": "scripted:demo", "policy": "default", "max_steps": 1}
	if text, isErr := callText(t, ws, "start_run", withPolicy); !isErr || !strings.Contains(text, "admin") {
		t.Errorf("start_run with a policy, not an admin: %v %s", isErr, text)
	}
	text, isErr = callText(t, s, "start_run", withPolicy)
	var pst mcpStatus
	if err := json.Unmarshal([]byte(text), &pst); err != nil || isErr {
		t.Fatalf("start_run with a policy as an admin: %v %s", err, text)
	}
	for e, err := range cl.Events(t.Context(), pst.RunID, &client.EventsParams{NoFollow: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(e.Payload), `"name":"keel:default"`) {
			t.Errorf("the run's policy: %s", e.Payload)
		}
		break
	}

	text, isErr = callText(t, s, "answer_approval", map[string]any{"run_id": st.RunID, "call_id": st.Waiting[0].CallID, "decision": "approve"})
	if err := json.Unmarshal([]byte(text), &st); err != nil || isErr {
		t.Fatalf("answer_approval: %v %s", err, text)
	}
	if st.Status != "completed" || !strings.Contains(st.Output, "all tests pass") {
		t.Fatalf("after the approval: %s", text)
	}
	if text, _ := callText(t, s, "run_timeline", map[string]any{"run_id": st.RunID}); !strings.Contains(text, "edit_file") || !strings.Contains(text, "approv") {
		t.Errorf("run_timeline: %s", text)
	}
	// The approval is recorded under the admin token's person.
	run, err := cl.Run(t.Context(), st.RunID)
	if err != nil || run.Status != "completed" {
		t.Errorf("run: %+v %v", run, err)
	}

	// A second demo run: listed, canceled, resumed with a message and a
	// limit, through the API as every front end does (report 15, R3).
	text, isErr = callText(t, s, "start_run", map[string]any{"demo": true})
	var second mcpStatus
	if err := json.Unmarshal([]byte(text), &second); err != nil || isErr || second.Status != "paused" {
		t.Fatalf("start_run: %v %s", err, text)
	}
	if text, isErr := callText(t, s, "list_runs", map[string]any{"status": []string{"paused"}}); isErr || !strings.Contains(text, second.RunID) || strings.Contains(text, st.RunID) {
		t.Errorf("list_runs of paused runs: %s", text)
	}
	if text, isErr := callText(t, rs, "cancel_run", map[string]any{"run_id": second.RunID}); !isErr || !strings.Contains(text, "runs:write") {
		t.Errorf("cancel_run with a read-only token: %v %s", isErr, text)
	}
	if text, isErr := callText(t, s, "cancel_run", map[string]any{"run_id": second.RunID[:10]}); isErr || !strings.Contains(text, `"canceled"`) {
		t.Errorf("cancel_run: %v %s", isErr, text)
	}
	// The scripted demo does not go on after its edit was canceled: it
	// fails, saying so; what matters here is that the resume executed.
	text, isErr = callText(t, s, "resume_run", map[string]any{"run_id": second.RunID, "message": "carry on", "max_steps": 40})
	if err := json.Unmarshal([]byte(text), &second); err != nil || isErr || second.Status == "canceled" {
		t.Fatalf("resume_run: %v %s", err, text)
	}
	resumed, n := false, 0
	for e, err := range cl.Events(t.Context(), second.RunID, &client.EventsParams{NoFollow: true}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		resumed = resumed || e.Type == journal.RunResumed && strings.Contains(string(e.Payload), `"max_steps":40`)
	}
	if !resumed {
		t.Errorf("no run.resumed with max_steps 40 in the resumed run's %d events", n)
	}
}

// keel mcp serve --http, driven by the MCP Inspector CLI over streamable
// HTTP: start the demo run, answer its approval, see it complete; a
// non-loopback address is refused.
func TestMCPServeHTTPWithInspector(t *testing.T) {
	dir := mcpNpm(t)
	db := setup(t)
	if code, _, errOut := keel(t, "mcp", "serve", "--http", "0.0.0.0:0"); code != 2 || !strings.Contains(errOut, "loopback") {
		t.Fatalf("--http 0.0.0.0:0 = %d\n%s", code, errOut)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	tmp := t.TempDir()
	argv, _ := json.Marshal([]string{"--db", db, "mcp", "serve", "--http", addr})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(argv), "TMPDIR="+tmp)
	pipe, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "streamable HTTP on") {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("keel mcp serve --http exited")
		}
	case <-time.After(time.Minute):
		t.Fatal("keel mcp serve --http did not listen")
	}
	url := fmt.Sprintf("http://%s/mcp", addr)
	env := os.Environ()
	var st mcpStatus
	out := inspector(t, dir, url, env, "--transport", "http", "--method", "tools/call", "--tool-name", "start_run", "--tool-arg", "demo=true")
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Status != "paused" || len(st.Waiting) != 1 {
		t.Fatalf("start_run: %v %s", err, out)
	}
	out = inspector(t, dir, url, env, "--transport", "http", "--method", "tools/call", "--tool-name", "answer_approval",
		"--tool-arg", "run_id="+st.RunID, "--tool-arg", "call_id="+st.Waiting[0].CallID, "--tool-arg", "decision=approve")
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Status != "completed" || !strings.Contains(st.Output, "all tests pass") {
		t.Fatalf("answer_approval: %v %s", err, out)
	}
	_ = filepath.Join
}
