package cluster_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
)

// teamWorkerEnv makes the test binary a worker process of the kill test:
// "TEMPORAL-ADDRESS JOURNAL-PATH CHILDREN".
const teamWorkerEnv = "KEEL_TEST_TEAM_WORKER"

func TestMain(m *testing.M) {
	if v := os.Getenv(teamWorkerEnv); v != "" {
		os.Exit(runTeamWorker(v))
	}
	os.Exit(m.Run())
}

// teamKillEnv arms a worker process of the kill test with a boundary
// ([killAt], JSON).
const teamKillEnv = "KEEL_TEST_TEAM_KILL"

// killAt is a boundary of a team's life: right after the append of an
// event of type Type by a child run (Child) or by the lead, whose
// payload holds Has, the worker process that appended it kills itself
// (SIGKILL), the first time any worker reaches it (Marker is made with
// O_EXCL).
type killAt struct {
	Type   journal.Type `json:"type"`
	Child  bool         `json:"child,omitempty"`
	Has    string       `json:"has,omitempty"`
	Marker string       `json:"marker"`
}

// killStore is a journal whose process dies at a boundary.
type killStore struct {
	*sqlite.Store
	at killAt
}

func (s *killStore) Append(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	evs, err := s.Store.Append(ctx, runID, after, drafts...)
	if err != nil || strings.Contains(runID, ".") != s.at.Child {
		return evs, err
	}
	for _, d := range drafts {
		if d.Type != s.at.Type || !strings.Contains(string(d.Payload), s.at.Has) {
			continue
		}
		f, err := os.OpenFile(s.at.Marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			break // reached before, by this worker or the other
		}
		f.Close()
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal ends the process
	}
	return evs, nil
}

// spawnedChildOf returns the child a child.spawned event names.
func spawnedChildOf(e *journal.Event) string {
	if e.Type != journal.ChildSpawned {
		return ""
	}
	var p agent.ChildSpawned
	if json.Unmarshal(e.Payload, &p) != nil {
		return ""
	}
	return p.Child
}

// runTeamWorker runs a team worker until the process is killed.
func runTeamWorker(spec string) int {
	f := strings.Fields(spec)
	n, _ := strconv.Atoi(f[2])
	c, err := cluster.Dial(context.Background(), f[0], &client.Options{Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	var kill *killAt
	if v := os.Getenv(teamKillEnv); v != "" {
		kill = &killAt{}
		if err := json.Unmarshal([]byte(v), kill); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			return 1
		}
	}
	_, w, closer, err := teamWorkerOf(f[1], teamModel{children: n}, 4, kill)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	defer closer.Close()
	os.Stderr.WriteString("polling\n")
	if err := w.Run(context.Background(), c); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	return 0
}

// TestTeamOnClusterWorkerKilled: a team on the cluster (a lead and 4
// children, each on its own workflow) with two worker processes; the
// one executing a child's command is killed with SIGKILL while it
// runs. The other worker takes the lead and the children over from the
// journal: every child is created once and delivered to the lead
// exactly once, no child's command runs twice, every chain verifies.
// startWorkerProcs starts two worker processes (this test binary, run
// as runTeamWorker by env) and kills them when the test ends, logging
// their stderr if it failed.
func startWorkerProcs(t *testing.T, env ...string) []*exec.Cmd {
	t.Helper()
	var procs []*exec.Cmd
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env...)
		var out strings.Builder
		cmd.Stderr = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			if t.Failed() {
				t.Logf("worker %d:\n%s", cmd.Process.Pid, out.String())
			}
		})
		procs = append(procs, cmd)
	}
	return procs
}

// completedLead reads and folds lead id's verified journal and requires
// it completed with n children; it returns the lead and its events.
func completedLead(ctx context.Context, t *testing.T, store journal.Store, id string, n int) (*agent.State, []journal.Event) {
	t.Helper()
	evs, err := journal.ReadVerified(ctx, store, id)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := agent.Fold(id, evs)
	if err != nil {
		t.Fatal(err)
	}
	if lead.Status != journal.StatusCompleted || len(lead.Children) != n {
		t.Fatalf("lead %s (%+v) with %d children, want completed with %d", lead.Status, lead.Ended, len(lead.Children), n)
	}
	return lead, evs
}

