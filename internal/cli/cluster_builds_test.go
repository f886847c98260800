package cli_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/internal/testrun"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// startBin starts the keel binary bin with argv and waits for a line of
// its standard error starting with ready; it returns the rest of that
// line's first field (the address, for keel serve).
func startBin(t *testing.T, bin, ready string, argv ...string) (*serveProc, string) {
	t.Helper()
	cmd := exec.Command(bin, argv...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, stderr: &strings.Builder{}, done: make(chan struct{})}
	var mu sync.Mutex
	got := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if rest, ok := strings.CutPrefix(sc.Text(), ready); ok {
				f := strings.Fields(rest)
				select {
				case got <- strings.Join(f[:min(1, len(f))], ""):
				default:
				}
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
			t.Logf("%s %s (pid %d):\n%s", filepath.Base(bin), argv[0], cmd.Process.Pid, p.stderr)
			mu.Unlock()
		}
	})
	select {
	case v := <-got:
		return p, v
	case <-p.done:
		t.Fatalf("%s %s exited early:\n%s", bin, argv[0], p.stderr)
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s %s: no %q within two minutes", bin, argv[0], ready)
	}
	return nil, ""
}

// buildKeelAt builds cmd/keel from this repository at git revision rev
// (git archive, so nothing is checked out) and returns the binary.
func buildKeelAt(t *testing.T, rev string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", filepath.Join("..", ".."), "archive", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	var errOut strings.Builder
	archive.Stderr = &errOut
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, errOut.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("untar: %v", err)
	}
	bin := filepath.Join(dir, "keel-"+rev)
	build := exec.Command("go", "build", "-o", bin, "./cmd/keel")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build at %s: %v\n%s", rev, err, out)
	}
	return bin
}

