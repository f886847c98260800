package tui

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/visible"
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
	// held are lines typed during a turn that a question set aside for
	// the next message.
	held []line

	// printer is the printer of the turn running now (Attach), which
	// draws the status block; notices go through it.
	mu      sync.Mutex
	printer *Printer
	// term is stdin when it is a terminal; during a turn its echo is off
	// (quiet), so that what the person types does not land in the
	// middle of the answer: a line typed then is the next message.
	term  *terminalInput
	quiet atomic.Bool
	// pushes counts the ends of turns whose unfinished line the
	// terminal was made to hand over (pushPartial).
	pushes atomic.Int64
}

// Attach makes p the printer of the turn running now (nil: none):
// notices to the person go through it, so that they erase its status
// block first instead of leaving it on the screen.
func (pr *Prompt) Attach(p *Printer) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.printer = p
}

// say prints a notice, through the attached printer when there is one.
func (pr *Prompt) say(s string) {
	pr.mu.Lock()
	p := pr.printer
	pr.mu.Unlock()
	if p != nil {
		p.Note(s)
		return
	}
	fmt.Fprint(pr.Err, s)
}

// Take gives a SIGINT to the conversation, and reports whether it took
// it (else the command is canceled): SignalContext's Take.
func (pr *Prompt) Take() bool { return pr.intr.take() }

// interrupts routes SIGINT: to the conversation's handler while one is
// set, else to the command (SignalContext cancels it). Safe for
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
		pr.say("keel: interrupting (Ctrl-C again stops the run)\n")
		cancel(agent.ErrInterrupted)
		return true
	})
	defer pr.intr.set(nil)
	pr.echo(false)
	defer func() {
		pr.echo(true)
		pr.pushPartial()
	}()
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

// line is one line the person typed, or the end of input; ahead marks
// a line typed during a turn (the echo off); partial, text typed during
// a turn without Enter (never a message: the person did not see it at
// the prompt).
type line struct {
	s       string
	err     error
	ahead   bool
	partial bool
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
		ch := make(chan line, 16)
		pr.lineCh = ch
		if pr.input() != nil {
			go pr.readTerminal(in, ch)
			return
		}
		r := bufio.NewReader(in)
		go func() {
			for {
				s, err := r.ReadString('\n')
				ch <- line{s: s, err: err, ahead: pr.quiet.Load()}
				if err != nil {
					close(ch)
					return
				}
			}
		}()
	})
	return pr.lineCh
}

// readTerminal sends the lines the person types at the terminal in to
// ch, as lines does. What the terminal hands over without a newline
// after the end of a turn (pushPartial) is text typed during the turn
// without Enter: it is sent as a partial line, so that it is never glued
// to the front of the next line typed at the prompt, unseen (the echo
// was off when it was typed).
func (pr *Prompt) readTerminal(in io.Reader, ch chan<- line) {
	buf := make([]byte, 4096)
	var acc []byte
	var taken int64 // pushes whose partial line was sent
	for {
		n, err := in.Read(buf)
		acc = append(acc, buf[:n]...)
		for {
			i := bytes.IndexByte(acc, '\n')
			if i < 0 {
				break
			}
			ch <- line{s: string(acc[:i+1]), ahead: pr.quiet.Load()}
			acc = acc[i+1:]
		}
		if p := pr.pushes.Load(); len(acc) > 0 && err == nil && p > taken {
			taken = p
			ch <- line{s: string(acc), ahead: true, partial: true}
			acc = nil
		}
		if err != nil {
			ch <- line{s: string(acc), err: err, ahead: pr.quiet.Load()}
			close(ch)
			return
		}
	}
}

// unsent says that text typed during a turn without Enter is not sent.
func (pr *Prompt) unsent(l line) {
	if t := strings.TrimSpace(l.s); t != "" {
		fmt.Fprintf(pr.Err, "keel: not sent (typed without Enter while the run worked): %s\n", visible.String(t))
	}
}

