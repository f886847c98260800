package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// sleepSeconds is how long the interrupted command would sleep: an odd
// number, so that its process is found by its command line.
const sleepSeconds = "3017"

// sleepers returns the processes of the machine (any sandbox's too:
// their pid namespaces are below this one) running sleep sleepSeconds.
func sleepers(t *testing.T) []string {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if string(b) == "sleep\x00"+sleepSeconds+"\x00" {
			out = append(out, d.Name())
		}
	}
	return out
}

// sleepyServer is an OpenAI-compatible endpoint (the streaming wire
// format, as chatServer) whose model answers a person's message asking
// to wait with a bash call that prints its pid and sleeps for an hour,
// and anything else with "Answer N.". It keeps the messages of each
// request.
type sleepyServer struct {
	mu       sync.Mutex
	answers  int
	requests [][]string // per request, each message's role and text
}

func (s *sleepyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, "bad request", 400)
		return
	}
	var msgs []string
	for _, m := range req.Messages {
		b, _ := json.Marshal(m.Content)
		msgs = append(msgs, m.Role+": "+string(b))
	}
	s.mu.Lock()
	s.answers++
	n := s.answers
	s.requests = append(s.requests, msgs)
	s.mu.Unlock()
	last := req.Messages[len(req.Messages)-1]
	text, _ := last.Content.(string)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	chunk := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("chatcmpl-sleepy%d", n), "object": "chat.completion.chunk", "created": 1727346180,
			"model": "chat-test", "choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	finish := "stop"
	if last.Role == "user" && strings.Contains(text, "wait") {
		// The line is printed once the sleep has started (its command
		// line is sleep's), so the test can look for it.
		args, _ := json.Marshal(map[string]string{"command": "sleep " + sleepSeconds + " & until grep -q " + sleepSeconds + " /proc/$!/cmdline 2>/dev/null; do :; done; echo sleeper-$!; wait"})
		chunk(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"index": 0, "id": fmt.Sprintf("call_sleep%d", n), "type": "function",
			"function": map[string]any{"name": "bash", "arguments": string(args)}}}}, nil)
		finish = "tool_calls"
	} else {
		chunk(map[string]any{"role": "assistant", "content": ""}, nil)
		for _, p := range []string{"Answer", fmt.Sprintf(" %d.", n)} {
			chunk(map[string]any{"content": p}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	b, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("chatcmpl-sleepy%d", n), "object": "chat.completion.chunk", "created": 1727346180, "model": "chat-test",
		"choices": []any{}, "usage": map[string]any{"prompt_tokens": 100 * n, "completion_tokens": 10, "total_tokens": 100*n + 10}})
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
}

// In keel chat on a terminal, Ctrl-C interrupts the turn, not the
// conversation: a five-minute command is stopped (its process is gone),
// the prompt comes back in the same run, the model is told at the next
// message (the call's result and a note say the user interrupted), and
// the run goes on to complete. Ctrl-C twice at the prompt leaves. The
// journal's chain verifies.
func TestChatCtrlCInterruptsTheTurn(t *testing.T) {
	for _, sb := range []string{"none", "linux"} {
		t.Run(sb, func(t *testing.T) { chatInterrupt(t, sb) })
	}
}

