package cli_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// chatServer is an OpenAI-compatible endpoint that plays a short
// conversation, answering in the shape of the recorded event streams of
// model/openai/testdata (chat.completion.chunk pieces, then a finish
// chunk, a usage chunk and [DONE]). Its answer depends on the newest
// message: a tool result gets "The edit is made."; a person's message
// asking to fix something gets an edit_file call on notes.txt; any other
// message gets "Answer N.", N counting the answers so far.
type chatServer struct {
	mu      sync.Mutex
	answers int
	// noUsage leaves out the usage chunk, as some providers do.
	noUsage bool
}

func (s *chatServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	s.mu.Lock()
	s.answers++
	n := s.answers
	s.mu.Unlock()
	last := req.Messages[len(req.Messages)-1]
	text, _ := last.Content.(string)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	chunk := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("chatcmpl-keeltest%d", n), "object": "chat.completion.chunk", "created": 1727346180,
			"model": "chat-test", "choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	finish := "stop"
	switch {
	case last.Role == "tool":
		chunk(map[string]any{"role": "assistant", "content": ""}, nil)
		for _, p := range []string{"The", " edit", " is", " made."} {
			chunk(map[string]any{"content": p}, nil)
		}
	case strings.Contains(text[strings.LastIndex(text, "\n\n")+1:], "fix"): // not in a note before the message
		chunk(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"index": 0, "id": fmt.Sprintf("call_fix%d", n), "type": "function",
			"function": map[string]any{"name": "edit_file", "arguments": ""}}}}, nil)
		for _, p := range []string{`{"path":"notes.txt",`, `"old_string":"helo wrld",`, `"new_string":"hello world"}`} {
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": p}}}}, nil)
		}
		finish = "tool_calls"
	default:
		chunk(map[string]any{"role": "assistant", "content": ""}, nil)
		for _, p := range []string{"Answer", fmt.Sprintf(" %d.", n)} {
			chunk(map[string]any{"content": p}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	if s.noUsage {
		fmt.Fprint(w, "data: [DONE]\n\n")
		return
	}
	b, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("chatcmpl-keeltest%d", n), "object": "chat.completion.chunk", "created": 1727346180, "model": "chat-test",
		"choices": []any{}, "usage": map[string]any{"prompt_tokens": 100 * n, "completion_tokens": 10, "total_tokens": 100*n + 10}})
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
}

// terminal is a child process on a pseudo-terminal and what it printed.
type terminal struct {
	t    *testing.T
	f    *os.File
	mu   sync.Mutex
	out  strings.Builder
	seen int // what expect has consumed
	more chan struct{}
	done chan struct{}
}

func startTerminal(t *testing.T, cmd *exec.Cmd) *terminal {
	t.Helper()
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	return watchTerminal(t, cmd, f)
}

// watchTerminal records what cmd, started on the terminal whose
// controlling side is f, prints there.
func watchTerminal(t *testing.T, cmd *exec.Cmd, f *os.File) *terminal {
	t.Helper()
	term := &terminal{t: t, f: f, more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(term.done)
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			term.mu.Lock()
			term.out.Write(buf[:n])
			term.mu.Unlock()
			select {
			case term.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		f.Close()
		if t.Failed() {
			t.Logf("terminal:\n%s", term.text())
		}
	})
	return term
}

func (term *terminal) text() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.out.String()
}

// expect waits until s appears after what earlier expects consumed, and
// consumes through it.
func (term *terminal) expect(s string) string {
	term.t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		all := term.text()
		if i := strings.Index(all[term.seen:], s); i >= 0 {
			got := all[term.seen : term.seen+i+len(s)]
			term.seen += i + len(s)
			return got
		}
		select {
		case <-term.more:
		case <-term.done:
			if !strings.Contains(term.text()[term.seen:], s) {
				term.t.Fatalf("the program ended before printing %q", s)
			}
		case <-deadline:
			term.t.Fatalf("no %q on the terminal after 2 minutes", s)
		}
	}
}

func (term *terminal) send(line string) {
	term.t.Helper()
	if _, err := io.WriteString(term.f, line+"\n"); err != nil {
		term.t.Fatal(err)
	}
}

