package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
)

// startClientDemo runs keel --server URL demo on a pseudo-terminal and
// returns it with the id of its run, once the demo's edit is asked
// about; ask is what the terminal showed up to the question.
func startClientDemo(t *testing.T, s *serveProc) (term *terminal, cmd *exec.Cmd, runID, ask string) {
	t.Helper()
	args, _ := json.Marshal([]string{"--server", s.url, "demo"})
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args), "TERM=xterm")
	term = startTerminal(t, cmd)
	ask = term.expect("always for this agent: ")
	m := regexp.MustCompile(`keel demo: run (\S+) on `).FindStringSubmatch(ask)
	if m == nil {
		t.Fatalf("no run id before the question:\n%s", ask)
	}
	return term, cmd, m[1], ask
}

// resolution returns the approval.resolved events of run id.
func resolution(t *testing.T, c *client.Client, id string) []agent.ApprovalResolved {
	t.Helper()
	var out []agent.ApprovalResolved
	for e, err := range c.Events(t.Context(), id, &client.EventsParams{NoFollow: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Type == journal.ApprovalResolved {
			var x agent.ApprovalResolved
			if err := json.Unmarshal(e.Payload, &x); err != nil {
				t.Fatal(err)
			}
			out = append(out, x)
		}
	}
	return out
}

// keel --server URL demo at a terminal asks as keel demo does: the edit
// as a diff and the y/n question; the answer is decided through the
// server, and the command ends with the run (fresh-user trial 8, F18:
// it printed the approve/deny commands and waited for another process).
func TestClientDemoAsksAtTerminal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	s := startServe(t)
	term, cmd, id, ask := startClientDemo(t, s)
	for _, want := range []string{"call demo_4 (edit_file) needs your approval", "the demo asks a person before the agent edits a file",
		"the edit (+1 −1)", "--- a/textstats.py", "-    return len(text.split(\" \"))", "+    return len(text.split())"} {
		if !strings.Contains(ask, want) {
			t.Errorf("the question lacks %q:\n%s", want, ask)
		}
	}
	if strings.Contains(ask, "keel: waiting (anyone") {
		t.Errorf("the question is preceded by the wait hint for another process:\n%s", ask)
	}
	term.send("n")
	term.expect("why (the model is told): ")
	term.send("not now")
	after := term.expect("You denied the edit of textstats.py (not now)")
	<-term.done
	if err := cmd.Wait(); err != nil {
		t.Fatalf("keel --server demo: %v\n%s", err, term.text())
	}
	if strings.Contains(after, "keel: waiting") {
		t.Errorf("after the answer, the command still waits:\n%s", after)
	}
	c := s.apiClient(t)
	run, err := c.Run(t.Context(), id)
	if err != nil || run.Status != string(journal.StatusCompleted) {
		t.Fatalf("run %s = %+v, %v; want completed", id, run, err)
	}
	res := resolution(t, c, id)
	if len(res) != 1 || res[0].CallID != "demo_4" || res[0].Decision != policy.Deny || res[0].Reason != "not now" {
		t.Errorf("decisions = %+v, want demo_4 denied: not now", res)
	}
	if !strings.Contains(term.text(), "== timeline (keel --server "+s.url+" runs show "+id+")") {
		t.Errorf("no timeline after the run:\n%s", term.text())
	}
}

// While keel --server URL demo asks at a terminal, anyone else may
// decide: the question goes away saying who decided, and the command
// follows the run to its end.
func TestClientDemoDecidedElsewhere(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	s := startServe(t)
	term, cmd, id, _ := startClientDemo(t, s)
	c := s.apiClient(t)
	if _, err := c.Approve(t.Context(), id, "demo_4", nil); err != nil {
		t.Fatal(err)
	}
	said := term.expect("the question is withdrawn")
	if !regexp.MustCompile(`keel: call demo_4 was approved by \S+ elsewhere`).MatchString(said) {
		t.Errorf("the withdrawn question does not say who decided:\n%s", said)
	}
	term.expect("all tests pass")
	<-term.done
	if err := cmd.Wait(); err != nil {
		t.Fatalf("keel --server demo: %v\n%s", err, term.text())
	}
	run, err := c.Run(t.Context(), id)
	if err != nil || run.Status != string(journal.StatusCompleted) {
		t.Fatalf("run %s = %+v, %v; want completed", id, run, err)
	}
	if res := resolution(t, c, id); len(res) != 1 || res[0].Decision != policy.Allow {
		t.Errorf("decisions = %+v, want one approval (the other client's)", res)
	}
}
