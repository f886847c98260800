package tui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// keel run with stdout and stderr on one terminal prints the final
// answer once, whole (fresh-user trial 6: the answer was printed on
// stderr as it came and again on stdout after the final line); with
// stdout elsewhere (a pipe, a file) the answer goes there too, as README
// says.
func TestAnswerOnceAtOneTerminal(t *testing.T) {
	for _, answer := range []string{"finished: THE END", strings.Repeat("progress line, ", 40) + "THE END"} {
		answerOnce(t, answer)
	}
}

func answerOnce(t *testing.T, answer string) {
	print := func(t *testing.T, stderr, stdout io.Writer) {
		p := NewPrinter(stderr, stdout, false, false)
		b, _ := json.Marshal(&agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: answer}})
		p.Event(journal.Event{RunID: "r1", Seq: 2, Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Type: journal.ModelResponded, Payload: b})
		p.Footer("r1", &agent.Outcome{Status: journal.StatusCompleted, End: &agent.RunEnded{Reason: "answer", Output: answer}, State: &agent.State{}})
	}
	t.Run(fmt.Sprintf("one terminal, %d bytes", len(answer)), func(t *testing.T) {
		ptm, tty, err := pty.Open()
		if err != nil {
			t.Skipf("no pseudo-terminal: %v", err)
		}
		defer ptm.Close()
		got := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(ptm) // ends with EIO when tty closes
			got <- string(b)
		}()
		print(t, tty, tty)
		tty.Close()
		screen := <-got
		if n := strings.Count(screen, "THE END"); n != 1 {
			t.Errorf("the answer's end is on the terminal %d times, want once:\n%s", n, screen)
		}
	})
	t.Run(fmt.Sprintf("stdout redirected, %d bytes", len(answer)), func(t *testing.T) {
		var stderr, stdout bytes.Buffer
		print(t, &stderr, &stdout)
		if stdout.String() != answer+"\n" {
			t.Errorf("stdout %q, want the answer", stdout.String())
		}
	})
}
