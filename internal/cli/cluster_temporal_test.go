package cli_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// startWorker starts `keel worker` with argv after "worker" and waits
// until it polls.
func startWorker(t *testing.T, argv ...string) *serveProc {
	t.Helper()
	args, _ := json.Marshal(append([]string{"worker"}, argv...))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args))
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, stderr: &strings.Builder{}, done: make(chan struct{})}
	var mu sync.Mutex
	ready := make(chan struct{}, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.HasPrefix(sc.Text(), "keel worker: polling") {
				ready <- struct{}{}
			}
		}
		_, _ = io.Copy(io.Discard, pipe)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			mu.Lock()
			t.Logf("worker pid %d:\n%s", cmd.Process.Pid, p.stderr)
			mu.Unlock()
		}
	})
	select {
	case <-ready:
	case <-p.done:
		t.Fatalf("keel worker exited before polling:\n%s", p.stderr)
	case <-time.After(time.Minute):
		t.Fatalf("keel worker did not poll within a minute")
	}
	return p
}

// The cluster shape: two keel serve --temporal and two keel worker
// processes on one PostgreSQL database and one Temporal dev server. An
// approval asked on a run is given through the other server; then, with
// runs in flight, one worker and one server are killed with SIGKILL, and
// every run completes, each tool call with one result, every chain
// verified.
func TestClusterOnTemporal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	pg := testenv.Postgres(t)
	tp := testenv.Temporal(t)
	srv := []string{"--db", pg, "--temporal", tp, "--adopt", "1s"}
	wrk := []string{"--db", pg, "--temporal", tp, "--workspace-root", os.TempDir(), "--workers", "4", "--pin-timeout", "3s", "--step-heartbeat", "2s"}
	s1 := startServe(t, srv...)
	s2 := startServe(t, srv...)
	w1 := startWorker(t, wrk...)
	startWorker(t, wrk...)
	c1, c2 := s1.apiClient(t), s2.clientWith(t, s1.savedToken(t))
	ctx := t.Context()

	demo, err := c1.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := untilStopped(t, c1, demo.ID, 1)
	if asked.Type != journal.ApprovalRequested {
		t.Fatalf("demo stopped with %s\n%s", asked.Type, s1.stderr)
	}
	pending, err := c2.Approvals(ctx)
	if err != nil || len(pending) != 1 {
		t.Fatalf("approvals through s2 = %+v, %v", pending, err)
	}
	if _, err := c2.Approve(ctx, demo.ID, pending[0].CallID, &api.Decide{Reason: "from the other server"}); err != nil {
		t.Fatal(err)
	}
	if end := untilStopped(t, c2, demo.ID, asked.Seq+1); end.Type != journal.RunCompleted {
		t.Fatalf("after approval the demo stopped with %s", end.Type)
	}
	// The approval resumes the run once; the wake-ups the workflow got
	// before (its start, adoptions while it ran) are answered already
	// and journal nothing.
	store, err := journal.Open(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if evs, err := store.Read(ctx, demo.ID, 1); err != nil {
		t.Fatal(err)
	} else if n, p := countType(evs, journal.RunResumed), countType(evs, journal.RunPaused); n != 1 || p != 0 {
		t.Errorf("the approved demo journaled %d run.resumed and %d run.paused, want 1 and 0 (approval.requested pauses it)", n, p)
	}

	// A cancel through the other server, between two steps, holds: the
	// run's workflow ends without executing it again. A plain resume
	// through the first server then completes it, the resume naming the
	// person.
	var slow [][]fcall
	for k := range 40 {
		slow = append(slow, []fcall{sh(fmt.Sprintf("echo %d >> n && sleep 0.5", k))})
	}
	victim, err := c1.CreateRun(ctx, &api.CreateRun{Model: "replay:" + writeTrajectory(t, "slow", append(slow, []fcall{})...), Workspace: t.TempDir(), MountPath: "/testbed"})
	if err != nil {
		t.Fatal(err)
	}
	untilEvent(t, c2, victim.ID, journal.ToolFinished)
	if _, err := c2.Cancel(ctx, victim.ID); err != nil {
		t.Fatal(err)
	}
	tc, err := cluster.Dial(ctx, tp, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if err := tc.GetWorkflow(ctx, cluster.WorkflowID(victim.ID), "").Get(ctx, nil); err != nil {
		t.Fatalf("the canceled run's workflow: %v", err)
	}
	evs, err := store.Read(ctx, victim.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	canceled := evs[len(evs)-1]
	if canceled.Type != journal.RunCanceled {
		t.Fatalf("after the cancel and its workflow's end, the run's newest event is %s, want run.canceled", canceled.Type)
	}
	if _, err := c1.Resume(ctx, victim.ID, &api.ResumeRun{}); err != nil {
		t.Fatal(err)
	}
	if end := untilStopped(t, c1, victim.ID, canceled.Seq+1); end.Type != journal.RunCompleted {
		t.Fatalf("the resumed run stopped with %s", end.Type)
	}
	if evs, err = store.Read(ctx, victim.ID, canceled.Seq+1); err != nil || evs[0].Type != journal.RunResumed || !strings.Contains(string(evs[0].Payload), `"by"`) {
		t.Errorf("the event after the cancel: %+v, %v; want run.resumed naming the person", evs[0], err)
	}

	// KEEL_CLUSTER_RUNS=N runs N replays of the recorded 74-step
	// trajectory instead (a measurement, not part of the default suite).
	n, traj := 4, ""
	if v := os.Getenv("KEEL_CLUSTER_RUNS"); v != "" {
		fmt.Sscan(v, &n)
		traj, _ = filepath.Abs(trajectory)
	}
	var ids []string
	var creates []time.Duration
	began := time.Now()
	for i := range n {
		c := c1
		if i%2 == 1 {
			c = c2
		}
		tr := traj
		if tr == "" {
			cmds := make([][]fcall, 0, 7)
			for k := range 6 {
				cmds = append(cmds, []fcall{sh(fmt.Sprintf("echo %d >> n && sleep 0.2", k))})
			}
			tr = writeTrajectory(t, "count", append(cmds, []fcall{})...)
		}
		start := time.Now()
		run, err := c.CreateRun(ctx, &api.CreateRun{Model: "replay:" + tr, Workspace: t.TempDir(), MountPath: "/testbed"})
		if err != nil {
			t.Fatal(err)
		}
		creates = append(creates, time.Since(start))
		ids = append(ids, run.ID)
	}
	untilEvent(t, c2, ids[0], journal.ToolFinished)
	w1.cmd.Process.Signal(syscall.SIGKILL)
	s1.cmd.Process.Signal(syscall.SIGKILL)
	<-w1.done
	<-s1.done
	for _, id := range ids {
		if end := untilStopped(t, c2, id, 1); end.Type != journal.RunCompleted {
			t.Errorf("run %s stopped with %s", id, end.Type)
			continue
		}
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
		t.Logf("run %s: %d events, %d run.resumed (a worker took it over), %d steps", id, len(evs), countType(evs, journal.RunResumed), st.Steps)
	}
	took := time.Since(began)
	slices.Sort(creates)
	t.Logf("%d runs completed in %s (%.1f runs/min); create p50 %s, p99 %s", n, took.Round(time.Millisecond),
		float64(n)/took.Minutes(), creates[len(creates)/2], creates[(len(creates)-1)*99/100])
	rep, err := c2.VerifyAudit(ctx, nil)
	if err != nil || !rep.OK {
		t.Errorf("audit: %+v, %v", rep, err)
	}
}

func countType(evs []journal.Event, typ journal.Type) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}