// Ask prints a question and reads the answer, one line; ok is false at
// the end of input or when ctx ends. Lines typed during the turn before
// the question are not answers: they are kept for the next message.
func (pr *Prompt) Ask(ctx context.Context, prompt string) (s string, ok bool) {
	if pr.quiet.Load() {
		pr.echo(true)
		defer pr.echo(false)
	}
	pr.drain()
	fmt.Fprint(pr.Err, prompt)
	for i, l := range pr.held {
		if !l.ahead {
			pr.held = append(pr.held[:i], pr.held[i+1:]...)
			return pr.answer(l)
		}
	}
	for {
		select {
		case l, ok := <-pr.lines():
			if !ok {
				return pr.answer(line{err: io.EOF})
			}
			if l.ahead && l.err == nil {
				pr.held = append(pr.held, l)
				continue
			}
			return pr.answer(l)
		case <-ctx.Done():
			fmt.Fprintln(pr.Err)
			return "", false
		}
	}
}

// Message prints prompt and reads the person's next message: a line
// typed during the turn (shown after the prompt: the terminal did not
// echo it), else the next line typed.
func (pr *Prompt) Message(ctx context.Context, prompt string) (s string, ok bool) {
	pr.drain()
	for len(pr.held) > 0 && pr.held[0].partial {
		pr.unsent(pr.held[0])
		pr.held = pr.held[1:]
	}
	if len(pr.held) > 0 {
		l := pr.held[0]
		pr.held = pr.held[1:]
		if l.ahead {
			fmt.Fprintf(pr.Err, "%s%s\n", prompt, visible.String(strings.TrimRight(l.s, "\r\n")))
		} else {
			fmt.Fprint(pr.Err, prompt)
		}
		return pr.answer(l)
	}
	fmt.Fprint(pr.Err, prompt)
	for {
		select {
		case l, ok := <-pr.lines():
			if !ok {
				return pr.answer(line{err: io.EOF})
			}
			if l.partial {
				fmt.Fprintln(pr.Err)
				pr.unsent(l)
				fmt.Fprint(pr.Err, prompt)
				continue
			}
			return pr.answer(l)
		case <-ctx.Done():
			fmt.Fprintln(pr.Err)
			return "", false
		}
	}
}

// drain moves the lines read so far to held, without waiting.
func (pr *Prompt) drain() {
	for {
		select {
		case l, ok := <-pr.lines():
			if !ok {
				pr.held = append(pr.held, line{err: io.EOF})
				return
			}
			pr.held = append(pr.held, l)
			if l.err != nil {
				return
			}
		default:
			return
		}
	}
}

// dropAhead drops the lines typed before the person interrupted a turn:
// by pressing Ctrl-C they took control back, and a line queued for the
// next message is not sent unasked. Each is shown, to type again.
func (pr *Prompt) dropAhead() {
	pr.drain()
	kept := pr.held[:0]
	for _, l := range pr.held {
		if l.err != nil {
			kept = append(kept, l) // the end of input stays
			continue
		}
		if l.partial {
			pr.unsent(l)
			continue
		}
		if t := strings.TrimRight(l.s, "\r\n"); strings.TrimSpace(t) != "" {
			fmt.Fprintf(pr.Err, "keel: not sent (typed before you interrupted): %s\n", visible.String(t))
		}
	}
	pr.held = kept
}

// answer returns the line l as Ask and Message do.
func (pr *Prompt) answer(l line) (s string, ok bool) {
	if l.err != nil && (l.s == "" || !errors.Is(l.err, io.EOF)) {
		fmt.Fprintln(pr.Err)
		return "", false
	}
	return strings.TrimRight(l.s, "\r\n"), true
}

// Done ends the conversation's hold on Ctrl-C: the next one cancels
// the command.
func (pr *Prompt) Done() { pr.intr.set(nil) }