// TestChatInTerminal is the acceptance of keel chat: on a terminal, a
// task, two follow-ups, one of which leads to an edit that the policy
// asks about; the person approves it inline for the rest of the run
// after reading its diff. Everything is one run in the journal.
func TestChatInTerminal(t *testing.T) {
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

	head := term.expect("you> ")
	if !strings.Contains(head, "Answer 1.") {
		t.Errorf("the first answer is not on the terminal:\n%s", head)
	}
	term.send("please fix the typo in notes.txt")
	ask := term.expect("always for this agent: ")
	for _, want := range []string{"needs your approval", "edit_file", "asks:", "edits need a person", "-helo wrld", "+hello world", "--- a/notes.txt", "+++ b/notes.txt"} {
		if !strings.Contains(ask, want) {
			t.Errorf("the approval question lacks %q:\n%s", want, ask)
		}
	}
	term.send("r")
	after := term.expect("you> ")
	for _, want := range []string{"approved, and matching calls from now on in this run", "The edit is made."} {
		if !strings.Contains(after, want) {
			t.Errorf("after the approval, no %q:\n%s", want, after)
		}
	}
	term.send("what changed?")
	if got := term.expect("you> "); !strings.Contains(got, "Answer 4.") {
		t.Errorf("the second follow-up's answer is missing:\n%s", got)
	}
	term.send("/exit")
	<-term.done
	if err := cmd.Wait(); err != nil {
		t.Fatalf("keel chat: %v", err)
	}

	b, err := os.ReadFile(filepath.Join(ws, "notes.txt"))
	if err != nil || string(b) != "first line\nhello world\nlast line\n" {
		t.Errorf("notes.txt = %q, %v", b, err)
	}
	m := regexp.MustCompile(`keel: run (\S+) ·`).FindStringSubmatch(term.text())
	if m == nil {
		t.Fatal("no run id on the terminal")
	}
	code, out, errOut := keel(t, "--db", db, "runs", "show", m[1], "--json")
	if code != 0 {
		t.Fatalf("runs show = %d: %s", code, errOut)
	}
	var users []string
	var resolved []agent.ApprovalResolved
	var last journal.Type
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e journal.Event
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		last = e.Type
		v, err := agent.Decode(&e)
		if err != nil {
			continue
		}
		switch x := v.(type) {
		case *agent.UserMessage:
			users = append(users, x.Content)
		case *agent.ApprovalResolved:
			resolved = append(resolved, *x)
		}
	}
	if want := []string{"please fix the typo in notes.txt", "what changed?"}; strings.Join(users, "|") != strings.Join(want, "|") {
		t.Errorf("user messages journaled %q, want %q", users, want)
	}
	if len(resolved) != 1 || resolved[0].Decision != "allow" || resolved[0].Remember != "run" {
		t.Errorf("approvals resolved: %+v", resolved)
	}
	if last != journal.RunCompleted {
		t.Errorf("the run's last event is %s, want run.completed", last)
	}
}

// TestLiveCommandOutputInTerminal: while a long command runs, keel run on
// a terminal shows the command with its elapsed time and the last lines
// it printed, before its result.
func TestLiveCommandOutputInTerminal(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	traj := writeTrajectory(t, "count slowly",
		[]fcall{sh("for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo tick $i; sleep 0.25; done")},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")},
	)
	args, _ := json.Marshal([]string{"run", "--db", db, "--model", "replay:" + traj, "--sandbox", "none", "--workspace", ws})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args), "TERM=xterm")
	term := startTerminal(t, cmd)
	term.expect("  bash for i in")
	// The status block: the call, its elapsed time and line count, and
	// its last lines, drawn while the command still runs.
	live := term.expect("    │ tick 4")
	if !regexp.MustCompile(`bash for i in 1 2 3 .* · \d+\.\ds · \d+ lines, \d+ B`).MatchString(live) {
		t.Errorf("no status line with elapsed time and size before tick 4:\n%q", live)
	}
	rest := term.expect("→ exit 0")
	if !strings.Contains(rest, "tick 11") {
		t.Errorf("the tail did not follow the command to its end:\n%q", rest)
	}
	<-term.done
	if err := cmd.Wait(); err != nil {
		t.Fatalf("keel run: %v", err)
	}
}

