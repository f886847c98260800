package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// untilEvent follows run id through c until an event of type typ, and
// returns it.
func untilEvent(t *testing.T, c *client.Client, id string, typ journal.Type) journal.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for e, err := range c.Events(ctx, id, &client.EventsParams{From: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Type == typ {
			return e
		}
	}
	t.Fatalf("run %s: no %s event", id, typ)
	return journal.Event{}
}

// Two keel serve processes on one PostgreSQL database: either answers the
// API; a run one executes is approved and canceled through the other, and
// a run of a server killed with SIGKILL is adopted and completed by the
// other; every chain verifies.
func TestTwoServersOnePostgres(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	pg := testenv.Postgres(t)
	args := []string{"--db", pg, "--adopt", "500ms"}
	s1 := startServe(t, args...)
	s2 := startServe(t, args...)
	c1, c2 := s1.apiClient(t), s2.clientWith(t, s1.savedToken(t))
	ctx := t.Context()

	// Approval through the other server: the demo run asks on s1, s2
	// approves; s2 executes the rest (the run was paused: nobody held
	// it), and s1's event stream shows it live.
	demo, err := c1.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := untilStopped(t, c1, demo.ID, 1)
	if asked.Type != journal.ApprovalRequested {
		t.Fatalf("demo stopped with %s\n%s", asked.Type, s1.stderr)
	}
	pending, err := c2.Approvals(ctx)
	if err != nil || len(pending) != 1 || pending[0].RunID != demo.ID {
		t.Fatalf("s2 approvals = %+v, %v", pending, err)
	}
	if _, err := c2.Approve(ctx, demo.ID, pending[0].CallID, &api.Decide{Reason: "from the other server"}); err != nil {
		t.Fatal(err)
	}
	if end := untilStopped(t, c1, demo.ID, asked.Seq+1); end.Type != journal.RunCompleted {
		t.Fatalf("after approval on s2 the run stopped with %s\n%s\n%s", end.Type, s1.stderr, s2.stderr)
	}

	// Cancel through the other server: a run executing on s1 (a command
	// that sleeps) is canceled through s2.
	ws := t.TempDir()
	sleepy := writeTrajectory(t, "wait", []fcall{sh("sleep 60")}, []fcall{sh("echo never")})
	run, err := c1.CreateRun(ctx, &api.CreateRun{Model: "replay:" + sleepy, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	untilEvent(t, c1, run.ID, journal.ToolStarted)
	got, err := c2.Cancel(ctx, run.ID)
	if err != nil {
		t.Fatalf("cancel through s2 = %v\n%s", err, s2.stderr)
	}
	if got.Status != string(journal.StatusCanceled) {
		t.Errorf("after cancel through s2: %s", got.Status)
	}
	canceled := untilEvent(t, c1, run.ID, journal.RunCanceled)
	var rc agent.RunEnded
	if err := json.Unmarshal(canceled.Payload, &rc); err != nil || rc.By == "" {
		t.Errorf("run.canceled %s does not name who canceled: %v", canceled.Payload, err)
	}

	// kill -9 of the executing server mid-run: s2 adopts the run once
	// its lease frees itself, and completes it.
	ws2 := t.TempDir()
	steps := writeTrajectory(t, "count",
		[]fcall{sh("echo 1 >> n && sleep 1")}, []fcall{sh("echo 2 >> n && sleep 1")}, []fcall{sh("echo 3 >> n && sleep 1")},
		[]fcall{sh("echo 4 >> n")}, []fcall{})
	long, err := c1.CreateRun(ctx, &api.CreateRun{Model: "replay:" + steps, Workspace: ws2})
	if err != nil {
		t.Fatal(err)
	}
	untilEvent(t, c2, long.ID, journal.ToolStarted)
	s1.cmd.Process.Signal(syscall.SIGKILL)
	<-s1.done
	if end := untilStopped(t, c2, long.ID, 1); end.Type != journal.RunCompleted {
		t.Fatalf("after s1 was killed the run stopped with %s\n%s", end.Type, s2.stderr)
	}
	b, _ := os.ReadFile(filepath.Join(ws2, "n"))
	t.Logf("workspace file after the adoption: %q", b)
	store, err := journal.Open(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, id := range []string{demo.ID, run.ID, long.ID} {
		evs, err := journal.ReadVerified(ctx, store, id)
		if err != nil {
			t.Errorf("run %s: %v", id, err)
			continue
		}
		st, err := agent.Fold(id, evs)
		if err != nil {
			t.Fatal(err)
		}
		checkOneResultPerCall(t, st)
	}
	rep, err := c2.VerifyAudit(ctx, nil)
	if err != nil || !rep.OK {
		t.Errorf("audit: %+v, %v", rep, err)
	}
}
