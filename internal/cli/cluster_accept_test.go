package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/server/api"
)

// acceptTrajectories are the two real recordings of the marshmallow task;
// runs alternate between them.
var acceptTrajectories = []string{
	filepath.Join("..", "..", "testdata", "trajectories", "deepseek_chat_dev.traj.json"),
	filepath.Join("..", "..", "testdata", "trajectories", "deepseek_chat_dev_rerun.traj.json"),
}

// pytestStub is the python on the runs' PATH: real Python for everything
// the recordings run (the scripts that write the patch, the reproducers)
// except pytest and pip, which print one line. Two cores cannot run a
// hundred concurrent pytest sessions of marshmallow's suite; the patch
// never depends on them. KEEL_CLUSTER_REAL_PYTHON=1 leaves them real.
const pytestStub = `#!/bin/sh
case " $* " in
*" -m pytest"*|*" -m pip "*) echo "stub python: $*"; exit 0 ;;
esac
exec /usr/bin/python3 "$@"
`

// procStats samples one process's CPU and resident set.
type procStats struct {
	pid           int
	cpu, children float64
	peakKB        int64
	name          string
	mu            sync.Mutex
	stopped       bool
}

func (p *procStats) sample() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	if self, ch := cpuSeconds(p.pid); self > 0 {
		p.cpu, p.children = self, ch
	}
	if kb := rssKB(p.pid, "VmRSS"); kb > p.peakKB {
		p.peakKB = kb
	}
}

func (p *procStats) stop() {
	p.sample()
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
}

