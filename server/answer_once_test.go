package server_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/server/api"
)

// The run page shows a completed run's answer once, rendered, in the
// conversation (fresh-user trial 10: an "Output" box above it showed the
// same answer again as raw Markdown); the run's facts link to it.
func TestRunPageShowsAnswerOnce(t *testing.T) {
	e := newEnv(t, &envOptions{})
	e.models.set("test:answer", modeltest.NewScripted([]modeltest.Turn{
		modeltest.Text("# Heading\n\nA **ANSWER-MARK** point."),
	}, nil))
	run, err := e.admin.CreateRun(t.Context(), &api.CreateRun{Task: "t", Model: "test:answer", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	done := e.waitType(run.ID, journal.RunCompleted)
	body := e.page("/ui/runs/" + run.ID)
	// The raw events (collapsed, at the bottom) show every payload as
	// journaled: not counted.
	body, _, _ = strings.Cut(body, `<details class="card raw">`)
	if n := strings.Count(body, "ANSWER-MARK"); n != 1 {
		t.Errorf("the answer is on the run page %d times, want once:\n%s", n, body)
	}
	if !strings.Contains(body, "<strong>ANSWER-MARK</strong>") {
		t.Errorf("the answer is not rendered as Markdown:\n%s", body)
	}
	if want := `href="#i` + strconv.FormatInt(done.Seq, 10) + `"`; !strings.Contains(body, want) {
		t.Errorf("no link to the answer's end (%s) in the run's facts:\n%s", want, body)
	}
}