func TestTeamOnClusterWorkerKilled(t *testing.T) {
	const n = 4
	ctx, c, addr, path := teamCluster(t, 5*time.Minute)
	procs := startWorkerProcs(t, teamWorkerEnv+"="+addr+" "+path+" "+strconv.Itoa(n))
	_, _, store, err := teamWorker(path, n)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rt := agent.NewRuntime(store.(journal.Store), nil)
	ws := t.TempDir()
	limits := agent.Limits{MaxSteps: 30, MaxTokens: 400_000, MaxCost: 0.4, MaxToolCalls: 30, MaxChildren: n, MaxDepth: 1}
	id, _ := startLead(ctx, t, rt, c, ws, limits)
	// Kill, once the children work, the worker whose process executes
	// the first child's command (its lease holder at that moment).
	var first string
	for e, err := range journal.Follow(ctx, store.(journal.Store), id, 1, 50*time.Millisecond) {
		if err != nil {
			t.Fatal(err)
		}
		if c := spawnedChildOf(&e); c != "" {
			first = c
			break
		}
	}
	for e, err := range journal.Follow(ctx, store.(journal.Store), first, 1, 20*time.Millisecond) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Type == journal.ToolStarted {
			break
		}
	}
	holder, err := store.(journal.Locker).Holder(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	leadHolder, _ := store.(journal.Locker).Holder(ctx, id)
	victim := procs[0]
	if strings.Contains(holder, "pid "+strconv.Itoa(procs[1].Process.Pid)+" ") {
		victim = procs[1]
	}
	victim.Process.Signal(syscall.SIGKILL)
	t.Logf("killed worker pid %d while child %s's command ran (its holder %q; the lead's %q)", victim.Process.Pid, first, holder, leadHolder)
	waitEnded(ctx, t, store.(journal.Store), id, "the lead did not end")
	lead, evs := completedLead(ctx, t, store.(journal.Store), id, n)
	b, _ := os.ReadFile(filepath.Join(ws, "log.txt"))
	unknown := 0
	for _, ch := range lead.Children {
		if ch.Delivered == nil || ch.Delivered.CallID == "" {
			t.Errorf("child %s not delivered to a call: %+v", ch.ID, ch.Delivered)
			continue
		}
		cevs, err := journal.ReadVerified(ctx, store.(journal.Store), ch.ID)
		if err != nil {
			t.Fatal(err)
		}
		st, err := agent.Fold(ch.ID, cevs)
		if err != nil {
			t.Fatal(err)
		}
		if runs := strings.Count(string(b), st.Created.Task+"\n"); runs > 1 {
			t.Errorf("child %s's command ran %d times", ch.ID, runs)
		}
		for _, turn := range st.Turns {
			for _, call := range turn.Calls {
				if call.Finished != nil && strings.Contains(call.Finished.Result.Content, "unknown") {
					unknown++
				}
			}
		}
		t.Logf("child %s: %s (%s), %d events, %d run.resumed", ch.ID, ch.Delivered.Status, st.Created.Principal, len(cevs), count(cevs, journal.RunResumed))
	}
	t.Logf("lead: %d events, %d run.resumed; children's commands with an unknown outcome: %d", len(evs), count(evs, journal.RunResumed), unknown)
}