func chatInterrupt(t *testing.T, sandbox string) {
	db := setup(t)
	ws := t.TempDir()
	pol := filepath.Join(t.TempDir(), "all.cedar")
	if err := os.WriteFile(pol, []byte(`@id("all") permit(principal, action, resource);
@id("outside") forbid(principal, action, resource) when { context.outside };
`), 0o644); err != nil {
		t.Fatal(err)
	}
	model := &sleepyServer{}
	srv := httptest.NewServer(model)
	defer srv.Close()
	args, _ := json.Marshal([]string{"chat", "--db", db, "--model", "openai-compatible:chat-test@" + srv.URL + "/v1",
		"--sandbox", sandbox, "--workspace", ws, "--policy", pol, "Look around"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args), "TERM=xterm")
	term := startTerminal(t, cmd)

	if got := term.expect("you> "); !strings.Contains(got, "Answer 1.") {
		t.Errorf("the first answer is not on the terminal:\n%s", got)
	}
	term.send("please wait a while")
	// The status block shows the command's first line: it runs.
	started := term.expect("│ sleeper-")
	if !strings.Contains(started, "bash sleep "+sleepSeconds) {
		t.Errorf("no running bash call before its output:\n%s", started)
	}
	if len(sleepers(t)) == 0 {
		t.Fatalf("no process runs sleep %s", sleepSeconds)
	}
	ctrlC := time.Now()
	if _, err := term.f.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	back := term.expect("you> ")
	// Reported, not asserted: the command's group ended, the journal
	// written, the prompt back.
	t.Logf("Ctrl-C to the prompt: %s", time.Since(ctrlC).Round(time.Millisecond))
	for _, want := range []string{"interrupting", "interrupted by the user", "interrupted; the model is told"} {
		if !strings.Contains(back, want) {
			t.Errorf("after Ctrl-C, no %q:\n%s", want, back)
		}
	}
	if ps := sleepers(t); len(ps) > 0 {
		t.Errorf("the interrupted command is still there: pids %v", ps)
	}
	term.send("never mind, what now?")
	if got := term.expect("you> "); !strings.Contains(got, "Answer 3.") {
		t.Errorf("the follow-up's answer is missing:\n%s", got)
	}
	// Ctrl-C at the prompt says how to leave; a second one leaves.
	term.f.Write([]byte{3})
	term.expect("Ctrl-C again")
	term.f.Write([]byte{3})
	<-term.done
	if err := cmd.Wait(); err != nil {
		t.Errorf("keel chat left with %v, want exit 0 (the run completed)", err)
	}

	model.mu.Lock()
	third := strings.Join(model.requests[2], "\n")
	model.mu.Unlock()
	for _, want := range []string{"interrupted by the user while this call ran", "the user interrupted this turn", "never mind, what now?"} {
		if !strings.Contains(third, want) {
			t.Errorf("the model's request after the interruption lacks %q:\n%s", want, third)
		}
	}
	id := regexp.MustCompile(`keel: run (\S+) ·`).FindStringSubmatch(term.text())
	if id == nil {
		t.Fatal("no run id on the terminal")
	}
	code, out, errOut := keel(t, "--db", db, "runs", "show", id[1], "--json")
	if code != 0 {
		t.Fatalf("runs show = %d: %s", code, errOut)
	}
	var types []string
	var paused *agent.RunEnded
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e journal.Event
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		types = append(types, string(e.Type))
		if e.Type == journal.RunPaused {
			v, _ := agent.Decode(&e)
			paused = v.(*agent.RunEnded)
		}
	}
	if paused == nil || paused.Reason != agent.ReasonInterrupted {
		t.Errorf("run.paused %+v, want reason %q", paused, agent.ReasonInterrupted)
	}
	if got := strings.Join(types, " "); !strings.Contains(got, "tool.started tool.finished user.message run.paused") || !strings.HasSuffix(got, "run.completed") {
		t.Errorf("events %s: want the call finished, the note and the pause, and the run completed", got)
	}
	if code, out, errOut := keel(t, "--db", db, "audit", "verify", id[1]); code != 0 {
		t.Errorf("audit verify = %d: %s %s", code, out, errOut)
	}
}

// Ctrl-C at an inline approval question interrupts the turn too: the
// call waiting for approval gets a result saying it did not run, no
// "decide with" hint is printed, and the next message goes on.
func TestChatCtrlCAtApproval(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("first line\nhelo wrld\nlast line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(t.TempDir(), "ask-edits.cedar")
	if err := os.WriteFile(pol, []byte(`@id("all") permit(principal, action, resource);
@id("edits") @ask @reason("edits need a person")
forbid(principal, action == Keel::Action::"edit_file", resource);
@id("outside") forbid(principal, action, resource) when { context.outside };
`), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&chatServer{})
	defer srv.Close()
	args, _ := json.Marshal([]string{"chat", "--db", db, "--model", "openai-compatible:chat-test@" + srv.URL + "/v1",
		"--sandbox", "none", "--workspace", ws, "--policy", pol, "Look at notes.txt"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args), "TERM=xterm")
	term := startTerminal(t, cmd)
	term.expect("you> ")
	term.send("please fix the typo in notes.txt")
	term.expect("always for this agent: ")
	term.f.Write([]byte{3})
	back := term.expect("you> ")
	if !strings.Contains(back, "interrupted") || strings.Contains(back, "decide with") {
		t.Errorf("after Ctrl-C at the question:\n%s", back)
	}
	term.send("leave it, what changed?")
	if got := term.expect("you> "); !strings.Contains(got, "Answer 3.") {
		t.Errorf("the follow-up's answer is missing:\n%s", got)
	}
	term.send("/exit")
	<-term.done
	if err := cmd.Wait(); err != nil {
		t.Errorf("keel chat: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "notes.txt")); !strings.Contains(string(b), "helo wrld") {
		t.Errorf("the edit that was asked about ran: %q", b)
	}
	id := regexp.MustCompile(`keel: run (\S+) ·`).FindStringSubmatch(term.text())
	if id == nil {
		t.Fatal("no run id on the terminal")
	}
	_, out, _ := keel(t, "--db", db, "runs", "show", id[1], "--json")
	var result string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e journal.Event
		if json.Unmarshal([]byte(line), &e) != nil || e.Type != journal.ToolFinished {
			continue
		}
		if v, err := agent.Decode(&e); err == nil {
			result = v.(*agent.ToolFinished).Content
		}
	}
	if !strings.Contains(result, "did not run") || !strings.Contains(result, "interrupted by the user") {
		t.Errorf("the asked call's result is %q, want that it did not run because the user interrupted", result)
	}
}