// TestClusterAcceptance is issue 15's acceptance, a long test (skipped
// unless KEEL_CLUSTER_LONG=1): two `keel serve --temporal` and two `keel
// worker` processes on one PostgreSQL database and one Temporal dev
// server run KEEL_CLUSTER_RUNS (default 100) concurrent replays of the
// two recorded marshmallow trajectories, each in the real Linux sandbox
// on its own clone of the repository at the task's base commit
// (KEEL_MARSHMALLOW_GIT names a clone or mirror of
// marshmallow-code/marshmallow). Mid-way one worker and one server are
// killed with SIGKILL. Every run must complete with the recorded patch
// (git diff equal to the recording's submission, index lines aside),
// every tool call must have one result and none may start twice (an
// interrupted call is reported to the model as of unknown outcome), and
// every chain must verify.
//
// It logs the figures of the cluster shape: create p50/p99, event-stream
// lag p50/p99 (append to arrival at a follower of the surviving
// server), API p50/p99 (probes of the surviving server), runs per
// minute, per-step overhead p50/p99 (a step's wall time minus its
// commands'), servers' and workers' CPU per journal event and peak RSS,
// and the load average. KEEL_CLUSTER_SHAPE=single runs the same workload
// on one `keel serve` with a SQLite journal instead (no kills), for the
// side-by-side figures. KEEL_CLUSTER_SLOTS (default 8) is each worker's
// step slots (single: the server's --workers is twice it);
// KEEL_CLUSTER_PROFILE=DIR writes the surviving processes' CPU profiles
// there.
func TestClusterAcceptance(t *testing.T) {
	if os.Getenv("KEEL_CLUSTER_LONG") != "1" {
		t.Skip("a long acceptance run: KEEL_CLUSTER_LONG=1 KEEL_MARSHMALLOW_GIT=DIR (see AGENTS.md)")
	}
	repo := os.Getenv("KEEL_MARSHMALLOW_GIT")
	if repo == "" {
		t.Fatal("KEEL_MARSHMALLOW_GIT must name a clone or mirror of marshmallow-code/marshmallow")
	}
	n, slots := envInt(t, "KEEL_CLUSTER_RUNS", 100), envInt(t, "KEEL_CLUSTER_SLOTS", 8)
	single := os.Getenv("KEEL_CLUSTER_SHAPE") == "single"
	profile := os.Getenv("KEEL_CLUSTER_PROFILE")
	realPython := os.Getenv("KEEL_CLUSTER_REAL_PYTHON") == "1"
	db := setup(t)
	t.Setenv("KEEL_DEBUG", "")

	// The workspaces: one clone at the base commit, copied per run.
	wsRoot := t.TempDir()
	var spec struct {
		BaseCommit string `json:"base_commit"`
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "trajectories", "spec.json"))
	if err != nil || json.Unmarshal(b, &spec) != nil {
		t.Fatalf("spec.json: %v", err)
	}
	base := filepath.Join(wsRoot, "base")
	for _, args := range [][]string{{"clone", "-q", repo, base}, {"-C", base, "checkout", "-q", spec.BaseCommit}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	type runInfo struct {
		ws, traj, id string
		submission   string
		calls        int
	}
	runs := make([]*runInfo, n)
	var subs [2]string
	var calls [2]int
	for i, p := range acceptTrajectories {
		tr, err := replay.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		subs[i] = tr.Submission()
		for _, turn := range tr.Turns() {
			calls[i] += len(turn.Message.ToolCalls)
		}
	}
	for i := range runs {
		ws := filepath.Join(wsRoot, fmt.Sprintf("ws%03d", i))
		if out, err := exec.Command("cp", "-a", base, ws).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v\n%s", err, out)
		}
		if !realPython {
			bin := filepath.Join(ws, ".stubs")
			os.MkdirAll(bin, 0o755)
			for _, p := range []string{"python", "python3"} {
				if err := os.WriteFile(filepath.Join(bin, p), []byte(pytestStub), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range []string{"pip", "pytest"} {
				if err := os.WriteFile(filepath.Join(bin, p), []byte("#!/bin/sh\necho \"stub $0: $*\"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// Not part of the patch.
			os.WriteFile(filepath.Join(ws, ".git", "info", "exclude"), []byte(".stubs/\n"), 0o644)
		}
		traj, _ := filepath.Abs(acceptTrajectories[i%2])
		runs[i] = &runInfo{ws: ws, traj: traj, submission: subs[i%2], calls: calls[i%2]}
	}

	prof := func(name string) {
		if profile != "" {
			t.Setenv("KEEL_DEBUG", "cpu_profile="+filepath.Join(profile, name+".prof"))
		} else {
			t.Setenv("KEEL_DEBUG", "")
		}
	}
	common := []string{"--log-level", "warn"}
	var s1, s2 *serveProc
	var w1, w2 *serveProc
	var procs []*procStats
	dsn := db
	if single {
		prof("single")
		s1 = startServe(t, append(common, "--db", db, "--workers", strconv.Itoa(2*slots))...)
		s2 = s1
		procs = append(procs, &procStats{pid: s1.cmd.Process.Pid, name: "server"})
	} else {
		pg := testenv.Postgres(t)
		tp := testenv.Temporal(t)
		dsn = pg
		srv := append(common, "--db", pg, "--temporal", tp, "--adopt", "2s")
		wrk := append(common, "--db", pg, "--temporal", tp, "--workspace-root", os.TempDir(),
			"--workers", strconv.Itoa(slots), "--pin-timeout", "10s", "--step-heartbeat", "10s")
		prof("s1-killed")
		s1 = startServe(t, srv...)
		prof("s2")
		s2 = startServe(t, srv...)
		prof("w1-killed")
		w1 = startWorker(t, wrk...)
		prof("w2")
		w2 = startWorker(t, wrk...)
		t.Setenv("KEEL_DEBUG", "")
		procs = append(procs, &procStats{pid: s1.cmd.Process.Pid, name: "server 1 (killed)"}, &procStats{pid: s2.cmd.Process.Pid, name: "server 2"},
			&procStats{pid: w1.cmd.Process.Pid, name: "worker 1 (killed)"}, &procStats{pid: w2.cmd.Process.Pid, name: "worker 2"})
	}
	token := s1.savedToken(t)
	c1, c2 := s1.clientWith(t, token), s2.clientWith(t, token)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Minute)
	defer cancel()

	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { // CPU and RSS sampler
		defer bg.Done()
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			for _, p := range procs {
				p.sample()
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	var probe, create, lag latencies
	var ids sync.Map
	for g := range 4 { // API probes of the surviving server, ~20/s each
		bg.Add(1)
		go func() {
			defer bg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			tk := time.NewTicker(50 * time.Millisecond)
			defer tk.Stop()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-tk.C:
				}
				start := time.Now()
				var err error
				switch k % 4 {
				case 0, 1:
					id, ok := ids.Load(r.IntN(n))
					if !ok {
						continue
					}
					_, err = c2.Run(ctx, id.(string))
				case 2:
					_, err = c2.Runs(ctx, &client.RunsParams{Limit: 50})
				case 3:
					_, err = c2.Approvals(ctx)
				}
				if err != nil {
					t.Errorf("probe: %v", err)
					return
				}
				probe.add(time.Since(start))
			}
		}()
	}

	var events atomic.Int64
	killAt := int64(n) * 120 // about 40% of the runs' events
	killed := make(chan struct{})
	var killOnce sync.Once
	kill := func() {
		if single {
			return
		}
		killOnce.Do(func() {
			procs[0].stop()
			procs[2].stop()
			w1.cmd.Process.Signal(syscall.SIGKILL)
			s1.cmd.Process.Signal(syscall.SIGKILL)
			<-w1.done
			<-s1.done
			t.Logf("killed worker 1 and server 1 (SIGKILL) after %d events", events.Load())
			close(killed)
		})
	}
	began := time.Now()
	var statuses sync.Map
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := c1
			if i%2 == 1 {
				c = c2
			}
			t0 := time.Now()
			run, err := c.CreateRun(ctx, &api.CreateRun{Model: "replay:" + runs[i].traj, Workspace: runs[i].ws, MountPath: "/testbed",
				Sandbox: "linux", Env: []string{"PATH=/testbed/.stubs:/usr/local/bin:/usr/bin:/bin", "PYTHONPATH=/testbed/src"}})
			if err != nil {
				t.Errorf("create run %d: %v", i, err)
				return
			}
			create.add(time.Since(t0))
			runs[i].id = run.ID
			ids.Store(i, run.ID)
			from := int64(1)
			for ctx.Err() == nil {
				for e, err := range c2.Events(ctx, run.ID, &client.EventsParams{From: from}) {
					if err != nil {
						break // reconnect from the next event
					}
					from = e.Seq + 1
					lag.add(time.Since(e.Time))
					if events.Add(1) == killAt {
						go kill()
					}
					if st := journal.StatusOf(e.Type); st.Terminal() {
						statuses.Store(run.ID, st)
						return
					}
				}
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	close(stop)
	bg.Wait()
	load, _ := os.ReadFile("/proc/loadavg")
	for _, p := range procs {
		p.stop()
	}
	if !single {
		select {
		case <-killed:
		default:
			t.Errorf("the kill never happened (%d events)", events.Load())
		}
	}

	// Every run: completed, its chain verified, one result per call and
	// none started twice, the recorded patch.
	store, err := journal.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var steps, overhead latencies
	var totalEvents, resumed, unknown, rerun, patches int
	for i, r := range runs {
		if r.id == "" {
			continue
		}
		st, _ := statuses.Load(r.id)
		if st != journal.StatusCompleted {
			t.Errorf("run %d (%s) ended %v", i, r.id, st)
			continue
		}
		evs, err := journal.ReadVerified(ctx, store, r.id)
		if err != nil {
			t.Errorf("run %s: %v", r.id, err)
			continue
		}
		fold, err := agent.Fold(r.id, evs)
		if err != nil {
			t.Fatal(err)
		}
		totalEvents += len(evs)
		resumed += countType(evs, journal.RunResumed)
		switch desc := checkCrashInvariants(t, fold, evs, r.ws, r.calls, false); {
		case strings.Contains(desc, "unknown"):
			unknown++
		case strings.Contains(desc, "re-run"):
			rerun++
		}
		stepTimes(evs, &steps, &overhead)
		diff, err := exec.Command("git", "-C", r.ws, "-c", "core.fsmonitor=false", "diff", "--no-ext-diff", "--no-textconv").Output()
		if err != nil {
			t.Errorf("run %s: git diff: %v", r.id, err)
			continue
		}
		if stripIndex(string(diff)) != stripIndex(r.submission) {
			t.Errorf("run %d (%s, %s): the patch differs from the recorded submission:\n%s", i, r.id, filepath.Base(r.traj), diff)
			continue
		}
		patches++
	}
	rep, err := c2.VerifyAudit(ctx, nil)
	if err != nil || !rep.OK {
		t.Errorf("audit verify: %+v, %v", rep, err)
	}
	// The survivors stop as they would in a deploy (their profiles are
	// written then).
	survivors := []*serveProc{s2}
	if !single {
		survivors = append(survivors, w2)
	}
	for _, p := range survivors {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range survivors {
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			t.Errorf("pid %d did not stop within a minute of SIGTERM", p.cmd.Process.Pid)
		}
	}

	// Where slow creations spent their time (the servers log them; read once they stopped).
	slow := 0
	for _, line := range strings.Split(s1.stderr.String()+s2.stderr.String(), "\n") {
		if strings.Contains(line, "slow run creation") {
			if slow++; slow <= 12 {
				t.Logf("server log: %s", line)
			}
		}
	}
	shape := "cluster: 2 servers, 2 workers, PostgreSQL, Temporal; kill -9 of one worker and one server"
	if single {
		shape = "single: 1 server, SQLite"
	}
	t.Logf("%s · %d runs (%d slots per worker, python stubbed for pytest/pip: %v) in %s = %.1f runs/min · %d completed with the recorded patch · %d events (%d run.resumed; runs with an outcome-unknown call %d, with a re-run read-only call %d)",
		shape, n, slots, !realPython, elapsed.Round(time.Second), float64(n)/elapsed.Minutes(), patches, totalEvents, resumed, unknown, rerun)
	t.Logf("create p50 %.0f ms p99 %.0f ms · stream lag p50 %.0f ms p99 %.0f ms · API p50 %.1f ms p99 %.1f ms (%d probes) · step p50 %.0f ms p99 %.0f ms · per-step overhead p50 %.1f ms p99 %.1f ms",
		create.pct(50), create.pct(99), lag.pct(50), lag.pct(99), probe.pct(50), probe.pct(99), probe.n(), steps.pct(50), steps.pct(99), overhead.pct(50), overhead.pct(99))
	var serverCPU, workerCPU, toolsCPU float64
	for _, p := range procs {
		t.Logf("%s: CPU %.1f s (commands it ran %.1f s), peak RSS %d MiB", p.name, p.cpu, p.children, p.peakKB/1024)
		if strings.HasPrefix(p.name, "server") {
			serverCPU += p.cpu
			toolsCPU += p.children
		} else {
			workerCPU += p.cpu
			toolsCPU += p.children
		}
	}
	if totalEvents > 0 {
		t.Logf("CPU per journal event: servers %.3f ms, workers %.3f ms (commands %.1f s in all) · load average %s",
			serverCPU*1000/float64(totalEvents), workerCPU*1000/float64(totalEvents), toolsCPU, strings.TrimSpace(string(load)))
	}
}

// stepTimes adds each step's wall time (from one model response to the
// next) and its overhead (that time minus the time its commands ran).
func stepTimes(evs []journal.Event, steps, overhead *latencies) {
	var prev time.Time
	var tools time.Duration
	started := map[string]time.Time{}
	for _, e := range evs {
		switch e.Type {
		case journal.ToolStarted:
			var p agent.ToolStarted
			json.Unmarshal(e.Payload, &p)
			started[p.CallID] = e.Time
		case journal.ToolFinished:
			var p agent.ToolFinished
			json.Unmarshal(e.Payload, &p)
			if s, ok := started[p.CallID]; ok {
				tools += e.Time.Sub(s)
			}
		case journal.ModelResponded:
			if !prev.IsZero() {
				d := e.Time.Sub(prev)
				steps.add(d)
				overhead.add(d - tools)
			}
			prev, tools = e.Time, 0
		}
	}
}

func stripIndex(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "index ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