// TestTeamOnClusterKilledAtEveryBoundary: a team on the cluster (a lead
// and 3 children, each on its own workflow) with two worker processes;
// at each boundary of the team's life the worker that reaches it is
// killed (SIGKILL) right after its append, and the other worker goes on
// from the journal. In every case the lead completes, every child is
// created once and its result delivered to the lead exactly once, no
// child's command runs twice, the lead counts each child's spend once
// (what it used is its own plus what its children used), the tree stays
// within the root's limits, and every chain verifies.
func TestTeamOnClusterKilledAtEveryBoundary(t *testing.T) {
	if testing.Short() {
		t.Skip("Temporal dev server")
	}
	addr := testenv.Temporal(t)
	const n = 3
	for _, tt := range []struct {
		name string
		at   killAt
	}{
		{"spawn started, not reserved", killAt{Type: journal.ToolStarted, Has: `"spawn_agent"`}},
		{"child spawned, not started", killAt{Type: journal.ChildSpawned}},
		{"child mid-run", killAt{Type: journal.ToolStarted, Child: true, Has: `"bash"`}},
		{"child finished, not delivered", killAt{Type: journal.RunCompleted, Child: true}},
		{"parent waiting for children", killAt{Type: journal.RunPaused, Has: `"children"`}},
		{"parent after a delivery", killAt{Type: journal.ChildDelivered}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "j.db")
			at := tt.at
			at.Marker = filepath.Join(dir, "killed")
			spec, _ := json.Marshal(at)
			ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
			defer cancel()
			c := dialTeam(ctx, t, addr)
			startWorkerProcs(t, teamWorkerEnv+"="+addr+" "+path+" "+strconv.Itoa(n), teamKillEnv+"="+string(spec))
			store, err := sqlite.Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			rt := agent.NewRuntime(store, nil)
			ws := t.TempDir()
			limits := agent.Limits{MaxSteps: 30, MaxTokens: 400_000, MaxCost: 0.4, MaxToolCalls: 30, MaxChildren: n, MaxDepth: 1}
			id, _ := startLead(ctx, t, rt, c, ws, limits)
			waitEnded(ctx, t, store, id, "the lead did not end")
			if _, err := os.Stat(at.Marker); err != nil {
				t.Errorf("no worker reached the boundary (%v): nothing was killed", err)
			}
			lead, evs := completedLead(ctx, t, store, id, n)
			var results strings.Builder
			for _, turn := range lead.Turns {
				for _, call := range turn.Calls {
					if call.Finished != nil {
						results.WriteString(call.Finished.Result.Content)
					}
				}
			}
			b, _ := os.ReadFile(filepath.Join(ws, "log.txt"))
			tree := lead.Own()
			for _, ch := range lead.Children {
				if d := ch.Delivered; d == nil || d.CallID == "" || d.Status != agent.ChildCompleted {
					t.Errorf("child %s delivered %+v, want completed to a call", ch.ID, d)
					continue
				}
				cevs, err := journal.ReadVerified(ctx, store, ch.ID)
				if err != nil {
					t.Fatal(err)
				}
				st, err := agent.Fold(ch.ID, cevs)
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Count(results.String(), st.Created.Task+" done"); got != 1 {
					t.Errorf("child %s's result is in the lead's call results %d times, want once", ch.ID, got)
				}
				if runs := strings.Count(string(b), st.Created.Task+"\n"); runs > 1 {
					t.Errorf("child %s's command ran %d times", ch.ID, runs)
				}
				own := st.Own()
				if d := ch.Delivered.Spend; d.Steps != own.Steps || d.ToolCalls != own.ToolCalls || d.Tokens != own.Tokens {
					t.Errorf("child %s delivered spend %s, its journal says %s", ch.ID, d, own)
				}
				tree.Steps += own.Steps
				tree.ToolCalls += own.ToolCalls
				tree.Tokens += own.Tokens
				tree.Cost += own.Cost
			}
			if u := lead.Used(); u.Steps != tree.Steps || u.ToolCalls != tree.ToolCalls || u.Tokens != tree.Tokens {
				t.Errorf("the lead counts %s, the tree's journals %s", u, tree)
			}
			if tree.Steps > limits.MaxSteps || tree.ToolCalls > limits.MaxToolCalls || tree.Tokens > limits.MaxTokens || tree.Cost > limits.MaxCost {
				t.Errorf("the tree spent %s, beyond the root's limits %s", tree, limits)
			}
			t.Logf("lead: %d events, %d run.resumed, %d paused for children; tree spent %s", len(evs), count(evs, journal.RunResumed), count(evs, journal.RunPaused), tree)
		})
	}
}
