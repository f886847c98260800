package tui

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/creack/pty"
)

// lockedBuffer is a bytes.Buffer safe for the prompt's writes and the
// test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Text typed at the terminal during a turn without Enter is not glued,
// unseen, to the front of the next line typed at the prompt (fresh-user
// trial 12, B8: "hello" typed while the model worked, then "/help" at
// the prompt, sent "hello/help" to the model): it is said not to be
// sent, and the line typed at the prompt is the message. A whole line
// typed during the turn is still the next message.
func TestTypedWithoutEnterIsNotGlued(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	go func() { // the terminal's echo, read and dropped
		buf := make([]byte, 1024)
		for {
			if _, err := ptmx.Read(buf); err != nil {
				return
			}
		}
	}()
	var errOut lockedBuffer
	pr := &Prompt{Err: &errOut, In: tty}
	ctx := context.Background()
	_, err = pr.Turn(ctx, func(context.Context) error {
		if _, err := ptmx.Write([]byte("what now?\nhello typed while streaming")); err != nil {
			return err
		}
		// The whole line arrives while the turn runs; the rest of the
		// same write is in the terminal's line buffer by then.
		l := <-pr.lines()
		pr.held = append(pr.held, l)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := pr.Message(ctx, "you> "); !ok || m != "what now?" {
		t.Fatalf("the line typed during the turn: %q, %v; want what now?", m, ok)
	}
	if _, err := ptmx.Write([]byte("/help\n")); err != nil {
		t.Fatal(err)
	}
	if m, ok := pr.Message(ctx, "you> "); !ok || m != "/help" {
		t.Errorf("the line typed at the prompt: %q, %v; want /help\n%s", m, ok, errOut.String())
	}
	if !strings.Contains(errOut.String(), "keel: not sent (typed without Enter while the run worked): hello typed while streaming") {
		t.Errorf("no notice of the text not sent:\n%s", errOut.String())
	}
}

// After an interrupted turn, the chat says once that the model is told
// at the next message, not again before every prompt after a command
// (fresh-user trial 12, N10).
func TestInterruptedSaidOnce(t *testing.T) {
	errOut := &lockedBuffer{}
	prompts := make(chan struct{}, 8)
	in, typed := io.Pipe()
	pr := &Prompt{Err: promptWatch{errOut, prompts}, In: in}
	n := 0
	cmds := []Command{{Name: "cost", Help: "what the run spent", Do: func(context.Context, string) error { n++; return nil }}}
	exec := func(context.Context, string) error {
		t.Error("a command was sent to the model")
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pr.Converse(context.Background(), "run1", "keel", nil, true, func(error) bool { return true }, cmds, exec)
	}()
	for _, l := range []string{"/cost\n", "/cost\n"} {
		<-prompts // typed at the prompt, after what comes before it
		io.WriteString(typed, l)
	}
	<-prompts
	typed.Close()
	<-done
	if n != 2 {
		t.Errorf("/cost ran %d times, want 2:\n%s", n, errOut.String())
	}
	if c := strings.Count(errOut.String(), "keel: interrupted;"); c != 1 {
		t.Errorf("the interruption is said %d times, want once:\n%s", c, errOut.String())
	}
}

// promptWatch writes to w and signals each prompt written.
type promptWatch struct {
	w       io.Writer
	prompts chan<- struct{}
}

func (p promptWatch) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if bytes.HasSuffix(b, []byte("you> ")) {
		p.prompts <- struct{}{}
	}
	return n, err
}
