package cli_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// screen renders what a program wrote to a terminal, for the control
// sequences Keel uses (carriage return, newline, cursor up, erase to the
// end of the screen), into the lines a person sees at the end.
func screen(out string) []string {
	lines := []string{""}
	row, col := 0, 0
	put := func(r rune) {
		for len(lines) <= row {
			lines = append(lines, "")
		}
		cur := []rune(lines[row])
		for len(cur) < col {
			cur = append(cur, ' ')
		}
		if col < len(cur) {
			cur[col] = r
		} else {
			cur = append(cur, r)
		}
		lines[row] = string(cur)
		col++
	}
	rs := []rune(out)
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; {
		case r == '\r':
			col = 0
		case r == '\n':
			row++
			col = 0
			for len(lines) <= row {
				lines = append(lines, "")
			}
		case r == 0x1b && i+1 < len(rs) && rs[i+1] == '[':
			j := i + 2
			for j < len(rs) && (rs[j] >= '0' && rs[j] <= '9' || rs[j] == ';') {
				j++
			}
			if j >= len(rs) {
				i = j
				break
			}
			n, _ := strconv.Atoi(string(rs[i+2 : j]))
			switch rs[j] {
			case 'A':
				row = max(0, row-max(n, 1))
			case 'J':
				if row < len(lines) {
					cur := []rune(lines[row])
					lines[row] = string(cur[:min(col, len(cur))])
					lines = lines[:row+1]
				}
			}
			i = j
		default:
			put(r)
		}
	}
	return lines
}

// spinnerLine reports whether a line is the status block's (a spinner
// frame, or a running command's tail).
func spinnerLine(l string) bool {
	for _, f := range []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏", "    │ sleeper-"} {
		if strings.HasPrefix(l, f) {
			return true
		}
	}
	return false
}

// boomServer answers a request whose messages say "boom" with an HTTP
// 400 error, and passes the others to next.
type boomServer struct{ next http.Handler }

