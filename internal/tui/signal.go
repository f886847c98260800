package tui

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/keel-run/keel/agent"
)

// SignalOptions say how [SignalContext] handles a command's signals.
type SignalOptions struct {
	// Stderr is where it says what a signal does.
	Stderr io.Writer
	// Take, if set, is offered each SIGINT first: one it takes (a
	// conversation interrupting its turn) cancels nothing.
	Take func() bool
	// Restore, if set, puts the terminal back as it was (echo on)
	// before the process exits without closing the run.
	Restore func()
	// Hurry is how long a second signal waits for the run to close
	// before the process exits anyway (0: SignalHurry).
	Hurry time.Duration
	// Exit ends the process (nil: os.Exit).
	Exit func(code int)
}

// SignalHurry is how long keel waits, after a second signal, for the
// run it cancels to close before it exits anyway. Stopping a tool call
// takes at most its kill grace (seconds); this is for a close that
// hangs (a server that does not answer).
const SignalHurry = 30 * time.Second

// SignalContext cancels ctx with agent.ErrUserCanceled on the first
// SIGINT, SIGTERM or SIGHUP (the terminal closed), unless o.Take takes
// the SIGINT. A second signal does not cut the cancel short: the open
// tool call is being stopped and recorded and the run closed (locally
// `run.canceled`, with --server the cancel request), and exiting then
// would leave the run interrupted, or going on on the server, with
// nothing said (a supervisor signalling the process group, or two quick
// Ctrl-Cs, sends two). It says so, and that a third exits at once. A
// third signal, or the close not finished o.Hurry after the second,
// exits with status 130 after o.Restore, saying what may be left open
// and how to close it. SIGHUP is left alone when it is ignored
// (`nohup keel run`): signal.Notify would stop ignoring it. SIGPIPE is
// caught for the whole command (see the comment below). The returned
// function stops all of this.
func SignalContext(parent context.Context, o *SignalOptions) (context.Context, context.CancelFunc) {
	hurry, exit := o.Hurry, o.Exit
	if hurry <= 0 {
		hurry = SignalHurry
	}
	if exit == nil {
		exit = os.Exit
	}
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 3)
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	signal.Notify(ch, sigs...)
	// A closed pipe on stdout or stderr (keel run ... | head) must not kill
	// the process mid-call: with SIGPIPE caught, writes to it fail with
	// EPIPE instead and the run goes on to its end (or to Ctrl-C), every
	// call with its result. The disposition is not inherited by commands.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-pipe:
			case <-done:
				return
			}
		}
	}()
	leave := func(why string) {
		if o.Restore != nil {
			o.Restore() // the terminal as it was (echo on)
		}
		fmt.Fprintf(o.Stderr, "keel: %s; the run may be left interrupted (or going on, with --server): keel runs list shows it, keel runs resume RUN goes on with it, keel runs cancel RUN closes it\n", why)
		exit(130)
	}
	go func() {
	wait:
		for {
			select {
			case s := <-ch:
				if s == os.Interrupt && o.Take != nil && o.Take() {
					continue
				}
				cancel(agent.ErrUserCanceled)
				break wait
			case <-done:
				return
			}
		}
		select {
		case <-ch:
		case <-done:
			return
		}
		fmt.Fprintln(o.Stderr, "keel: closing the run first: its open tool call is stopped and recorded, and the run canceled (a moment; a third Ctrl-C exits at once)")
		t := time.NewTimer(hurry)
		defer t.Stop()
		select {
		case <-ch:
			leave("exiting at once (a third signal) before the run closed")
		case <-t.C:
			leave(fmt.Sprintf("the run did not close within %s", hurry))
		case <-done:
		}
	}()
	return ctx, func() { signal.Stop(ch); signal.Stop(pipe); close(done); cancel(nil) }
}
