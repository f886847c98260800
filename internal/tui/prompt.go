package tui

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/keel-run/keel/agent"
)

// Ctrl-C in a conversation (keel chat, keel run -i) interrupts the turn,
// not the command, as in Claude Code or Codex: the model call or the
// running commands stop (their process groups killed by the sandbox),
// the run journals the interruption (agent.ErrInterrupted: results that
// say so, a note the model reads at its next call, run.paused with
// reason "interrupted"), and the prompt comes back in the same run. At
// the prompt, a first Ctrl-C says how to leave and a second one leaves,
// as Ctrl-D and /exit do. A second Ctrl-C while a turn is still stopping
// stops the run as in keel run (and a third exits at once).

// Prompt is the person at the terminal of a conversation: the lines
// they type (stdin, read by one goroutine) and their Ctrl-C. Err is
// where questions are printed (stderr, escaped); In, when set before the
// first question, replaces stdin.
type Prompt struct {
	Err io.Writer
	In  io.Reader

	intr      interrupts
	linesOnce sync.Once
	lineCh    chan line
}

// Take gives a SIGINT to the conversation, and reports whether it took
// it (else the command is canceled): signalContext's take.
func (pr *Prompt) Take() bool { return pr.intr.take() }

// interrupts routes SIGINT: to the conversation's handler while one is
// set, else to the command (signalContext cancels it). Safe for
// concurrent use.
type interrupts struct {
	mu sync.Mutex
	on func() bool
}

// set makes f the handler of the next SIGINTs (nil: none). f reports
// whether it took the signal; if not, the command is canceled.
func (i *interrupts) set(f func() bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.on = f
}

// take gives a SIGINT to the handler, and reports whether it took it.
func (i *interrupts) take() bool {
	i.mu.Lock()
	f := i.on
	i.mu.Unlock()
	return f != nil && f()
}

// Turn executes one turn of a conversation with do: a Ctrl-C during it
// cancels do's context with agent.ErrInterrupted, and interrupted
// reports that it did (and that the command itself goes on).
func (pr *Prompt) Turn(ctx context.Context, do func(context.Context) error) (interrupted bool, err error) {
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	taken := false
	pr.intr.set(func() bool {
		mu.Lock()
		defer mu.Unlock()
		if taken {
			return false // a second Ctrl-C: the command stops
		}
		taken = true
		fmt.Fprintln(pr.Err, "\nkeel: interrupting (Ctrl-C again stops the run)")
		cancel(agent.ErrInterrupted)
		return true
	})
	defer pr.intr.set(nil)
	err = do(tctx)
	return errors.Is(context.Cause(tctx), agent.ErrInterrupted) && ctx.Err() == nil, err
}

// AtPrompt makes Ctrl-C at the prompt say how to leave the first time
// and leave (cancel the command) the second; typing a line starts over.
func (pr *Prompt) AtPrompt() {
	var mu sync.Mutex
	n := 0
	pr.intr.set(func() bool {
		mu.Lock()
		defer mu.Unlock()
		n++
		if n > 1 {
			return false
		}
		fmt.Fprint(pr.Err, "\nkeel: Ctrl-C again, Ctrl-D or /exit leaves; or type your next message\nyou> ")
		return true
	})
}

// line is one line the person typed, or the end of input.
type line struct {
	s   string
	err error
}

// lines returns the person's lines, read from stdin by one goroutine
// (started on first use) so that a question can be given up when its
// context ends (Ctrl-C) while the read goes on.
func (pr *Prompt) lines() <-chan line {
	pr.linesOnce.Do(func() {
		var in io.Reader = os.Stdin
		if pr.In != nil {
			in = pr.In
		}
		r := bufio.NewReader(in)
		ch := make(chan line)
		pr.lineCh = ch
		go func() {
			for {
				s, err := r.ReadString('\n')
				ch <- line{s, err}
				if err != nil {
					close(ch)
					return
				}
			}
		}()
	})
	return pr.lineCh
}

// Ask prints prompt and reads one line; ok is false at the end of input
// or when ctx ends.
func (pr *Prompt) Ask(ctx context.Context, prompt string) (s string, ok bool) {
	fmt.Fprint(pr.Err, prompt)
	var l line
	select {
	case l, ok = <-pr.lines():
		if !ok {
			l.err = io.EOF
		}
	case <-ctx.Done():
		fmt.Fprintln(pr.Err)
		return "", false
	}
	if l.err != nil && (l.s == "" || !errors.Is(l.err, io.EOF)) {
		fmt.Fprintln(pr.Err)
		return "", false
	}
	return strings.TrimRight(l.s, "\r\n"), true
}

// Done ends the conversation's hold on Ctrl-C: the next one cancels
// the command.
func (pr *Prompt) Done() { pr.intr.set(nil) }