// TestClusterTwoBuilds is a rolling deploy across two separately built
// binaries (skipped unless KEEL_CLUSTER_OLD_REV names the older git
// revision to build): a server and a worker of the old build start runs
// on PostgreSQL and a real Temporal dev server, one of them paused for
// an approval; with the runs in flight, a server and a worker of this
// build join, and the old ones are stopped (SIGTERM, as a deploy does).
// The approval is given through the new server. Every run completes on
// the new build from what the old one journaled: each command ran
// exactly once (the workspace log), one result per call, every chain
// verifies.
func TestClusterTwoBuilds(t *testing.T) {
	rev := os.Getenv("KEEL_CLUSTER_OLD_REV")
	if rev == "" {
		t.Skip("set KEEL_CLUSTER_OLD_REV to an older revision (see AGENTS.md)")
	}
	old := buildKeelAt(t, rev)
	setup(t)
	pg := testenv.Postgres(t)
	tp := testenv.Temporal(t)
	pol := filepath.Join(t.TempDir(), "ask-rm.cedar")
	if err := os.WriteFile(pol, []byte(testrun.AskRm), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := []string{"serve", "--addr", "127.0.0.1:0", "--workspace-root", os.TempDir(), "--db", pg, "--temporal", tp, "--adopt", "2s", "--policy", pol}
	wrk := []string{"worker", "--db", pg, "--temporal", tp, "--workspace-root", os.TempDir(), "--workers", "4", "--pin-timeout", "3s", "--step-heartbeat", "2s", "--policy", pol}
	oldSrv, oldURL := startBin(t, old, "keel serve: listening on ", srv...)
	oldWrk, _ := startBin(t, old, "keel worker: polling", wrk...)
	token := oldSrv.savedToken(t)
	cOld, err := client.New(oldURL, &client.Options{Token: token, Retry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	const runs, turns = 4, 12
	type run struct{ id, ws string }
	var rs []run
	for i := range runs {
		var cmds [][]fcall
		for k := range turns {
			cmds = append(cmds, []fcall{sh(fmt.Sprintf("echo %d-%d >> log && sleep 0.4", i, k))})
		}
		if i == 0 {
			// The first run waits for a person at turn 3.
			cmds[3] = []fcall{sh("echo x > old.log && rm old.log && echo 0-3 >> log")}
		}
		traj, _ := filepath.Abs(writeTrajectory(t, "count", append(cmds, []fcall{})...))
		ws := t.TempDir()
		r, err := cOld.CreateRun(ctx, &api.CreateRun{Model: "replay:" + traj, Workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, run{r.ID, ws})
	}
	asked := untilStopped(t, cOld, rs[0].id, 1)
	if asked.Type != journal.ApprovalRequested {
		t.Fatalf("run 0 stopped with %s", asked.Type)
	}
	for _, r := range rs[1:] {
		untilEvent(t, cOld, r.id, journal.ToolFinished)
	}

	// The deploy: this build joins, the old build leaves.
	newSrv := startServe(t, srv[1:]...)
	startWorker(t, wrk[1:]...)
	cNew := newSrv.clientWith(t, token)
	oldWrk.cmd.Process.Signal(syscall.SIGTERM)
	oldSrv.cmd.Process.Signal(syscall.SIGTERM)
	<-oldWrk.done
	<-oldSrv.done
	deployed := time.Now()
	pending, err := cNew.Approvals(ctx)
	if err != nil || len(pending) != 1 {
		t.Fatalf("approvals through the new server: %+v, %v", pending, err)
	}
	if _, err := cNew.Approve(ctx, rs[0].id, pending[0].CallID, &api.Decide{Reason: "after the deploy"}); err != nil {
		t.Fatal(err)
	}
	store, err := journal.Open(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for i, r := range rs {
		end := untilTerminal(t, cNew, r.id)
		if end.Type != journal.RunCompleted {
			t.Errorf("run %d stopped with %s", i, end.Type)
			continue
		}
		evs, err := journal.ReadVerified(ctx, store, r.id)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		st, err := agent.Fold(r.id, evs)
		if err != nil {
			t.Fatal(err)
		}
		checkOneResultPerCall(t, st)
		before, after := 0, 0
		for _, e := range evs {
			if e.Type == journal.ToolFinished {
				if e.Time.Before(deployed) {
					before++
				} else {
					after++
				}
			}
		}
		if before == 0 || after == 0 {
			t.Errorf("run %d: %d commands finished on the old build, %d on the new; want both", i, before, after)
		}
		b, _ := os.ReadFile(filepath.Join(r.ws, "log"))
		lines := strings.Fields(string(b))
		for k := range turns {
			want := fmt.Sprintf("%d-%d", i, k)
			n := 0
			for _, l := range lines {
				if l == want {
					n++
				}
			}
			if n != 1 {
				// An interrupted command is reported, not re-run: it may
				// be missing (outcome unknown), never doubled.
				if n > 1 || !synthetic(st, k) {
					t.Errorf("run %d: %q appears %d times in the log\n%s", i, want, n, b)
				}
			}
		}
		t.Logf("run %d: %d events, %d run.paused, %d run.resumed; %d commands on the old build, %d on the new", i, len(evs),
			countType(evs, journal.RunPaused), countType(evs, journal.RunResumed), before, after)
	}
}

// synthetic reports whether turn k's call got a runtime-made result (an
// interrupted call whose outcome is unknown).
func synthetic(st *agent.State, k int) bool {
	if k >= len(st.Turns) {
		return false
	}
	for _, c := range st.Turns[k].Calls {
		if c.Finished != nil && c.Finished.Synthetic {
			return true
		}
	}
	return false
}

// untilTerminal follows run id until it ends (past pauses) and returns the
// last event.
func untilTerminal(t *testing.T, c *client.Client, id string) journal.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for e, err := range c.Events(ctx, id, &client.EventsParams{From: 1}) {
		if err != nil {
			t.Fatalf("run %s: %v", id, err)
		}
		if journal.StatusOf(e.Type).Terminal() {
			return e
		}
	}
	t.Fatalf("run %s did not end", id)
	return journal.Event{}
}
