package cli_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/server/api"
)

// A run a local keel run started on the server's journal with another
// policy is continued where it was started: every front end of the
// server records a decision on it and says so in the same words (the
// command line, the API's answer, the web UI, the MCP tool at once), and
// a resume through the server is refused with those words instead of
// executing the run under the local policy (newuser report 14, Q13 and
// Q26).
func TestFrontEndsLeaveALocalRunToItsStarter(t *testing.T) {
	db := setup(t)
	serve := startServe(t)
	tok := serve.savedToken(t)
	cl := serve.apiClient(t)
	pol := askShell(t)
	traj := writeTrajectory(t, "write it", []fcall{sh("echo x > f.txt")}, nil)
	local := func() string {
		t.Helper()
		ws := t.TempDir()
		if code, _, errOut := keel(t, "run", "--db", db, "--policy", pol, "--model", "replay:"+traj, "--workspace", ws, "-q", "--no-wait"); code != 3 {
			t.Fatalf("local run = %d, want 3 (waits for approval)\n%s", code, errOut)
		}
		id, _ := lastRun(t, db)
		return id
	}
	const notice = "this server does not continue this run: it was started outside this server"
	pending := func(id string) string {
		t.Helper()
		r, err := cl.Run(t.Context(), id)
		if err != nil || len(r.Pending) != 1 {
			t.Fatalf("run %s: %+v %v", id, r, err)
		}
		return r.Pending[0].CallID
	}

	id := local()
	code, _, errOut := keel(t, "--server", serve.url, "--token", tok, "approve", id, pending(id), "--no-wait")
	if code != 3 || !strings.Contains(errOut, notice) || !strings.Contains(errOut, "keel runs resume "+id+" without --server") {
		t.Errorf("keel --server approve = %d, want 3 with %q\n%s", code, notice, errOut)
	}

	id = local()
	run, err := cl.Approve(t.Context(), id, pending(id), &api.Decide{})
	if err != nil || !strings.Contains(run.Elsewhere, notice) || run.Queued || run.Executing {
		t.Errorf("API approve: %+v %v, want elsewhere %q", run, err, notice)
	}

	id = local()
	web := webSession(t, serve.url, tok)
	call := pending(id)
	web.post(t, "/ui/approvals/"+url.PathEscape(id)+"/"+url.PathEscape(call), url.Values{"decision": {"allow"}, "call": {call}})
	resp, err := web.hc.Get(serve.url + "/ui/runs/" + id)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), notice) {
		t.Errorf("the web UI's run page lacks %q", notice)
	}

	id = local()
	mcp, err := sdk.NewClient(&sdk.Implementation{Name: "keel-test", Version: "1"}, nil).Connect(t.Context(),
		&sdk.StreamableClientTransport{Endpoint: serve.url + "/mcp", HTTPClient: &http.Client{Transport: bearer(tok)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mcp.Close()
	if text, isErr := callText(t, mcp, "answer_approval", map[string]any{"run_id": id, "call_id": pending(id), "decision": "approve"}); isErr || !strings.Contains(text, notice) {
		t.Errorf("MCP answer_approval: %v %s, want %q", isErr, text, notice)
	}

	// The decided runs wait for their starter: a resume through the
	// server is refused alike, and nothing executes the run there.
	code, _, errOut = keel(t, "--server", serve.url, "--token", tok, "runs", "resume", id, "--no-wait")
	if code == 0 || !strings.Contains(errOut, notice) {
		t.Errorf("keel --server runs resume = %d, want refused with %q\n%s", code, notice, errOut)
	}
	if _, err := cl.Resume(t.Context(), id, &api.ResumeRun{}); err == nil || !strings.Contains(err.Error(), notice) {
		t.Errorf("API resume: %v, want refused with %q", err, notice)
	}
	if r, err := cl.Run(t.Context(), id); err != nil || r.Executing || r.Queued || r.Status != "paused" {
		t.Errorf("after the refused resumes: %+v %v", r, err)
	}
}