// keel chat's commands are done at the prompt, never sent to the model:
// /help (also before the first message), /diff, /cost, /model, /undo
// (which the model is told of with the next message; again, it goes one
// message further back, and says when there is nothing more); an
// unknown one is refused and "//" sends a message starting with "/".
func TestChatCommands(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	notes := filepath.Join(ws, "notes.txt")
	if err := os.WriteFile(notes, []byte("helo wrld\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&chatServer{})
	defer srv.Close()
	args, _ := json.Marshal([]string{"chat", "--db", db, "--model", "openai-compatible:chat-test@" + srv.URL + "/v1",
		"--sandbox", "none", "--workspace", ws})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args), "TERM=xterm")
	term := startTerminal(t, cmd)
	term.expect("you> ")
	for _, tt := range []struct {
		send          string
		want, wantNot []string
	}{
		// Before the first message: no run yet.
		{"/help", []string{"/diff [--stat]", "/undo", "/cost", "/model", "/exit"}, nil},
		{"/diff", []string{"/diff needs the run, which starts with your first message: type the task first"}, nil},
		{"Look at notes.txt", []string{"Answer 1."}, nil},
		{"/help", []string{"/diff [--stat]", "/undo", "/cost", "/model", "/exit"}, nil},
		{"/bogus arg", []string{"no command /bogus (nothing was sent to the model)"}, nil},
		{"please fix the typo in notes.txt", []string{"The edit is made."}, nil},
		{"/diff", []string{"-helo wrld", "+hello world"}, nil},
		{"/cost", []string{"· 3 steps · 630 tok (600 in, 30 out) · $0.0000 · model openai-compatible:chat-test"}, nil},
		{"/model", []string{"uses model openai-compatible:chat-test@"}, nil},
		{"/undo", []string{`files put back as they were before your message "please fix the typo in notes.txt":`, "M notes.txt",
			"/undo again goes one message further back; to put back what /undo took away: keel --db"}, nil},
		{"/undo", []string{"no file changed: the files were already as they were when the run started"}, nil},
		{"/undo", []string{"nothing more to undo: the files are as they were when the run started; to put back what /undo took away: keel --db"}, nil},
		{"what now?", []string{"Answer 4."}, nil},
		// An /undo that took nothing away offers nothing to put back
		// (fresh-user trial 18, U3).
		{"/undo", []string{"no file changed: the files were already as they were before your message", "/undo again goes one message further back"}, []string{"to put back"}},
		{"//help me", []string{"Answer 5."}, nil},
	} {
		term.send(tt.send)
		got := term.expect("you> ")
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("after %q, no %q:\n%s", tt.send, w, got)
			}
		}
		for _, w := range tt.wantNot {
			if strings.Contains(got, w) {
				t.Errorf("after %q, %q:\n%s", tt.send, w, got)
			}
		}
		// The chat's own run holds its workspace: /undo warns of no
		// other run there (fresh-user trial 10, N2).
		if strings.HasPrefix(tt.send, "/") && strings.Contains(got, "WARNING") {
			t.Errorf("after %q, a warning:\n%s", tt.send, got)
		}
	}
	term.send("/exit")
	<-term.done
	if err := cmd.Wait(); err != nil {
		t.Fatalf("keel chat: %v", err)
	}
	if b, err := os.ReadFile(notes); err != nil || string(b) != "helo wrld\n" {
		t.Errorf("after /undo notes.txt = %q, %v", b, err)
	}
	m := regexp.MustCompile(`keel: run (\S+) ·`).FindStringSubmatch(term.text())
	if m == nil {
		t.Fatal("no run id on the terminal")
	}
	code, out, errOut := keel(t, "--db", db, "runs", "show", m[1], "--json")
	if code != 0 {
		t.Fatalf("runs show = %d: %s", code, errOut)
	}
	var users []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e journal.Event
		if json.Unmarshal([]byte(line), &e) != nil || e.Type != journal.UserMessage {
			continue
		}
		if v, err := agent.Decode(&e); err == nil {
			users = append(users, v.(*agent.UserMessage).Content)
		}
	}
	if len(users) != 3 || users[0] != "please fix the typo in notes.txt" || !strings.HasPrefix(users[1], `[The person undid the file changes made since their message "please fix the typo in notes.txt"`) ||
		!strings.HasSuffix(users[1], "\n\nwhat now?") || users[2] != "/help me" {
		t.Errorf("user messages journaled: %q", users)
	}
}

// A conversation with a provider that reports no usage says so once,
// not at each turn (fresh-user trial 18, U8).
func TestChatSaysEstimatedUsageOnce(t *testing.T) {
	db := setup(t)
	srv := httptest.NewServer(&chatServer{noUsage: true})
	defer srv.Close()
	args, _ := json.Marshal([]string{"chat", "--db", db, "--model", "openai-compatible:chat-test@" + srv.URL + "/v1", "--sandbox", "none", "--workspace", t.TempDir()})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args), "TERM=xterm")
	term := startTerminal(t, cmd)
	term.expect("you> ")
	for _, msg := range []string{"hello", "and again", "once more"} {
		term.send(msg)
		term.expect("you> ")
	}
	term.send("/exit")
	<-term.done
	if err := cmd.Wait(); err != nil {
		t.Fatalf("keel chat: %v", err)
	}
	const note = "the provider reported no token usage"
	if n := strings.Count(term.text(), note); n != 1 {
		t.Errorf("the chat said %q %d times, want once:\n%s", note, n, term.text())
	}
}
