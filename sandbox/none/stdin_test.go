//go:build unix

package none_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/keel-run/keel/sandbox"
)

// A command given Cmd.Stdin reads it: a reader is copied in, and an
// *os.File serves an interactive exchange while the command runs.
func TestStdin(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, &sandbox.Spec{Workspace: t.TempDir()})
	t.Run("reader", func(t *testing.T) {
		var out bytes.Buffer
		res, err := sb.Exec(context.Background(), &sandbox.Cmd{Args: []string{"tr", "a-z", "A-Z"}, Stdin: strings.NewReader("hello\n"), Stdout: &out})
		if err != nil || res.ExitCode != 0 || out.String() != "HELLO\n" {
			t.Errorf("tr = %+v, %v, %q; want exit 0, %q", res, err, out.String(), "HELLO\n")
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
				Args:    []string{"bash", "-c", `while read -r l; do echo "got $l"; done; echo bye`},
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
}
