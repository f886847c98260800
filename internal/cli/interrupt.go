package cli

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

// turn executes one turn of a conversation with do: a Ctrl-C during it
// cancels do's context with agent.ErrInterrupted, and interrupted
// reports that it did (and that the command itself goes on).
func (a *app) turn(ctx context.Context, do func(context.Context) error) (interrupted bool, err error) {
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	taken := false
	a.intr.set(func() bool {
		mu.Lock()
		defer mu.Unlock()
		if taken {
			return false // a second Ctrl-C: the command stops
		}
		taken = true
		fmt.Fprintln(a.stderr, "\nkeel: interrupting (Ctrl-C again stops the run)")
		cancel(agent.ErrInterrupted)
		return true
	})
	defer a.intr.set(nil)
	err = do(tctx)
	return errors.Is(context.Cause(tctx), agent.ErrInterrupted) && ctx.Err() == nil, err
}

// atPrompt makes Ctrl-C at the prompt say how to leave the first time
// and leave (cancel the command) the second; typing a line starts over.
func (a *app) atPrompt() {
	var mu sync.Mutex
	n := 0
	a.intr.set(func() bool {
		mu.Lock()
		defer mu.Unlock()
		n++
		if n > 1 {
			return false
		}
		fmt.Fprint(a.stderr, "\nkeel: Ctrl-C again, Ctrl-D or /exit leaves; or type your next message\nyou> ")
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
func (a *app) lines() <-chan line {
	a.linesOnce.Do(func() {
		if a.in == nil {
			a.in = bufio.NewReader(os.Stdin)
		}
		ch := make(chan line)
		a.lineCh = ch
		go func() {
			for {
				s, err := a.in.ReadString('\n')
				ch <- line{s, err}
				if err != nil {
					close(ch)
					return
				}
			}
		}()
	})
	return a.lineCh
}

// ask prints prompt and reads one line; ok is false at the end of input
// or when ctx ends.
func (a *app) ask(ctx context.Context, prompt string) (s string, ok bool) {
	fmt.Fprint(a.stderr, prompt)
	var l line
	select {
	case l, ok = <-a.lines():
		if !ok {
			l.err = io.EOF
		}
	case <-ctx.Done():
		fmt.Fprintln(a.stderr)
		return "", false
	}
	if l.err != nil && (l.s == "" || !errors.Is(l.err, io.EOF)) {
		fmt.Fprintln(a.stderr)
		return "", false
	}
	return strings.TrimRight(l.s, "\r\n"), true
}
