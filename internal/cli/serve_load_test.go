package cli_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// BenchmarkServeLoad starts `keel serve` as its own process and drives N
// concurrent replayed runs through the API: each run replays the 74-turn
// recorded trajectory (real tools, sandbox and journal; only the model
// is recorded) on its own small fixture workspace, is followed over
// Server-Sent Events, and any approval it asks for is granted through
// the API. Meanwhile probes read runs, the run list and the inbox at
// about 80 requests per second.
//
// It reports: runs/s and events/s (throughput), api-p50/p99-ms (the
// probes), create-p99-ms, sse-lag-p50/p99-ms (event append time to its
// arrival at the follower) and rss-MB (the server's peak resident set).
//
//	KEEL_LOAD_RUNS=25,50,100,200 KEEL_LOAD_SANDBOX=none \
//	  go test -run '^$' -bench ServeLoad -benchtime 1x -timeout 2h ./internal/cli/
//
// KEEL_LOAD_SANDBOX is none (default) or linux; KEEL_LOAD_WORKERS caps
// the executing runs (default: all N at once); KEEL_LOAD_STUBS=1 puts
// stub python, python3 and pip first on the runs' PATH (each prints one
// line), so that the replayed commands cost little and the numbers show
// the server rather than Python's start-up. It also reports the CPU
// seconds of the server process and of the commands it ran.
func BenchmarkServeLoad(b *testing.B) {
	sizes := []int{50}
	if s := os.Getenv("KEEL_LOAD_RUNS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("KEEL_LOAD_RUNS %q", s)
			}
			sizes = append(sizes, n)
		}
	}
	sb := os.Getenv("KEEL_LOAD_SANDBOX")
	if sb == "" {
		sb = "none"
	}
	traj, err := filepath.Abs(trajectory)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("runs=%d/sandbox=%s", n, sb), func(b *testing.B) {
			for range b.N {
				loadRound(b, n, sb, traj)
			}
		})
	}
}

// latencies collects durations safely.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// pct returns the p-th percentile in milliseconds.
func (l *latencies) pct(p float64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return float64(s[i].Microseconds()) / 1000
}

func (l *latencies) n() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.d)
}

// rssKB reads a VmRSS/VmHWM line of /proc/PID/status in KiB.
func rssKB(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return n
		}
	}
	return 0
}