func (b boomServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if bytes.Contains(body, []byte("boom")) {
		http.Error(w, `{"error":{"message":"the model is overloaded","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	b.next.ServeHTTP(w, r)
}

// keel chat on a terminal leaves a clean screen (issue: lines printed
// twice, no diff of an edit, stale status lines after Ctrl-C, typed text
// in the middle of the answer):
//   - a line typed while a command runs is not echoed into the status
//     block: it is the next message, shown after the prompt when the turn
//     ends;
//   - Ctrl-C erases the status block before saying it interrupts: no
//     spinner line is left on the screen;
//   - an edit shows its diff under its result;
//   - a model error is printed once (the run's end refers to it);
//   - a call asked about and denied at the terminal is said once, with
//     no "approval needed ... keel approve" hint before the question.
func TestChatScreen(t *testing.T) {
	start := func(t *testing.T, h http.Handler, ws string, extra ...string) (*terminal, *exec.Cmd) {
		db := setup(t)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		args, _ := json.Marshal(append([]string{"chat", "--db", db, "--model", "openai-compatible:chat-test@" + srv.URL + "/v1",
			"--sandbox", "none", "--workspace", ws}, append(extra, "Look around")...))
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args), "TERM=xterm")
		term := startTerminal(t, cmd)
		term.expect("you> ")
		return term, cmd
	}
	finish := func(t *testing.T, term *terminal, cmd *exec.Cmd) []string {
		term.send("/exit")
		<-term.done
		cmd.Wait()
		return screen(term.text())
	}
	count := func(lines []string, s string) int {
		n := 0
		for _, l := range lines {
			n += strings.Count(l, s)
		}
		return n
	}

	t.Run("typed ahead and Ctrl-C", func(t *testing.T) {
		pol := filepath.Join(t.TempDir(), "all.cedar")
		os.WriteFile(pol, []byte(`@id("all") permit(principal, action, resource);`+"\n"), 0o644)
		srv := &sleepyServer{}
		term, cmd := start(t, srv, t.TempDir(), "--policy", pol)
		term.send("please wait a while")
		term.expect("│ sleeper-")
		term.send("what now?") // typed while the command runs
		term.expect("│ sleeper-")
		term.f.Write([]byte{3})
		// After Ctrl-C the person has control: the line typed ahead is
		// shown, not sent (fresh-user trial 10, N11).
		got := term.expect("you> ")
		if !strings.Contains(got, "interrupting") || !strings.Contains(got, "keel: not sent (typed before you interrupted): what now?") {
			t.Errorf("after Ctrl-C, no interruption and no notice of the line not sent:\n%s", got)
		}
		term.send("go on")
		if got := term.expect("you> "); !strings.Contains(got, "Answer 3.") {
			t.Errorf("the message typed after the interruption got no answer:\n%s", got)
		}
		lines := finish(t, term, cmd)
		for _, l := range lines {
			if spinnerLine(l) {
				t.Errorf("a status line is left on the screen: %q\n%s", l, strings.Join(lines, "\n"))
			}
			if strings.Contains(l, "what now?") && !strings.HasPrefix(l, "keel: not sent") {
				t.Errorf("the typed line landed in other output: %q", l)
			}
		}
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for _, req := range srv.requests {
			for _, m := range req {
				if strings.Contains(m, "what now?") {
					t.Errorf("the line typed before the interruption was sent to the model: %s", m)
				}
			}
		}
	})

	t.Run("edit diff and model error", func(t *testing.T) {
		ws := t.TempDir()
		os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("first line\nhelo wrld\nlast line\n"), 0o644)
		term, cmd := start(t, boomServer{&chatServer{}}, ws)
		term.send("please fix the typo in notes.txt")
		if got := term.expect("you> "); !strings.Contains(got, "-helo wrld") || !strings.Contains(got, "+hello world") {
			t.Errorf("the edit's diff is not shown:\n%s", got)
		}
		term.send("boom")
		term.expect("you> ")
		lines := finish(t, term, cmd)
		if n := count(lines, "the model is overloaded"); n != 1 {
			t.Errorf("the model error is printed %d times, want once:\n%s", n, strings.Join(lines, "\n"))
		}
	})

	t.Run("denied at the terminal", func(t *testing.T) {
		ws := t.TempDir()
		os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("helo wrld\n"), 0o644)
		pol := filepath.Join(t.TempDir(), "ask-edits.cedar")
		os.WriteFile(pol, []byte(`@id("all") permit(principal, action, resource);
@id("edits") @ask @reason("edits need a person")
forbid(principal, action == Keel::Action::"edit_file", resource);
`), 0o644)
		term, cmd := start(t, &chatServer{}, ws, "--policy", pol)
		term.send("please fix the typo in notes.txt")
		term.expect("always for this agent: ")
		term.send("n")
		term.expect("told): ")
		term.send("not now")
		term.expect("you> ")
		lines := finish(t, term, cmd)
		all := strings.Join(lines, "\n")
		if n := count(lines, "not now"); n != 2 { // the typed reason, and the result
			t.Errorf("the denial is said %d times with its reason, want once (besides the typed reason):\n%s", n-1, all)
		}
		if n := count(lines, "edits need a person"); n != 1 {
			t.Errorf("the reason of the question is printed %d times, want once:\n%s", n, all)
		}
		if count(lines, "keel: denied") > 0 {
			t.Errorf("the denial is said before its result says it:\n%s", all)
		}
		if strings.Contains(all, "approval needed for") {
			t.Errorf("an approve hint precedes the question at the terminal:\n%s", all)
		}
	})
}

// keel chat with stdin piped (not a terminal) prints its answers on
// stdout, as keel run prints its output: before, they went to stderr
// only.
func TestChatPipedAnswersOnStdout(t *testing.T) {
	db := setup(t)
	srv := httptest.NewServer(&chatServer{})
	defer srv.Close()
	args, _ := json.Marshal([]string{"chat", "--db", db, "--model", "openai-compatible:chat-test@" + srv.URL + "/v1",
		"--sandbox", "none", "--workspace", t.TempDir(), "Look around"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args))
	cmd.Stdin = strings.NewReader("what now?\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("keel chat: %v\n%s", err, stderr.String())
	}
	if got := stdout.String(); got != "Answer 1.\nAnswer 2.\n" {
		t.Errorf("stdout = %q, want both answers\nstderr:\n%s", got, stderr.String())
	}
}

// keel chat goes on after a step limit: its end says to raise the limit
// with /limit; a message typed before that is not sent (nor journaled),
// since the run would stop again at once; after /limit the next message
// goes on under the new limit (fresh-user trial 12, N9: every message
// failed at once, and the chat offered no way to raise the limit).
func TestChatRaisesALimit(t *testing.T) {
	db := setup(t)
	srv := httptest.NewServer(&chatServer{})
	defer srv.Close()
	args, _ := json.Marshal([]string{"chat", "--db", db, "--model", "openai-compatible:chat-test@" + srv.URL + "/v1",
		"--sandbox", "none", "--workspace", t.TempDir(), "--max-steps", "1", "Look around"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args))
	cmd.Stdin = strings.NewReader("what now?\nagain\n/limit --max-steps 0\n/limit --max-steps 3\nand now?\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Run()
	errOut := stderr.String()
	for _, want := range []string{
		"keel: to go on, raise the limit: /limit --max-steps 2, then type your next message",
		"keel: not sent: run ",
		`/limit --max-steps "0": want a number of model calls above 0`,
		"keel: /limit: --max-steps 3 from your next message on",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("keel chat's stderr lacks %q:\n%s", want, errOut)
		}
	}
	if got := stdout.String(); got != "Answer 1.\nAnswer 2.\n" {
		t.Errorf("stdout = %q, want the answer to the task and to the message after /limit\nstderr:\n%s", got, errOut)
	}
	id, st := lastRun(t, db)
	if st.Status != journal.StatusCompleted {
		t.Errorf("run %s is %s, want completed", id, st.Status)
	}
	code, out, _ := keel(t, "--db", db, "runs", "show", id, "--json")
	if code != 0 {
		t.Fatal(out)
	}
	var users []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e journal.Event
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		if v, err := agent.Decode(&e); err == nil {
			if m, ok := v.(*agent.UserMessage); ok {
				users = append(users, m.Content)
			}
		}
	}
	if strings.Join(users, "|") != "what now?|and now?" {
		t.Errorf("user messages journaled %q, want what now? and and now? (not the one typed at the limit)", users)
	}
}

// keel chat without a task checks its command line before it asks for
// the task: a bad --policy is said at once, and nothing typed is lost
// (fresh-user trial 12, N15); --policy demo names keel demo's policy, as
// the API and the web UI do.
func TestChatChecksFlagsBeforeTheTask(t *testing.T) {
	db := setup(t)
	chat := func(extra ...string) (int, string) {
		args, _ := json.Marshal(append([]string{"chat", "--db", db, "--model", "scripted:demo", "--sandbox", "none", "--workspace", t.TempDir()}, extra...))
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args))
		cmd.Stdin = strings.NewReader("fix the failing test\n")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Run()
		return cmd.ProcessState.ExitCode(), stderr.String()
	}
	code, errOut := chat("--policy", "nosuch.toml")
	if code != 2 || strings.Contains(errOut, "type the task") || !strings.Contains(errOut, "--policy: read nosuch.toml: no such file or directory (a policy file; the built-in policies are default and demo)") {
		t.Errorf("keel chat --policy nosuch.toml = %d, want 2 before the task is asked:\n%s", code, errOut)
	}
	code, errOut = chat("--policy", "demo")
	if strings.Contains(errOut, "--policy") || !strings.Contains(errOut, "type the task") {
		t.Errorf("keel chat --policy demo = %d:\n%s", code, errOut)
	}
}
