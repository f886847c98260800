package tui

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// terminalInput is stdin when it is a terminal: the echo of what the
// person types is turned off during a turn and back on at the prompt.
type terminalInput struct {
	mu   sync.Mutex
	fd   int
	orig *unix.Termios // the settings before the first change
}

// input returns stdin as a terminal, or nil (In is set, or stdin is not
// a terminal).
func (pr *Prompt) input() *terminalInput {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.term != nil {
		return pr.term
	}
	f, ok := pr.In.(*os.File)
	if pr.In == nil {
		f, ok = os.Stdin, true
	}
	if ok && IsTerminal(f) {
		pr.term = &terminalInput{fd: int(f.Fd())}
	}
	return pr.term
}

// echo turns the terminal's echo of typed input on or off (quiet), and
// notes it: a line read while it is off was typed during a turn. When it
// goes off, the person's lines are read from then on (lines), so that a
// line typed meanwhile is known as typed ahead, never taken for the
// answer to a question asked later.
func (pr *Prompt) echo(on bool) {
	pr.quiet.Store(!on)
	t := pr.input()
	if t == nil {
		return
	}
	if !on {
		pr.lines()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, err := unix.IoctlGetTermios(t.fd, unix.TCGETS)
	if err != nil {
		return
	}
	if t.orig == nil {
		o := *cur
		t.orig = &o
	}
	next := *cur
	if on {
		next.Lflag |= t.orig.Lflag & (unix.ECHO | unix.ECHONL)
	} else {
		next.Lflag &^= unix.ECHO | unix.ECHONL
	}
	if next.Lflag != cur.Lflag {
		_ = unix.IoctlSetTermios(t.fd, unix.TCSETS, &next)
	}
}

// pushPartial makes the terminal hand over what the person typed
// during a turn without pressing Enter: the echo was off, so they do not
// see it at the prompt, and in the terminal's line buffer it would be
// the unseen start of the next line they type (a "/help" sent to the
// model as "hello/help"). Turning the terminal's line mode off and on
// again ends that unfinished line (Linux's n_tty hands it to the reader
// as a line of its own); readTerminal sends it as a partial line.
func (pr *Prompt) pushPartial() {
	t := pr.input()
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, err := unix.IoctlGetTermios(t.fd, unix.TCGETS)
	if err != nil || cur.Lflag&unix.ICANON == 0 {
		return
	}
	pr.pushes.Add(1)
	raw := *cur
	raw.Lflag &^= unix.ICANON
	if unix.IoctlSetTermios(t.fd, unix.TCSETS, &raw) == nil {
		_ = unix.IoctlSetTermios(t.fd, unix.TCSETS, cur)
	}
}

// Quiet turns the terminal's echo off while a run executes in front of
// the person outside a conversation (keel run, keel runs resume, keel
// demo), as a conversation's turn does: what they type meanwhile does
// not land in the middle of the run's output, and a line typed then is
// no answer to a question asked later (Ask). The returned function turns
// the echo back on.
func (pr *Prompt) Quiet() (restore func()) {
	pr.echo(false)
	return func() { pr.echo(true) }
}

// Restore turns the terminal's echo back on, as it was before Keel
// turned it off: for a process that exits at once (a third Ctrl-C).
func (pr *Prompt) Restore() {
	if pr.quiet.Load() {
		pr.echo(true)
	}
}
