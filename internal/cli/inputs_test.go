package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// startRunChild starts `keel run` on db (this test binary as keel) with
// server-everything (stdio, in the sandbox) and the scripted model at
// modelURL.
func startRunChild(t *testing.T, dir, db, modelURL string) *exec.Cmd {
	t.Helper()
	args, _ := json.Marshal([]string{"run", "--db", db, "--model", "openai-compatible:scripted@" + modelURL + "/v1", "--workspace", t.TempDir(), "-q",
		"--mcp", "everything=node " + mcpJS(dir, "server-everything") + " stdio", "ask the person"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// elicitResult returns the result of call id of run, and how often it
// started.
func elicitResult(t *testing.T, db, run, id string) (string, int, int) {
	t.Helper()
	st, evs := loadRun(t, db, run)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("run %s: %s", run, st.Status)
	}
	var result string
	starts, asks := 0, 0
	for _, e := range evs {
		switch e.Type {
		case journal.ToolStarted:
			starts++
		case journal.InputRequested:
			asks++
		case journal.ToolFinished:
			var f agent.ToolFinished
			json.Unmarshal(e.Payload, &f)
			if f.CallID == id {
				result = f.Result.Content
			}
		}
	}
	return result, starts, asks
}

// server-everything's elicitation tool asks a person for a form during
// the call: the question is journaled (input.requested) and the call
// waits. Killed (-9) while it waits, answered from the command line, and
// resumed, the call runs again, the server's same question gets the
// journaled answer, and the run completes; answered while the run waits
// in another process, the answer is delivered to the live call.
func TestMCPElicitationDurableWait(t *testing.T) {
	dir := mcpNpm(t)
	setup(t)
	m := &scriptedModel{turns: [][]scriptedCall{{{"ask1", "everything__trigger-elicitation-request", `{}`}}}}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)

	db := filepath.Join(t.TempDir(), "kill.db")
	cmd := startRunChild(t, dir, db, srv.URL)
	run, e := waitForType(t, db, journal.InputRequested)
	var q agent.InputRequested
	json.Unmarshal(e.Payload, &q)
	if q.ID != "input-1" || q.CallID != "ask1" || q.Server != "everything" || q.Mode != "form" || !strings.Contains(string(q.Schema), `"name"`) {
		t.Fatalf("input.requested: %s", e.Payload)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	code, out, errOut := keel(t, "inputs", "list", "--db", db)
	if code != 0 || !strings.Contains(out, run+" input-1") || !strings.Contains(out, "Please provide inputs") {
		t.Fatalf("inputs list = %d\n%s%s", code, out, errOut)
	}
	// An answer that does not fit the form is refused and changes nothing.
	if code, _, errOut := keel(t, "inputs", "answer", "--db", db, run, "input-1", "--set", "check=true"); code == 0 || !strings.Contains(errOut, "name") {
		t.Fatalf("an answer without the required name = %d\n%s", code, errOut)
	}
	if code, _, errOut := keel(t, "inputs", "answer", "--db", db, run, "input-1", "--set", "name=Ada Lovelace", "--set", "check=true", "--set", "integer=7", "--by", "ada"); code != 0 {
		t.Fatalf("inputs answer = %d\n%s", code, errOut)
	}
	if code, _, errOut := keel(t, "inputs", "answer", "--db", db, run, "input-1", "--decline"); code == 0 {
		t.Fatalf("a second answer = %d\n%s", code, errOut)
	}
	if code, _, errOut := keel(t, "runs", "resume", "--db", db, run); code != 0 {
		t.Fatalf("resume = %d\n%s", code, errOut)
	}
	result, starts, asks := elicitResult(t, db, run, "ask1")
	if !strings.Contains(result, "Name: Ada Lovelace") || !strings.Contains(result, "Agreed to terms: true") || !strings.Contains(result, "Favorite Integer: 7") {
		t.Errorf("the resumed call's result: %s", result)
	}
	if starts != 2 || asks != 1 {
		t.Errorf("the call started %d times and asked %d times; want 2 and 1 (the second ask got the journaled answer)", starts, asks)
	}
	st, _ := loadRun(t, db, run)
	if len(st.Inputs) != 1 || st.Inputs[0].Answer == nil || st.Inputs[0].Answer.By != "ada" {
		t.Errorf("inputs: %+v", st.Inputs)
	}

	// Answered while the call waits in another process.
	db2 := filepath.Join(t.TempDir(), "live.db")
	cmd = startRunChild(t, dir, db2, srv.URL)
	run2, _ := waitForType(t, db2, journal.InputRequested)
	if code, _, errOut := keel(t, "inputs", "answer", "--db", db2, run2, "input-1", "--content", `{"name":"Grace Hopper","check":false}`); code != 0 {
		t.Fatalf("inputs answer = %d\n%s", code, errOut)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("keel run: %v", err)
	}
	result, starts, asks = elicitResult(t, db2, run2, "ask1")
	if !strings.Contains(result, "Name: Grace Hopper") || starts != 1 || asks != 1 {
		t.Errorf("live answer: %d starts, %d asks, result %s", starts, asks, result)
	}
}

// On keel serve: a server run's question is listed by the API and shown
// on the run page with a form; the server is killed (-9) while the call
// waits and started again; the run resumes and waits on the same
// question; a wrong answer through the API is refused; the page's form
// answers; the run completes.
func TestServeElicitationSurvivesRestart(t *testing.T) {
	dir := mcpNpm(t)
	db := setup(t)
	everything := mcpJS(dir, "server-everything")
	cfg := fmt.Sprintf("[[mcp.servers]]\nname = \"everything\"\ncommand = [\"node\", %q, \"stdio\"]\nread_only = [%q]\n", everything, filepath.Join(dir, "node_modules"))
	if err := os.WriteFile(filepath.Join(os.Getenv("KEEL_HOME"), "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	m := &scriptedModel{turns: [][]scriptedCall{{{"ask1", "everything__trigger-elicitation-request", `{}`}}}}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	model := "openai-compatible:scripted@" + srv.URL + "/v1"
	s1 := startServe(t, "--model", model)
	c := s1.apiClient(t)
	run, err := c.CreateRun(t.Context(), &api.CreateRun{Task: "ask", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// waitInput waits until the call asks (attempt 1) or, after the
	// restart, runs again (attempt 2), and returns the open question.
	waitInput := func(c *client.Client, attempt int) api.Input {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		for e, err := range c.Events(ctx, run.ID, &client.EventsParams{From: 1}) {
			if err != nil {
				t.Fatal(err)
			}
			var ts agent.ToolStarted
			if attempt == 1 && e.Type == journal.InputRequested || attempt > 1 && e.Type == journal.ToolStarted && json.Unmarshal(e.Payload, &ts) == nil && ts.Attempt == attempt {
				break
			}
		}
		list, err := c.Inputs(t.Context())
		if err != nil || len(list) != 1 || list[0].RunID != run.ID || list[0].ID != "input-1" {
			_, evs := loadRun(t, db, run.ID)
			for _, e := range evs[1:] {
				t.Logf("%d %s %.300s", e.Seq, e.Type, e.Payload)
			}
			t.Fatalf("inputs: %+v %v", list, err)
		}
		return list[0]
	}
	waitInput(c, 1)
	if err := s1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s1.done

	s2 := startServe(t, "--model", model)
	c = s2.apiClient(t)
	in := waitInput(c, 2)
	if !strings.Contains(in.Message, "Please provide") || in.Mode != "form" {
		t.Errorf("input: %+v", in)
	}
	// The executing server re-asked after the restart: the same request
	// waits (no second input.requested).
	if _, err := c.AnswerInput(t.Context(), run.ID, in.ID, &api.AnswerInput{Action: "accept", Content: json.RawMessage(`{"check":true}`)}); !client.IsCode(err, api.CodeInvalidRequest) {
		t.Fatalf("an answer without the required name: %v", err)
	}
	tok := s2.savedToken(t)
	get, _ := http.NewRequest(http.MethodGet, s2.url+"/ui/runs/"+run.ID, nil)
	get.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `name="field.name"`) || !strings.Contains(string(page), "/ui/inputs/"+run.ID+"/input-1") {
		t.Fatalf("the run page has no form for the question:\n%s", page)
	}
	form := url.Values{"input": {"input-1"}, "action": {"accept"}, "field.name": {"Ada from the UI"}, "field.check": {"true"}}
	post, _ := http.NewRequest(http.MethodPost, s2.url+"/ui/inputs/"+run.ID+"/input-1", strings.NewReader(form.Encode()))
	post.Header.Set("Authorization", "Bearer "+tok)
	post.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(post)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST the form = %d", resp.StatusCode)
	}
	if end := untilStopped(t, c, run.ID, 1); end.Type != journal.RunCompleted {
		_, evs := loadRun(t, db, run.ID)
		for _, e := range evs {
			t.Logf("%d %s %s", e.Seq, e.Type, e.Payload)
		}
		t.Fatalf("the run stopped with %s\n%s", end.Type, s2.stderr)
	}
	result, _, asks := elicitResult(t, db, run.ID, "ask1")
	if !strings.Contains(result, "Name: Ada from the UI") || !strings.Contains(result, "Agreed to terms: true") || asks != 1 {
		t.Errorf("%d asks, result %s", asks, result)
	}
}
