package tui_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/tui"
)

// lines is a writer that hands each write to a channel.
type lines chan string

func (l lines) Write(p []byte) (int, error) { l <- string(p); return len(p), nil }

// The first Ctrl-C cancels the command, the second says the run is being
// closed and that a third exits at once, and the third does: exit
// status 130 with the terminal restored, saying what may be left open
// and how to go on or close it. It no longer does nothing until the
// close's 30 seconds are up.
func TestSignalContextThirdSignalExits(t *testing.T) {
	out := make(lines, 4)
	exited := make(chan int, 1)
	var restored sync.WaitGroup
	restored.Add(1)
	ctx, stop := tui.SignalContext(t.Context(), &tui.SignalOptions{Stderr: out, Restore: restored.Done, Hurry: time.Hour,
		Exit: func(code int) { exited <- code }})
	defer stop()
	kill := func() {
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
	}
	kill()
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), agent.ErrUserCanceled) {
		t.Fatalf("the first signal canceled with %v", context.Cause(ctx))
	}
	kill()
	if got := <-out; !strings.Contains(got, "closing the run first") || !strings.Contains(got, "a third Ctrl-C exits at once") {
		t.Errorf("after the second signal: %q", got)
	}
	kill()
	if code := <-exited; code != 130 {
		t.Errorf("exit status %d, want 130", code)
	}
	restored.Wait()
	if got := <-out; !strings.Contains(got, "exiting at once (a third signal) before the run closed") ||
		!strings.Contains(got, "keel runs resume RUN goes on with it, keel runs cancel RUN closes it") {
		t.Errorf("after the third signal: %q", got)
	}
}
