package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// heldServer is an OpenAI-compatible endpoint that streams "Answer
// part one." and holds the rest of its answer (" And part two.") until
// release is closed, or the request ends.
type heldServer struct{ release chan struct{} }

func (s *heldServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	chunk := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-held", "object": "chat.completion.chunk", "created": 1727346180,
			"model": "chat-test", "choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	chunk(map[string]any{"content": "Answer part one."}, nil)
	select {
	case <-s.release:
	case <-r.Context().Done():
		return
	}
	chunk(map[string]any{"content": " And part two."}, nil)
	chunk(map[string]any{}, "stop")
	b, _ := json.Marshal(map[string]any{"id": "chatcmpl-held", "object": "chat.completion.chunk", "created": 1727346180, "model": "chat-test",
		"choices": []any{}, "usage": map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
}

// keel run at a terminal (stdout and stderr on one screen; fresh-user
// trial 10):
//   - the answer streamed on the terminal is not printed again after the
//     run's final line;
//   - what the person types while the answer streams does not land in
//     the middle of it (the echo is off while the run executes);
//   - the terminal's echo is back on when keel run exits, whether the run
//     completed or the person pressed Ctrl-C.
func TestRunScreen(t *testing.T) {
	start := func(t *testing.T) (*terminal, *exec.Cmd, *os.File, *heldServer) {
		db := setup(t)
		h := &heldServer{release: make(chan struct{})}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		args, _ := json.Marshal([]string{"run", "--db", db, "--model", "openai-compatible:chat-test@" + srv.URL + "/v1",
			"--sandbox", "none", "--workspace", t.TempDir(), "say something"})
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args), "TERM=xterm")
		// The test keeps the terminal's side open, to read its settings
		// after keel run exits (the output ends when it closes it).
		ptm, tty, err := pty.Open()
		if err != nil {
			t.Skipf("no pseudo-terminal: %v", err)
		}
		t.Cleanup(func() { tty.Close() })
		if err := pty.Setsize(ptm, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
			t.Fatal(err)
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return watchTerminal(t, cmd, ptm), cmd, tty, h
	}
	echoOn := func(t *testing.T, tty *os.File) {
		t.Helper()
		tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if tio.Lflag&unix.ECHO == 0 {
			t.Errorf("the terminal's echo is off after keel run exited")
		}
	}

	t.Run("completed", func(t *testing.T) {
		term, cmd, tty, h := start(t)
		term.expect("Answer part one.")
		if _, err := term.f.Write([]byte("TYPED-AHEAD")); err != nil { // no Enter
			t.Fatal(err)
		}
		close(h.release)
		term.expect("completed (answer)")
		if err := cmd.Wait(); err != nil {
			t.Fatalf("keel run: %v\n%s", err, term.text())
		}
		echoOn(t, tty)
		tty.Close() // the output ends
		<-term.done
		lines := screen(term.text())
		all := strings.Join(lines, "\n")
		if n := strings.Count(all, "And part two."); n != 1 {
			t.Errorf("the answer is on the screen %d times, want once:\n%s", n, all)
		}
		if strings.Contains(all, "TYPED-AHEAD") {
			t.Errorf("what the person typed landed in the output:\n%s", all)
		}
	})

	t.Run("Ctrl-C", func(t *testing.T) {
		term, cmd, tty, _ := start(t)
		term.expect("Answer part one.")
		term.f.Write([]byte{3})
		err := cmd.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
			t.Errorf("keel run after Ctrl-C: %v, want exit status 130", err)
		}
		echoOn(t, tty)
	})
}
