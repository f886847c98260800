package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// countingModel answers like script and closes asked[k-1] when it is
// asked its k-th request (the snapshots taken meanwhile wait for them).
type countingModel struct {
	script
	mu    sync.Mutex
	n     int
	asked []chan struct{}
}

func (c *countingModel) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	c.mu.Lock()
	if c.n < len(c.asked) {
		close(c.asked[c.n])
	}
	c.n++
	c.mu.Unlock()
	return c.script.Generate(ctx, req)
}

// waitAsked waits until the model was asked n times, or fails after a
// minute.
func (c *countingModel) waitAsked(n int) error {
	select {
	case <-c.asked[n-1]:
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("the model was not asked its request %d while the snapshot waited", n)
	}
}

// snapshots is a checkpoint hook over a workspace directory: its "tree"
// is the workspace's files (name=content), so a snapshot taken at the
// wrong moment records the wrong files.
type snapshots struct {
	mu    sync.Mutex
	dir   string
	calls int
	// wait, if set, is called with the number of each snapshot before
	// it is taken; an error fails the snapshot.
	wait func(n int) error
}

func (s *snapshots) hook(ctx context.Context, runID string, prev *agent.Snapshot) (*agent.WorkspaceCheckpoint, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	if s.wait != nil {
		if err := s.wait(n); err != nil {
			return nil, err
		}
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	tree := ""
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(s.dir, e.Name()))
		tree += fmt.Sprintf("%s=%s;", e.Name(), b)
	}
	if prev != nil && prev.Tree == tree {
		return nil, nil
	}
	return &agent.WorkspaceCheckpoint{Tree: tree, Store: "test"}, nil
}

// The workspace's snapshots are taken while the model is asked, and
// journaled where the files were so: the start's right after it, a
// batch's after its results and before the model's next response.
func TestCheckpointsWhileTheModelIsAsked(t *testing.T) {
	e := newEnv(t)
	m := &countingModel{script: script{turns: []model.Message{
		calls(tc("w1", "write", `{"path":"a.txt","content":"one"}`)),
		calls(tc("e1", "echo", `{"text":"read only"}`)),
		calls(tc("w2", "write", `{"path":"a.txt","content":"two"}`)),
		answer("done"),
	}}}
	for range 4 {
		m.asked = append(m.asked, make(chan struct{}))
	}
	// Each snapshot waits until the model was asked the request it is
	// taken beside (the start's: the first; the first batch's: the
	// second; the read-only batch takes none; the last batch's: the
	// fourth): taken before the model is asked, they fail.
	snaps := &snapshots{dir: e.ws.Root(), wait: func(n int) error { return m.waitAsked([]int{1, 2, 4}[n-1]) }}
	id := e.create(&agent.RunCreated{})
	p := e.params(m)
	p.Checkpoint = snaps.hook
	out, err := e.rt.Execute(t.Context(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("status %s %+v", out.Status, out.End)
	}
	var got []string
	for _, ev := range e.events(id) {
		s := string(ev.Type)
		if ev.Type == journal.WorkspaceCheckpoint {
			v, _ := agent.Decode(&ev)
			s += " " + v.(*agent.WorkspaceCheckpoint).Tree
		}
		got = append(got, s)
	}
	want := []string{
		"run.created",
		"workspace.checkpoint ", // the empty workspace, at the start
		"model.responded", "gate.decided", "tool.started", "tool.finished",
		"workspace.checkpoint a.txt=one;",
		"model.responded", "gate.decided", "tool.started", "tool.finished", // read only: no snapshot
		"model.responded", "gate.decided", "tool.started", "tool.finished",
		"workspace.checkpoint a.txt=onetwo;",
		"model.responded", "run.completed",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	if snaps.calls != 3 {
		t.Errorf("%d snapshots, want 3", snaps.calls)
	}
}

// A rewind journaled (workspace.restoring) whose end was not (a crash
// between the files and the journal) is closed by the next execution's
// first snapshot: with the rewind's workspace.restored when the files
// are the rewind's (it finished), else with a checkpoint of the files
// as they are that says it did not finish, journaled even when they
// are the newest checkpoint's (the rewind wrote nothing).
func TestResumeSaysWhetherAnUnfinishedRewindFinished(t *testing.T) {
	for _, finished := range []bool{true, false} {
		t.Run(fmt.Sprint("finished=", finished), func(t *testing.T) {
			e := newEnv(t)
			snaps := &snapshots{dir: e.ws.Root()}
			write := func(s string) {
				t.Helper()
				if err := os.WriteFile(filepath.Join(e.ws.Root(), "a.txt"), []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			id := e.create(&agent.RunCreated{})
			write("one")
			first, err := snaps.hook(t.Context(), id, nil)
			if err != nil {
				t.Fatal(err)
			}
			write("two")
			now, err := snaps.hook(t.Context(), id, nil)
			if err != nil {
				t.Fatal(err)
			}
			intent := &agent.WorkspaceRestoring{To: 2, Tree: first.Tree, Before: now.Tree, Store: "test", By: "ada"}
			if _, err := e.store.Append(t.Context(), id, 1,
				journal.Draft{Type: journal.WorkspaceCheckpoint, Time: time.Now(), Payload: mustJSON(first)},
				journal.Draft{Type: journal.WorkspaceCheckpoint, Time: time.Now(), Payload: mustJSON(now)},
				journal.Draft{Type: journal.WorkspaceRestoring, Time: time.Now(), Payload: mustJSON(intent)}); err != nil {
				t.Fatal(err)
			}
			st, err := agent.Fold(id, e.events(id))
			if err != nil || st.Restoring == nil || st.Restoring.Seq != 4 {
				t.Fatalf("fold of an intent without its end: %+v, %v; want it open (event 4)", st.Restoring, err)
			}
			if finished {
				write("one") // the crash came after the files were written
			}
			p := e.params(&script{turns: []model.Message{answer("done")}})
			p.Checkpoint = snaps.hook
			if _, err := e.rt.Execute(t.Context(), id, p); err != nil {
				t.Fatal(err)
			}
			evs := e.events(id)
			k := 4 // the first snapshot after the intent
			for k < len(evs) && !journal.KeepsStatus(evs[k].Type) {
				k++
			}
			if k == len(evs) {
				t.Fatal("no snapshot after the intent")
			}
			v, err := agent.Decode(&evs[k])
			if err != nil {
				t.Fatal(err)
			}
			switch x := v.(type) {
			case *agent.WorkspaceRestored:
				if !finished || x.Recovered != 4 || x.Tree != first.Tree || x.To != 2 || x.By != "ada" {
					t.Errorf("restored %+v; want it only for a finished rewind, recovered from event 4", x)
				}
			case *agent.WorkspaceCheckpoint:
				if finished || x.Unfinished != 4 || x.Tree != now.Tree {
					t.Errorf("checkpoint %+v; want it only for an unfinished rewind, of the files as they are, unfinished 4", x)
				}
			default:
				t.Errorf("event %d = %s, want the snapshot that closes the rewind", k+1, evs[k].Type)
			}
			st, err = agent.Fold(id, evs)
			if err != nil || st.Restoring != nil {
				t.Errorf("after the execution: intent %+v, %v; want it closed", st.Restoring, err)
			}
		})
	}
}
