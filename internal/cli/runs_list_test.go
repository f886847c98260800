package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/service"
)

// keel runs list --status takes every status the table shows, checked
// once by the service: the same rows, or the same refusal with exit
// status 2, locally and with --server (fresh-user trial 8, F19); --json
// has the table's status, steps, cost and task in both forms (F6).
func TestRunsListStatusBothForms(t *testing.T) {
	db := setup(t)
	s := startServe(t)
	// Runs the journal says are running but that nothing executes,
	// journaled after the server started (it resumes such runs only
	// when it starts): one never started, one whose process died.
	store, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt := agent.NewRuntime(store, nil)
	journalRun := func(task string, more ...journal.Type) string {
		t.Helper()
		id, err := rt.Create(t.Context(), &agent.RunCreated{Task: task, Model: "test:none", Workspace: t.TempDir(), Sandbox: "none",
			Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(policy.Default())})
		if err != nil {
			t.Fatal(err)
		}
		for i, typ := range more {
			var v any = &agent.RunEnded{Reason: agent.ReasonAnswer}
			if typ == journal.RunResumed {
				v = &agent.RunResumed{}
			}
			p, _ := json.Marshal(v)
			if _, err := store.Append(t.Context(), id, int64(i+1), journal.Draft{Type: typ, Time: time.Now(), Payload: p}); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}
	ids := map[journal.Status]string{
		service.StatusQueued:      journalRun("queued task"),
		service.StatusInterrupted: journalRun("interrupted task", journal.RunResumed),
		journal.StatusCompleted:   journalRun("completed task", journal.RunCompleted),
	}
	store.Close()

	same := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		lcode, lout, lerr := keel(t, args...)
		rcode, rout, rerr := keel(t, append([]string{"--server", s.url}, args...)...)
		if lcode != rcode || lout != rout || lerr != rerr {
			t.Errorf("keel %v: local (exit %d):\n%s%s\nwith --server (exit %d):\n%s%s", args, lcode, lout, lerr, rcode, rout, rerr)
		}
		return lcode, lout, lerr
	}
	for _, st := range service.Statuses {
		t.Run(string(st), func(t *testing.T) {
			code, out, errOut := same(t, "runs", "list", "--status", string(st))
			rows := strings.Split(strings.TrimSpace(out), "\n")[1:]
			if code != 0 {
				t.Fatalf("runs list --status %s = %d: %s", st, code, errOut)
			}
			if id := ids[st]; id != "" && (len(rows) != 1 || !strings.HasPrefix(rows[0], id+"  "+string(st)+" ")) {
				t.Errorf("runs list --status %s: %q, want run %s shown %s", st, rows, id, st)
			}
			if ids[st] == "" && len(rows) != 0 {
				t.Errorf("runs list --status %s: %q, want none", st, rows)
			}
		})
	}
	code, _, errOut := same(t, "runs", "list", "--status", "bogus")
	if code != 2 || !strings.Contains(errOut, `status "bogus": want running, queued, interrupted, paused, completed, failed, canceled, executing or waiting`) {
		t.Errorf("runs list --status bogus = %d: %s", code, errOut)
	}
	// The web UI's filters too (report 15, R17): nothing executes here,
	// and the runs that wait for approval are the paused ones that do.
	for _, st := range []string{"executing", "waiting"} {
		if code, out, errOut := same(t, "runs", "list", "--status", st); code != 0 {
			t.Errorf("runs list --status %s = %d: %s%s", st, code, out, errOut)
		} else if st == "executing" && strings.Count(strings.TrimSpace(out), "\n") != 0 {
			t.Errorf("runs list --status executing: %q, want none", out)
		}
	}
	_, out, _ := same(t, "runs", "list", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(ids) {
		t.Fatalf("runs list --json: %d lines, want %d:\n%s", len(lines), len(ids), out)
	}
	for _, l := range lines {
		var row struct {
			RunID  string   `json:"run_id"`
			Status string   `json:"status"`
			Task   string   `json:"task"`
			Steps  *int     `json:"steps"`
			Cost   *float64 `json:"cost"`
		}
		if err := json.Unmarshal([]byte(l), &row); err != nil || row.Steps == nil || row.Cost == nil ||
			row.Task != row.Status+" task" || ids[journal.Status(row.Status)] != row.RunID {
			t.Errorf("runs list --json line %s (%v): want the table's status, task, steps and cost", l, err)
		}
	}
}
