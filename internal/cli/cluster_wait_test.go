package cli_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/internal/testrun"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// childPIDs returns the children of process pid (all its threads').
func childPIDs(pid int) []string {
	var out []string
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		out = append(out, strings.Fields(string(b))...)
	}
	return out
}

// temporalPID finds the Temporal dev server listening on addr's port.
func temporalPID(addr string) int {
	_, port, _ := strings.Cut(addr, ":")
	cmds, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmds {
		b, _ := os.ReadFile(f)
		args := strings.Split(string(b), "\x00")
		if len(args) > 3 && strings.HasSuffix(args[0], "temporal") && strings.Contains(string(b), "start-dev") {
			for i, a := range args {
				if a == "--port" && i+1 < len(args) && args[i+1] == port {
					pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
					return pid
				}
			}
		}
	}
	return 0
}

// TestClusterWaitingRuns (long: KEEL_CLUSTER_LONG=1) puts
// KEEL_CLUSTER_WAITING (default 1000) runs on two servers and two workers
// (PostgreSQL, a real Temporal dev server, the Linux sandbox) into an
// approval wait, then checks that the waiting runs hold no worker: no
// workflow has a pending activity and no worker keeps a sandbox process.
// Meanwhile it measures the API (p50/p99 of probes of both servers) and
// the memory the waiting runs cost (resident sets of the servers, the
// workers and the Temporal server, over the count). Then every approval
// is given through the server the run was not created on, and every run
// completes.
func TestClusterWaitingRuns(t *testing.T) {
	if os.Getenv("KEEL_CLUSTER_LONG") != "1" {
		t.Skip("a long measurement: KEEL_CLUSTER_LONG=1 (see AGENTS.md)")
	}
	n := envInt(t, "KEEL_CLUSTER_WAITING", 1000)
	setup(t)
	pg := testenv.Postgres(t)
	tp := testenv.Temporal(t)
	pol := filepath.Join(t.TempDir(), "ask-rm.cedar")
	if err := os.WriteFile(pol, []byte(testrun.AskRm), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := []string{"--log-level", "warn", "--db", pg, "--temporal", tp, "--adopt", "5s", "--policy", pol}
	wrk := []string{"--log-level", "warn", "--db", pg, "--temporal", tp, "--workspace-root", os.TempDir(), "--workers", "8", "--policy", pol}
	s1, s2 := startServe(t, srv...), startServe(t, srv...)
	w1, w2 := startWorker(t, wrk...), startWorker(t, wrk...)
	token := s1.savedToken(t)
	cs := []*client.Client{s1.clientWith(t, token), s2.clientWith(t, token)}
	pids := map[string]int{"server 1": s1.cmd.Process.Pid, "server 2": s2.cmd.Process.Pid,
		"worker 1": w1.cmd.Process.Pid, "worker 2": w2.cmd.Process.Pid, "temporal": temporalPID(tp)}
	rss := func() (map[string]int64, int64) {
		m, sum := map[string]int64{}, int64(0)
		for name, pid := range pids {
			m[name] = rssKB(pid, "VmRSS")
			sum += m[name]
		}
		return m, sum
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Minute)
	defer cancel()
	tc, err := cluster.Dial(ctx, tp, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()

	traj, _ := filepath.Abs(writeTrajectory(t, "wait for a person",
		[]fcall{sh("echo x > old.log")}, []fcall{sh("rm old.log")}, []fcall{sh("test ! -e old.log && echo gone")}, []fcall{}))
	wsRoot := t.TempDir()
	_, before := rss()
	began := time.Now()
	ids := make([]string, n)
	var create latencies
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ws := filepath.Join(wsRoot, fmt.Sprintf("ws%04d", i))
			os.Mkdir(ws, 0o755)
			t0 := time.Now()
			r, err := cs[i%2].CreateRun(ctx, &api.CreateRun{Model: "replay:" + traj, Workspace: ws, Sandbox: "linux"})
			if err != nil {
				t.Errorf("create %d: %v", i, err)
				return
			}
			create.add(time.Since(t0))
			ids[i] = r.ID
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Every run waits for its approval.
	var pending []api.Approval
	for {
		pending, err = cs[1].Approvals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) >= n || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	waitingAfter := time.Since(began)
	if len(pending) != n {
		t.Fatalf("%d approvals pending, want %d", len(pending), n)
	}
	// A settle: steps that paused have returned; then nothing runs.
	time.Sleep(3 * time.Second)
	busy := 0
	for _, id := range ids {
		d, err := tc.DescribeWorkflow(ctx, cluster.WorkflowID(id), "")
		if err != nil {
			t.Fatalf("describe %s: %v", id, err)
		}
		if len(d.RawResponse.GetPendingActivities()) > 0 {
			busy++
		}
	}
	if busy > 0 {
		t.Errorf("%d of %d waiting runs' workflows have a pending activity (a worker slot)", busy, n)
	}
	for _, w := range []*serveProc{w1, w2} {
		if kids := childPIDs(w.cmd.Process.Pid); len(kids) > 0 {
			t.Errorf("worker pid %d keeps %d child processes (sandboxes) while every run waits", w.cmd.Process.Pid, len(kids))
		}
	}
	each, after := rss()
	// The API while they wait: probes of both servers for 20 s.
	var probe latencies
	stop := time.Now().Add(20 * time.Second)
	var pw sync.WaitGroup
	for g := range 4 {
		pw.Add(1)
		go func() {
			defer pw.Done()
			r := rand.New(rand.NewPCG(uint64(g), 3))
			for k := 0; time.Now().Before(stop); k++ {
				c := cs[k%2]
				t0 := time.Now()
				var err error
				switch k % 4 {
				case 0, 1:
					_, err = c.Run(ctx, ids[r.IntN(n)])
				case 2:
					_, err = c.Runs(ctx, &client.RunsParams{Limit: 50})
				case 3:
					_, err = c.Approvals(ctx)
				}
				if err != nil {
					t.Errorf("probe: %v", err)
					return
				}
				probe.add(time.Since(t0))
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	pw.Wait()
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("%d runs waiting for approval after %s (create p50 %.0f ms p99 %.0f ms) · 0 pending activities: %v · API p50 %.1f ms p99 %.1f ms (%d probes of both servers) · resident memory %d MiB before, %d MiB waiting = %.1f KiB per waiting run %v · load average %s",
		n, waitingAfter.Round(time.Second), create.pct(50), create.pct(99), busy == 0, probe.pct(50), probe.pct(99), probe.n(),
		before/1024, after/1024, float64(after-before)/float64(n), each, strings.TrimSpace(string(load)))

	// Approve every run through the other server than the one that
	// created it; all complete.
	idx := map[string]int{}
	for i, id := range ids {
		idx[id] = i
	}
	t0 := time.Now()
	for _, p := range pending {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := cs[(idx[p.RunID]+1)%2].Approve(ctx, p.RunID, p.CallID, &api.Decide{Reason: "from the other server"}); err != nil {
				t.Errorf("approve %s: %v", p.RunID, err)
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		for {
			r, err := cs[0].Run(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if st := journal.Status(r.Status); st.Terminal() {
				if st != journal.StatusCompleted {
					t.Errorf("run %s ended %s", id, st)
				}
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	took := time.Since(t0)
	// Each approval resumes its run once: the wake-ups its workflow got
	// before (the start, adoptions while a step waited for a slot) were
	// answered by the steps that followed them, and a worker that is slow
	// to heartbeat is not taken over.
	store, err := journal.Open(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var resumed, paused, extra int
	for _, id := range ids {
		evs, err := store.Read(ctx, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		r, p := countType(evs, journal.RunResumed), countType(evs, journal.RunPaused)
		resumed, paused = resumed+r, paused+p
		if r != 1 || p != 0 {
			extra++
		}
	}
	if extra > 0 {
		t.Errorf("%d of %d approved runs journaled more than one run.resumed or a run.paused (%d run.resumed, %d run.paused in all)", extra, n, resumed, paused)
	}
	t.Logf("approved through the other server: all %d completed %s after the first approval · %.2f run.resumed and %.2f run.paused per approved run",
		n, took.Round(time.Second), float64(resumed)/float64(n), float64(paused)/float64(n))
}