func loadRound(b *testing.B, n int, sb, traj string) {
	home := b.TempDir()
	b.Setenv("KEEL_HOME", home)
	// Workspaces live outside KEEL_HOME: the server refuses them inside.
	wsRoot := b.TempDir()
	b.Setenv("OPENAI_API_KEY", "")
	workers := n
	if s := os.Getenv("KEEL_LOAD_WORKERS"); s != "" {
		workers, _ = strconv.Atoi(s)
	}
	srv := startServe(b, "--workers", strconv.Itoa(workers), "--sandbox", sb, "--log-level", "warn")
	// startServe passes --workers 2 first; the later flag wins.
	c := srv.apiClient(b)
	pid := srv.cmd.Process.Pid
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()

	stubs := os.Getenv("KEEL_LOAD_STUBS") == "1"
	var wss []string
	var envs [][]string
	for i := range n {
		ws := filepath.Join(wsRoot, fmt.Sprintf("ws%03d", i))
		if err := os.MkdirAll(filepath.Join(ws, "src"), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "README.md"), []byte("fixture workspace for the load benchmark\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		var env []string
		if stubs {
			bin := filepath.Join(ws, ".stubs")
			if err := os.MkdirAll(bin, 0o755); err != nil {
				b.Fatal(err)
			}
			for _, p := range []string{"python", "python3", "pip"} {
				if err := os.WriteFile(filepath.Join(bin, p), []byte("#!/bin/sh\necho \"stub $0: $*\"\n"), 0o755); err != nil {
					b.Fatal(err)
				}
			}
			dir := bin // sandbox none: host paths
			if sb == "linux" {
				dir = "/testbed/.stubs"
			}
			env = []string{"PATH=" + dir + ":/usr/local/bin:/usr/bin:/bin"}
		}
		wss = append(wss, ws)
		envs = append(envs, env)
	}

	var peakRSS atomic.Int64
	var probe, create, lag latencies
	var events atomic.Int64
	var ids sync.Map // index → run id
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { // RSS sampler
		defer bg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if kb := rssKB(pid, "VmRSS"); kb > peakRSS.Load() {
				peakRSS.Store(kb)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	for g := range 4 { // API probes, ~20 requests/s each
		bg.Add(1)
		go func() {
			defer bg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				start := time.Now()
				var err error
				switch k % 4 {
				case 0, 1:
					id, ok := ids.Load(r.IntN(n))
					if !ok {
						continue
					}
					_, err = c.Run(ctx, id.(string))
				case 2:
					_, err = c.Runs(ctx, &client.RunsParams{Limit: 50})
				case 3:
					_, err = c.Approvals(ctx)
				}
				if err != nil {
					b.Errorf("probe: %v", err)
					return
				}
				probe.add(time.Since(start))
			}
		}()
	}

	start := time.Now()
	var statuses sync.Map
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			run, err := c.CreateRun(ctx, &api.CreateRun{Model: "replay:" + traj, Workspace: wss[i], MountPath: "/testbed",
				Sandbox: sb, Env: envs[i], Limits: api.Limits{MaxSteps: new(250)}})
			if err != nil {
				b.Errorf("create run %d: %v", i, err)
				return
			}
			create.add(time.Since(t0))
			ids.Store(i, run.ID)
			for e, err := range c.Events(ctx, run.ID, nil) {
				if err != nil {
					b.Errorf("follow %s: %v", run.ID, err)
					return
				}
				lag.add(time.Since(e.Time))
				events.Add(1)
				if e.Type == journal.ApprovalRequested {
					r, err := c.Run(ctx, run.ID)
					if err == nil {
						for _, p := range r.Pending {
							_, _ = c.Approve(ctx, run.ID, p.CallID, &api.Decide{Reason: "load test"})
						}
					}
				}
				if st := journal.StatusOf(e.Type); st.Terminal() {
					statuses.Store(run.ID, st)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	bg.Wait()
	hwm := rssKB(pid, "VmHWM")
	self, children := cpuSeconds(pid)
	_ = srv.cmd.Process.Signal(syscall.SIGTERM)
	<-srv.done

	count := map[journal.Status]int{}
	statuses.Range(func(_, v any) bool { count[v.(journal.Status)]++; return true })
	b.ReportMetric(float64(n)/elapsed.Seconds(), "runs/s")
	b.ReportMetric(float64(events.Load())/elapsed.Seconds(), "events/s")
	b.ReportMetric(probe.pct(50), "api-p50-ms")
	b.ReportMetric(probe.pct(99), "api-p99-ms")
	b.ReportMetric(create.pct(99), "create-p99-ms")
	b.ReportMetric(lag.pct(50), "sse-lag-p50-ms")
	b.ReportMetric(lag.pct(99), "sse-lag-p99-ms")
	b.ReportMetric(float64(max(hwm, peakRSS.Load()))/1024, "rss-MB")
	b.ReportMetric(self, "server-cpu-s")
	b.ReportMetric(children, "tools-cpu-s")
	b.Logf("%d runs (sandbox %s, %d workers) in %s: %v; %d events; %d API probes p50 %.1f ms p99 %.1f ms; create p50 %.1f ms p99 %.1f ms; SSE lag p50 %.1f ms p99 %.1f ms; server peak RSS %d MiB; CPU: server %.1f s, commands %.1f s (stubs %v)",
		n, sb, workers, elapsed.Round(time.Millisecond), count, events.Load(), probe.n(), probe.pct(50), probe.pct(99), create.pct(50), create.pct(99),
		lag.pct(50), lag.pct(99), max(hwm, peakRSS.Load())/1024, self, children, stubs)
}

// cpuSeconds returns the user+system CPU time of process pid and of its
// reaped children (the commands it ran), from /proc/PID/stat.
func cpuSeconds(pid int) (self, children float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	// After the command: state is field 3; utime 14, stime 15, cutime
	// 16, cstime 17 (1-based, proc(5)); f[0] is field 3.
	num := func(i int) float64 { v, _ := strconv.ParseFloat(f[i-3], 64); return v / 100 } // USER_HZ
	return num(14) + num(15), num(16) + num(17)
}
