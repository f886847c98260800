package sandboxtest

import (
	"bufio"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/keel-run/keel/sandbox"
)

// RunStdin checks that a command given Cmd.Stdin reads it: a reader is
// copied in, and an *os.File serves an interactive exchange (line in,
// line out) while the command runs, with no wall-time limit when Timeout
// is negative; a nil Stdin reads as end of file. [Run] includes it; a
// backend that cannot pass Run's isolation checks (sandbox/none) runs it
// alone.
func RunStdin(t *testing.T, newFn NewFunc) {
	t.Parallel()
	sb, _ := newSandbox(t, newFn, nil)
	t.Run("reader", func(t *testing.T) {
		res, out := run(t, sb, sandbox.Cmd{Args: []string{"tr", "a-z", "A-Z"}, Stdin: strings.NewReader("hello\n")})
		if res.ExitCode != 0 || out != "HELLO\n" {
			t.Errorf("tr = exit %d, %q; want 0, %q", res.ExitCode, out, "HELLO\n")
		}
	})
	t.Run("interactive", func(t *testing.T) {
		inR, inW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer inR.Close()
		outR, outW := io.Pipe()
		done := make(chan *sandbox.Result, 1)
		go func() {
			res, err := sb.Exec(context.Background(), &sandbox.Cmd{
				Args:    bash(`while read -r l; do echo "got $l"; done; echo bye`),
				Stdin:   inR,
				Stdout:  outW,
				Timeout: -1,
			})
			if err != nil {
				t.Errorf("Exec: %v", err)
			}
			outW.Close()
			done <- res
		}()
		lines := bufio.NewReader(outR)
		for _, w := range []string{"one", "two"} {
			if _, err := io.WriteString(inW, w+"\n"); err != nil {
				t.Fatal(err)
			}
			got, err := lines.ReadString('\n')
			if err != nil || got != "got "+w+"\n" {
				t.Fatalf("reply to %q = %q, %v", w, got, err)
			}
		}
		inW.Close()
		if got, _ := lines.ReadString('\n'); got != "bye\n" {
			t.Errorf("after EOF: %q, want bye", got)
		}
		io.Copy(io.Discard, outR)
		if res := <-done; res == nil || res.ExitCode != 0 {
			t.Errorf("result %+v, want exit 0", res)
		}
	})
	t.Run("nil is EOF", func(t *testing.T) {
		res, out := run(t, sb, sandbox.Cmd{Args: bash("cat; echo end")})
		if res.ExitCode != 0 || out != "end\n" {
			t.Errorf("cat = exit %d, %q", res.ExitCode, out)
		}
	})
}
