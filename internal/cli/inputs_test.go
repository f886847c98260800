package cli_test

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
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
